#include "cost_model/activation_memory_fit.h"

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cost_model/memory_model.h"
#include "cost_model/sub_model_fit.h"

namespace dcp {
namespace {

constexpr char kName[] = "activation_memory";

// Why `samples` cannot tell the memory terms apart, or "" when they can.
std::string WhyMemorySamplesFallShort(
    const std::vector<ProfileSample>& samples) {
  std::vector<double> token_counts;
  bool without_recompute = false;
  bool with_recompute = false;
  for (const ProfileSample& s : samples) {
    (s.checkpointed_layers == 0 ? without_recompute : with_recompute) = true;
    if (std::find(token_counts.begin(), token_counts.end(), s.tokens) ==
        token_counts.end()) {
      token_counts.push_back(s.tokens);
    }
  }
  // Enough for the most parameters the fit may have (static, activation,
  // logits, backward working set).
  constexpr size_t kNeeded = 2 * 4;
  if (samples.size() < kNeeded) {
    return absl::StrCat(samples.size(), " samples, need at least ", kNeeded,
                        "; keeping defaults");
  }
  if (token_counts.size() < 2) {
    return absl::StrCat(
        "samples at one token count (", token_counts.front(),
        ") cannot tell static from per-token bytes; keeping defaults");
  }
  if (!(without_recompute && with_recompute)) {
    return absl::StrCat(
        "samples only ", without_recompute ? "without" : "with",
        " recompute cannot tell activation from checkpoint bytes (profile "
        "k = 0 and some k > 0); keeping defaults");
  }
  return "";
}

// What every round of the fit holds fixed.
struct MemoryFitTerms {
  int layers = 0;
  // Static bytes the per-parameter terms predict; the fitted constant's
  // excess over them is the fixed runtime overhead.
  double model_state_bytes = 0;
  // Activation minus selective bytes per token per layer (kept).
  double selective_saving = 0;
  // Checkpoint bytes per token per layer (kept).
  double checkpoint = 0;
};

// Which columns one round fits besides [static, activation].
struct MemoryColumns {
  bool fit_logits = false;
  bool fit_working = false;
};

// The round's linear problem: samples in the recompute phase (`phases[i]`)
// or at the end of forward; terms not fitted come from `candidate`.
LinearProblem MemoryProblem(const std::vector<ProfileSample>& samples,
                            const std::vector<bool>& phases,
                            const MemoryFitTerms& terms,
                            const MemoryColumns& columns,
                            const MemoryParams& candidate) {
  LinearProblem problem;
  for (size_t i = 0; i < samples.size(); ++i) {
    const ProfileSample& s = samples[i];
    const double t = s.tokens;
    const int k = s.checkpointed_layers;
    // [static, activation, (logits), (backward working set)]
    std::vector<double> row = {1, phases[i] ? t : t * (terms.layers - k)};
    double offset = t * k * terms.checkpoint;
    const double logits_column = phases[i] ? 0 : t;
    if (columns.fit_logits) {
      row.push_back(logits_column);
    } else {
      offset += logits_column * candidate.logits_bytes_per_token;
    }
    if (columns.fit_working) row.push_back(phases[i] ? t : 0);
    problem.Add(std::move(row), offset, s.measured_bytes);
  }
  return problem;
}

// Checks a round's coefficients and, when physical, writes them into `next`
// (which starts as `candidate`).
ApplyFn ApplyMemoryCoefficients(const MemoryFitTerms& terms,
                                const MemoryColumns& columns,
                                const MemoryParams& candidate,
                                MemoryParams& next) {
  return [&terms, columns, &candidate,
          &next](const std::vector<double>& c) -> std::string {
    double fixed_bytes = c[0] - terms.model_state_bytes;
    // A shortfall within rounding of the model state is no overhead.
    if (fixed_bytes < 0 && fixed_bytes >= -1e-9 * terms.model_state_bytes) {
      fixed_bytes = 0;
    }
    if (fixed_bytes < 0) {
      return absl::StrCat("static bytes ", c[0],
                          " are below the model state's ",
                          terms.model_state_bytes);
    }
    if (c[1] <= 0 || c[1] < terms.selective_saving) {
      return absl::StrCat("activation bytes per token per layer ", c[1],
                          " are below the selective-recompute saving ",
                          terms.selective_saving, " or not positive");
    }
    size_t next_column = 2;
    const double logits = columns.fit_logits ? c[next_column++]
                                             : candidate.logits_bytes_per_token;
    const double working = columns.fit_working
                               ? c[next_column++]
                               : candidate.backward_working_bytes_per_token;
    if (logits < 0) {
      return absl::StrCat("logits bytes per token ", logits, " are negative");
    }
    if (working < 0) {
      return absl::StrCat("backward working bytes per token ", working,
                          " are negative");
    }
    next.fixed_bytes = fixed_bytes;
    next.activation_bytes_per_token_per_layer = c[1];
    next.selective_bytes_per_token_per_layer = c[1] - terms.selective_saving;
    next.logits_bytes_per_token = logits;
    next.backward_working_bytes_per_token = working;
    return "";
  };
}

}  // namespace

ModelFitReport FitActivationMemory(const ModelSpec& model,
                                   const ClusterSpec& cluster,
                                   const CostParams& defaults,
                                   const std::vector<ProfileSample>& samples,
                                   MemoryParams& memory) {
  ModelFitReport report;
  report.name = kName;
  report.num_samples = static_cast<int>(samples.size());
  if (std::string why = WhyMemorySamplesFallShort(samples); !why.empty()) {
    report.note = std::move(why);
    return report;
  }
  MemoryParams per_parameter_only = defaults.memory;
  per_parameter_only.fixed_bytes = 0;
  // Measured peaks are the allocator's (or the tensors'): communicators
  // live outside it and are no part of what was measured.
  per_parameter_only.communicator_bytes = 0;
  MemoryFitTerms terms;
  terms.layers = model.num_layers;
  terms.model_state_bytes =
      MemoryModel(model, per_parameter_only, cluster.NumGpus()).StaticBytes();
  terms.selective_saving =
      defaults.memory.activation_bytes_per_token_per_layer -
      defaults.memory.selective_bytes_per_token_per_layer;
  terms.checkpoint = defaults.memory.checkpoint_bytes_per_token_per_layer;

  MemoryParams candidate = defaults.memory;
  auto in_recompute_phase = [&](const ProfileSample& s) {
    const int k = s.checkpointed_layers;
    return k > 0 && candidate.activation_bytes_per_token_per_layer +
                            candidate.backward_working_bytes_per_token >
                        (terms.layers - k) *
                                candidate.activation_bytes_per_token_per_layer +
                            candidate.logits_bytes_per_token;
  };
  std::vector<bool> phases;
  for (int round = 0; round < 8; ++round) {
    std::vector<bool> assigned;
    std::vector<int> forward_end_layers;
    for (const ProfileSample& s : samples) {
      assigned.push_back(in_recompute_phase(s));
      if (!assigned.back() &&
          std::find(forward_end_layers.begin(), forward_end_layers.end(),
                    s.checkpointed_layers) == forward_end_layers.end()) {
        forward_end_layers.push_back(s.checkpointed_layers);
      }
    }
    if (assigned == phases) break;
    phases = assigned;
    MemoryColumns columns;
    columns.fit_working =
        std::find(phases.begin(), phases.end(), true) != phases.end();
    // One recompute setting at the end of forward cannot tell the logits
    // bytes from the layers': they are kept then.
    columns.fit_logits = forward_end_layers.size() >= 2;
    const int parameters =
        2 + (columns.fit_logits ? 1 : 0) + (columns.fit_working ? 1 : 0);
    MemoryParams next = candidate;
    report =
        FitSubModel(kName, parameters, /*secondary_column=*/-1,
                    MemoryProblem(samples, phases, terms, columns, candidate),
                    ApplyMemoryCoefficients(terms, columns, candidate, next));
    if (report.used_defaults) return report;
    candidate = next;
  }
  memory.fixed_bytes = candidate.fixed_bytes;
  memory.activation_bytes_per_token_per_layer =
      candidate.activation_bytes_per_token_per_layer;
  memory.selective_bytes_per_token_per_layer =
      candidate.selective_bytes_per_token_per_layer;
  memory.logits_bytes_per_token = candidate.logits_bytes_per_token;
  memory.backward_working_bytes_per_token =
      candidate.backward_working_bytes_per_token;
  return report;
}

}  // namespace dcp

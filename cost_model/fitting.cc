// About 760 lines, over the ~600 guideline: every sub-model's fit (GEMM,
// attention, the five collectives inside and across nodes, activation
// memory; whole micro-batches live in micro_batch_fit.cc) shares the sample
// sorting, the least-squares driver and the report format defined here;
// splitting them would scatter one procedure.

#include "cost_model/fitting.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cost_model/least_squares.h"
#include "cost_model/micro_batch_fit.h"
#include "cost_model/sp_micro_batch_fit.h"

namespace dcp {

ProfileSample MicroBatchSample(const MicroBatchShape &shape,
                               int checkpointed_layers,
                               double measured_seconds) {
  ProfileSample sample;
  sample.op = ProfileSample::Op::kMicroBatch;
  sample.tokens = static_cast<double>(shape.tokens_per_rank);
  sample.sum_lengths = static_cast<double>(shape.sum_lengths);
  sample.sum_squared_lengths = shape.sum_squared_lengths;
  sample.num_sequences = shape.num_sequences;
  sample.checkpointed_layers = checkpointed_layers;
  sample.measured_seconds = measured_seconds;
  return sample;
}

MicroBatchShape ShapeOfMicroBatchSample(const ProfileSample &sample) {
  MicroBatchShape shape;
  shape.sp_size =
      sample.op == ProfileSample::Op::kSpMicroBatch ? sample.group_size : 1;
  shape.tokens_per_rank = static_cast<int64_t>(sample.tokens);
  shape.sum_lengths = static_cast<int64_t>(sample.sum_lengths);
  shape.sum_squared_lengths = sample.sum_squared_lengths;
  shape.num_sequences = sample.num_sequences;
  return shape;
}

ProfileSample SpMicroBatchSample(const MicroBatchShape &shape, bool inter_node,
                                 int checkpointed_layers,
                                 double measured_seconds,
                                 double communication_seconds) {
  ProfileSample sample =
      MicroBatchSample(shape, checkpointed_layers, measured_seconds);
  sample.op = ProfileSample::Op::kSpMicroBatch;
  sample.group_size = shape.sp_size;
  sample.inter_node = inter_node;
  sample.communication_seconds = communication_seconds;
  return sample;
}

const char *ProfileOpName(ProfileSample::Op op) {
  switch (op) {
    case ProfileSample::Op::kGemm:
      return "gemm";
    case ProfileSample::Op::kAttentionForward:
      return "attention_forward";
    case ProfileSample::Op::kAttentionBackward:
      return "attention_backward";
    case ProfileSample::Op::kAllToAll:
      return "all_to_all";
    case ProfileSample::Op::kAllReduce:
      return "all_reduce";
    case ProfileSample::Op::kActivationMemory:
      return "activation_memory";
    case ProfileSample::Op::kReduceScatter:
      return "reduce_scatter";
    case ProfileSample::Op::kAllGather:
      return "all_gather";
    case ProfileSample::Op::kMicroBatch:
      return "micro_batch";
    case ProfileSample::Op::kOptimizerStep:
      return "optimizer_step";
    case ProfileSample::Op::kSpMicroBatch:
      return "sp_micro_batch";
  }
  return "unknown";
}

namespace {

absl::Status ValidateSample(const ProfileSample &sample, size_t index,
                            int num_layers) {
  auto bad = [&](absl::string_view field, auto value,
                 absl::string_view requirement) {
    return absl::InvalidArgumentError(absl::StrCat(
        "profile sample ", index, " (", ProfileOpName(sample.op), "): ", field,
        " = ", value, " ", requirement, "; fix or drop the sample"));
  };
  const std::pair<const char *, double> doubles[] = {
      {"flops", sample.flops},
      {"tokens", sample.tokens},
      {"sum_squared_lengths", sample.sum_squared_lengths},
      {"sum_lengths", sample.sum_lengths},
      {"bytes", sample.bytes},
      {"measured_seconds", sample.measured_seconds},
      {"measured_bytes", sample.measured_bytes},
      {"communication_seconds", sample.communication_seconds},
  };
  for (const auto &[field, value] : doubles) {
    if (!std::isfinite(value) || value < 0) {
      return bad(field, value, "must be a finite non-negative number");
    }
  }
  switch (sample.op) {
    case ProfileSample::Op::kGemm:
      if (sample.flops <= 0) return bad("flops", sample.flops, "must be > 0");
      if (sample.tokens <= 0)
        return bad("tokens", sample.tokens, "must be > 0");
      break;
    case ProfileSample::Op::kAttentionForward:
    case ProfileSample::Op::kAttentionBackward:
      if (sample.flops <= 0) return bad("flops", sample.flops, "must be > 0");
      if (sample.sum_squared_lengths <= 0)
        return bad("sum_squared_lengths", sample.sum_squared_lengths,
                   "must be > 0");
      if (sample.sum_lengths <= 0)
        return bad("sum_lengths", sample.sum_lengths, "must be > 0");
      break;
    case ProfileSample::Op::kAllToAll:
    case ProfileSample::Op::kAllReduce:
    case ProfileSample::Op::kReduceScatter:
    case ProfileSample::Op::kAllGather:
      if (sample.group_size < 2)
        return bad("group_size", sample.group_size,
                   "must be at least 2 for a collective");
      break;
    case ProfileSample::Op::kActivationMemory:
      if (sample.tokens <= 0)
        return bad("tokens", sample.tokens, "must be > 0");
      if (sample.checkpointed_layers < 0 ||
          sample.checkpointed_layers > num_layers)
        return bad(
            "checkpointed_layers", sample.checkpointed_layers,
            absl::StrCat("must be in [0, num_layers = ", num_layers, "]"));
      if (sample.measured_bytes <= 0)
        return bad("measured_bytes", sample.measured_bytes, "must be > 0");
      return absl::OkStatus();
    case ProfileSample::Op::kMicroBatch:
    case ProfileSample::Op::kSpMicroBatch: {
      const bool sp = sample.op == ProfileSample::Op::kSpMicroBatch;
      if (sample.tokens <= 0)
        return bad("tokens", sample.tokens, "must be > 0");
      if (sample.num_sequences < 1)
        return bad("num_sequences", sample.num_sequences, "must be >= 1");
      if (sample.sum_lengths < sample.num_sequences)
        return bad("sum_lengths", sample.sum_lengths,
                   "must be at least one token per sequence");
      if (!sp && sample.group_size != 1)
        return bad("group_size", sample.group_size,
                   "must be 1 (micro-batches over SP groups are "
                   "sp_micro_batch samples)");
      if (sp && sample.group_size < 2)
        return bad("group_size", sample.group_size,
                   "must be at least 2 (SP 1 micro-batches are micro_batch "
                   "samples)");
      if (sample.checkpointed_layers < 0 ||
          sample.checkpointed_layers > num_layers)
        return bad(
            "checkpointed_layers", sample.checkpointed_layers,
            absl::StrCat("must be in [0, num_layers = ", num_layers, "]"));
      if (sample.communication_seconds > sample.measured_seconds)
        return bad("communication_seconds", sample.communication_seconds,
                   absl::StrCat("must be at most measured_seconds = ",
                                sample.measured_seconds));
      break;
    }
    case ProfileSample::Op::kOptimizerStep:
      break;
    default:
      return bad("op", static_cast<int>(sample.op), "is not a known op");
  }
  if (sample.measured_seconds <= 0)
    return bad("measured_seconds", sample.measured_seconds, "must be > 0");
  return absl::OkStatus();
}

// One sub-model's samples in linear form: measured[i] is predicted by
// rows[i] . coefficients + offsets[i].
struct LinearProblem {
  std::vector<std::vector<double>> rows;
  std::vector<double> offsets;
  std::vector<double> measured;

  void Add(std::vector<double> row, double offset, double measured_value) {
    rows.push_back(std::move(row));
    offsets.push_back(offset);
    measured.push_back(measured_value);
  }
  int size() const { return static_cast<int>(rows.size()); }
};

// Checks fitted coefficients and, when physical, writes them into the
// parameters; otherwise returns why not (and writes nothing).
using ApplyFn = std::function<std::string(const std::vector<double> &)>;

// Fits `problem` minimising relative error against the measured values
// (row i weighted by 1/measured[i]^2) and applies the coefficients.
// `secondary_column` (or -1) is a small additive term (an overhead or a
// latency) that noise may push below zero; it may be held at zero instead.
ModelFitReport FitSubModel(std::string name, int num_parameters,
                           int secondary_column, const LinearProblem &problem,
                           const ApplyFn &apply) {
  ModelFitReport report;
  report.name = std::move(name);
  report.num_samples = problem.size();
  const int needed = 2 * num_parameters;
  if (problem.size() < needed) {
    report.note = absl::StrCat(problem.size(), " samples, need at least ",
                               needed, "; keeping defaults");
    return report;
  }
  // Scaling each row by 1/measured and solving without weights gives the
  // relative-error weighting with respect to the measured value even where
  // an offset (a known term) is subtracted from the target. `dropped` (or
  // -1) is a column held at zero.
  auto solve = [&](int dropped, int skipped_row =
                                    -1) -> absl::StatusOr<std::vector<double>> {
    std::vector<std::vector<double>> scaled_rows;
    std::vector<double> scaled_targets;
    scaled_rows.reserve(problem.rows.size());
    for (int i = 0; i < problem.size(); ++i) {
      if (i == skipped_row) continue;
      const double scale = 1.0 / problem.measured[i];
      std::vector<double> row;
      for (size_t j = 0; j < problem.rows[i].size(); ++j) {
        if (static_cast<int>(j) != dropped) {
          row.push_back(problem.rows[i][j] * scale);
        }
      }
      scaled_rows.push_back(std::move(row));
      scaled_targets.push_back((problem.measured[i] - problem.offsets[i]) *
                               scale);
    }
    absl::StatusOr<LeastSquaresFit> fit =
        FitLeastSquares(scaled_rows, scaled_targets,
                        LeastSquaresOptions{/*relative_error=*/false});
    if (!fit.ok()) return fit.status();
    std::vector<double> coefficients = fit->coefficients;
    if (dropped >= 0) coefficients.insert(coefficients.begin() + dropped, 0.0);
    for (double c : coefficients) {
      if (!std::isfinite(c)) {
        return absl::InternalError("fit gave a non-finite coefficient");
      }
    }
    return coefficients;
  };
  absl::StatusOr<std::vector<double>> coefficients = solve(/*dropped=*/-1);
  if (!coefficients.ok()) {
    report.note =
        absl::StrCat("least-squares fit failed (",
                     coefficients.status().message(), "); keeping defaults");
    return report;
  }
  // Relative errors of a candidate's predictions over the samples.
  auto errors_of = [&](const std::vector<double> &candidate) {
    double sum_squares = 0;
    double max_error = 0;
    for (int i = 0; i < problem.size(); ++i) {
      double predicted = problem.offsets[i];
      for (size_t j = 0; j < problem.rows[i].size(); ++j) {
        predicted += problem.rows[i][j] * candidate[j];
      }
      const double error =
          std::abs(predicted - problem.measured[i]) / problem.measured[i];
      sum_squares += error * error;
      max_error = std::max(max_error, error);
    }
    return std::pair<double, double>{std::sqrt(sum_squares / problem.size()),
                                     max_error};
  };
  std::string constrained;
  int held_at_zero = -1;
  // `apply` checks a candidate and, only when it is physical, writes it.
  if (std::string why = apply(*coefficients); !why.empty()) {
    // A noisy measurement can push the small term below zero; the best
    // physical fit then holds it at zero, if that still explains the
    // samples (else it is no better than the defaults).
    constexpr double kMaxConstrainedRmsError = 0.5;
    absl::StatusOr<std::vector<double>> retry =
        secondary_column >= 0
            ? solve(secondary_column)
            : absl::StatusOr<std::vector<double>>(
                  absl::FailedPreconditionError("no term may be held at 0"));
    if (!retry.ok() || errors_of(*retry).first > kMaxConstrainedRmsError ||
        !apply(*retry).empty()) {
      report.note =
          absl::StrCat("non-physical fit: ", why, "; keeping defaults");
      return report;
    }
    coefficients = std::move(retry);
    held_at_zero = secondary_column;
    constrained = absl::StrCat(" with coefficient ", secondary_column,
                               " held at 0 (unconstrained: ", why, ")");
  }
  std::tie(report.rms_relative_error, report.max_relative_error) =
      errors_of(*coefficients);
  // Leave-one-out: each sample predicted by the same fit of the others.
  if (problem.size() > needed) {
    double sum_squares = 0;
    int held_out = 0;
    for (int i = 0; i < problem.size(); ++i) {
      absl::StatusOr<std::vector<double>> without = solve(held_at_zero, i);
      if (!without.ok()) continue;
      double predicted = problem.offsets[i];
      for (size_t j = 0; j < problem.rows[i].size(); ++j) {
        predicted += problem.rows[i][j] * (*without)[j];
      }
      const double error =
          std::abs(predicted - problem.measured[i]) / problem.measured[i];
      sum_squares += error * error;
      ++held_out;
    }
    if (held_out > 0) {
      report.held_out_samples = held_out;
      report.held_out_rms_relative_error = std::sqrt(sum_squares / held_out);
    }
  }
  report.used_defaults = false;
  report.note =
      absl::StrCat("fitted to ", problem.size(), " samples", constrained);
  return report;
}

// time = flops/P * (1 + half/size) fitted as [1/P, half/P].
ApplyFn ApplyRateCurve(double *flops_per_second, double *half,
                       absl::string_view half_name) {
  return [=](const std::vector<double> &c) -> std::string {
    if (c[0] <= 0) {
      return absl::StrCat("1/rate = ", c[0], " s/FLOP is not positive");
    }
    if (c[1] < 0) {
      return absl::StrCat(half_name, " ", c[1] / c[0], " is negative");
    }
    *flops_per_second = 1.0 / c[0];
    *half = c[1] / c[0];
    return "";
  };
}

// time = latency + bus_bytes / bandwidth fitted as [latency, 1/bandwidth].
ApplyFn ApplyAlphaBeta(double *latency_seconds, double *bus_bytes_per_second) {
  return [=](const std::vector<double> &c) -> std::string {
    if (c[0] < 0) return absl::StrCat("latency ", c[0], " s is negative");
    if (c[1] <= 0) {
      return absl::StrCat("1/bandwidth = ", c[1], " s/B is not positive");
    }
    *latency_seconds = c[0];
    *bus_bytes_per_second = 1.0 / c[1];
    return "";
  };
}

// Bus bytes of a collective sample, as CommModel counts them (for the
// reduce-scatter and all-gather `bytes` is the whole buffer, as for the
// all-reduce).
double BusBytes(const ProfileSample &sample) {
  const double n = sample.group_size;
  const double factor = sample.op == ProfileSample::Op::kAllReduce ? 2.0 : 1.0;
  return factor * sample.bytes * (n - 1) / n;
}

// The activation-memory sub-model: each sample's peak is the static bytes
// plus tokens times MemoryModel::ActivationBytesPerToken(k), whose two
// phases (end of forward; recompute of layer k) are each linear in the
// parameters. Samples are assigned to the phase the candidate parameters
// say dominates, the linear problem is solved, and the assignment repeated
// until it is stable. The checkpoint bytes (a layer's input) are kept:
// together with the activation and logits bytes they are determined only up
// to one degree of freedom by the end-of-forward phase.
ModelFitReport FitActivationMemory(const ModelSpec &model,
                                   const ClusterSpec &cluster,
                                   const CostParams &defaults,
                                   const std::vector<ProfileSample> &samples,
                                   MemoryParams &memory) {
  const char *const kName = "activation_memory";
  const int layers = model.num_layers;
  ModelFitReport report;
  report.name = kName;
  report.num_samples = static_cast<int>(samples.size());
  std::vector<double> token_counts;
  bool without_recompute = false;
  bool with_recompute = false;
  for (const ProfileSample &s : samples) {
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
    report.note = absl::StrCat(samples.size(), " samples, need at least ",
                               kNeeded, "; keeping defaults");
    return report;
  }
  if (token_counts.size() < 2) {
    report.note = absl::StrCat(
        "samples at one token count (", token_counts.front(),
        ") cannot tell static from per-token bytes; keeping defaults");
    return report;
  }
  if (!(without_recompute && with_recompute)) {
    report.note = absl::StrCat(
        "samples only ", without_recompute ? "without" : "with",
        " recompute cannot tell activation from checkpoint bytes (profile "
        "k = 0 and some k > 0); keeping defaults");
    return report;
  }
  // Static bytes the per-parameter terms predict; the fitted constant's
  // excess over them is the fixed runtime overhead.
  MemoryParams per_parameter_only = defaults.memory;
  per_parameter_only.fixed_bytes = 0;
  // Measured peaks are the allocator's (or the tensors'): communicators
  // live outside it and are no part of what was measured.
  per_parameter_only.communicator_bytes = 0;
  const double model_state_bytes =
      MemoryModel(model, per_parameter_only, cluster.NumGpus()).StaticBytes();
  const double selective_saving =
      defaults.memory.activation_bytes_per_token_per_layer -
      defaults.memory.selective_bytes_per_token_per_layer;
  const double checkpoint =
      defaults.memory.checkpoint_bytes_per_token_per_layer;

  MemoryParams candidate = defaults.memory;
  auto in_recompute_phase = [&](const ProfileSample &s) {
    const int k = s.checkpointed_layers;
    return k > 0 &&
           candidate.activation_bytes_per_token_per_layer +
                   candidate.backward_working_bytes_per_token >
               (layers - k) * candidate.activation_bytes_per_token_per_layer +
                   candidate.logits_bytes_per_token;
  };
  std::vector<bool> phases;
  for (int round = 0; round < 8; ++round) {
    std::vector<bool> assigned;
    std::vector<int> forward_end_layers;
    for (const ProfileSample &s : samples) {
      assigned.push_back(in_recompute_phase(s));
      if (!assigned.back() &&
          std::find(forward_end_layers.begin(), forward_end_layers.end(),
                    s.checkpointed_layers) == forward_end_layers.end()) {
        forward_end_layers.push_back(s.checkpointed_layers);
      }
    }
    if (assigned == phases) break;
    phases = assigned;
    const bool fit_working =
        std::find(phases.begin(), phases.end(), true) != phases.end();
    // One recompute setting at the end of forward cannot tell the logits
    // bytes from the layers': they are kept then.
    const bool fit_logits = forward_end_layers.size() >= 2;
    LinearProblem problem;
    for (size_t i = 0; i < samples.size(); ++i) {
      const ProfileSample &s = samples[i];
      const double t = s.tokens;
      const int k = s.checkpointed_layers;
      // [static, activation, (logits), (backward working set)]
      std::vector<double> row = {1, phases[i] ? t : t * (layers - k)};
      double offset = t * k * checkpoint;
      const double logits_column = phases[i] ? 0 : t;
      if (fit_logits) {
        row.push_back(logits_column);
      } else {
        offset += logits_column * candidate.logits_bytes_per_token;
      }
      if (fit_working) row.push_back(phases[i] ? t : 0);
      problem.Add(std::move(row), offset, s.measured_bytes);
    }
    const int parameters = 2 + (fit_logits ? 1 : 0) + (fit_working ? 1 : 0);
    MemoryParams next = candidate;
    report = FitSubModel(
        kName, parameters, /*secondary_column=*/-1, problem,
        [&](const std::vector<double> &c) -> std::string {
          double fixed_bytes = c[0] - model_state_bytes;
          // A shortfall within rounding of the model state is no overhead.
          if (fixed_bytes < 0 && fixed_bytes >= -1e-9 * model_state_bytes) {
            fixed_bytes = 0;
          }
          if (fixed_bytes < 0) {
            return absl::StrCat("static bytes ", c[0],
                                " are below the model state's ",
                                model_state_bytes);
          }
          if (c[1] <= 0 || c[1] < selective_saving) {
            return absl::StrCat("activation bytes per token per layer ", c[1],
                                " are below the selective-recompute saving ",
                                selective_saving, " or not positive");
          }
          size_t next_column = 2;
          const double logits =
              fit_logits ? c[next_column++] : candidate.logits_bytes_per_token;
          const double working =
              fit_working ? c[next_column++]
                          : candidate.backward_working_bytes_per_token;
          if (logits < 0) {
            return absl::StrCat("logits bytes per token ", logits,
                                " are negative");
          }
          if (working < 0) {
            return absl::StrCat("backward working bytes per token ", working,
                                " are negative");
          }
          next.fixed_bytes = fixed_bytes;
          next.activation_bytes_per_token_per_layer = c[1];
          next.selective_bytes_per_token_per_layer = c[1] - selective_saving;
          next.logits_bytes_per_token = logits;
          next.backward_working_bytes_per_token = working;
          return "";
        });
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

// Standard normal deviates by the Box-Muller transform over a seeded
// std::mt19937_64 (both deviates of each pair are used). Deterministic.
class NormalSource {
 public:
  static constexpr double kPi = 3.14159265358979323846;

  explicit NormalSource(uint64_t seed) : engine_(seed) {}

  double Next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = 1.0 - Uniform();  // (0, 1]: log is finite.
    const double u2 = Uniform();
    const double radius = std::sqrt(-2.0 * std::log(u1));
    const double angle = 2.0 * kPi * u2;
    spare_ = radius * std::sin(angle);
    has_spare_ = true;
    return radius * std::cos(angle);
  }

 private:
  // Uniform on [0, 1) with 53 random bits.
  double Uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

  std::mt19937_64 engine_;
  bool has_spare_ = false;
  double spare_ = 0;
};

}  // namespace

absl::StatusOr<CostModelFit> FitCostModel(
    const ModelSpec &model, const ClusterSpec &cluster,
    const CostParams &defaults, absl::Span<const ProfileSample> samples) {
  if (absl::Status s = ValidateModelSpec(model); !s.ok()) return s;
  if (absl::Status s = ValidateClusterSpec(cluster); !s.ok()) return s;
  for (size_t i = 0; i < samples.size(); ++i) {
    if (absl::Status s = ValidateSample(samples[i], i, model.num_layers);
        !s.ok()) {
      return s;
    }
  }

  LinearProblem gemm, attention_forward, attention_backward;
  LinearProblem all_to_all_intra, all_to_all_inter;
  LinearProblem all_reduce_intra, all_reduce_inter;
  LinearProblem reduce_scatter_intra, reduce_scatter_inter;
  LinearProblem all_gather_intra, all_gather_inter;
  std::vector<ProfileSample> memory_samples;
  std::vector<ProfileSample> micro_batch_samples;
  std::vector<ProfileSample> optimizer_samples;
  std::vector<ProfileSample> sp_micro_batch_samples;
  for (const ProfileSample &s : samples) {
    switch (s.op) {
      case ProfileSample::Op::kGemm:
        gemm.Add({s.flops, s.flops / s.tokens}, 0, s.measured_seconds);
        break;
      case ProfileSample::Op::kAttentionForward:
      case ProfileSample::Op::kAttentionBackward: {
        const bool backward = s.op == ProfileSample::Op::kAttentionBackward;
        const double quadratic =
            s.flops * (backward ? ComputeModel::kBackwardAttentionFactor : 1);
        (backward ? attention_backward : attention_forward)
            .Add({quadratic, quadratic * s.sum_lengths / s.sum_squared_lengths},
                 0, s.measured_seconds);
        break;
      }
      case ProfileSample::Op::kAllToAll:
        (s.inter_node ? all_to_all_inter : all_to_all_intra)
            .Add({1, BusBytes(s)}, 0, s.measured_seconds);
        break;
      case ProfileSample::Op::kAllReduce:
        (s.inter_node ? all_reduce_inter : all_reduce_intra)
            .Add({1, BusBytes(s)}, 0, s.measured_seconds);
        break;
      case ProfileSample::Op::kReduceScatter:
        (s.inter_node ? reduce_scatter_inter : reduce_scatter_intra)
            .Add({1, BusBytes(s)}, 0, s.measured_seconds);
        break;
      case ProfileSample::Op::kAllGather:
        (s.inter_node ? all_gather_inter : all_gather_intra)
            .Add({1, BusBytes(s)}, 0, s.measured_seconds);
        break;
      case ProfileSample::Op::kActivationMemory:
        memory_samples.push_back(s);
        break;
      case ProfileSample::Op::kMicroBatch:
        micro_batch_samples.push_back(s);
        break;
      case ProfileSample::Op::kOptimizerStep:
        optimizer_samples.push_back(s);
        break;
      case ProfileSample::Op::kSpMicroBatch:
        sp_micro_batch_samples.push_back(s);
        break;
    }
  }

  CostModelFit result;
  result.params = defaults;
  ComputeParams &compute = result.params.compute;
  CommParams &comm = result.params.comm;
  MemoryParams &memory = result.params.memory;

  result.reports.push_back(
      FitSubModel("gemm", 2, /*secondary_column=*/1, gemm,
                  ApplyRateCurve(&compute.gemm_flops_per_second,
                                 &compute.gemm_half_efficiency_tokens,
                                 "half-efficiency tokens")));
  result.reports.push_back(FitSubModel(
      "attention_forward", 2, /*secondary_column=*/1, attention_forward,
      ApplyRateCurve(&compute.attention_forward_flops_per_second,
                     &compute.attention_forward_half_length_tokens,
                     "half-efficiency length")));
  result.reports.push_back(FitSubModel(
      "attention_backward", 2, /*secondary_column=*/1, attention_backward,
      ApplyRateCurve(&compute.attention_backward_flops_per_second,
                     &compute.attention_backward_half_length_tokens,
                     "half-efficiency length")));
  result.reports.push_back(FitSubModel(
      "all_to_all_intra", 2, /*secondary_column=*/0, all_to_all_intra,
      ApplyAlphaBeta(&comm.all_to_all_intra_latency_seconds,
                     &comm.all_to_all_intra_bus_bytes_per_second)));
  result.reports.push_back(FitSubModel(
      "all_to_all_inter", 2, /*secondary_column=*/0, all_to_all_inter,
      ApplyAlphaBeta(&comm.all_to_all_inter_latency_seconds,
                     &comm.all_to_all_inter_bus_bytes_per_second)));
  result.reports.push_back(FitSubModel(
      "all_reduce_intra", 2, /*secondary_column=*/0, all_reduce_intra,
      ApplyAlphaBeta(&comm.all_reduce_intra_latency_seconds,
                     &comm.all_reduce_intra_bus_bytes_per_second)));
  result.reports.push_back(FitSubModel(
      "all_reduce_inter", 2, /*secondary_column=*/0, all_reduce_inter,
      ApplyAlphaBeta(&comm.all_reduce_inter_latency_seconds,
                     &comm.all_reduce_inter_bus_bytes_per_second)));

  result.reports.push_back(
      FitActivationMemory(model, cluster, defaults, memory_samples, memory));
  result.reports.push_back(FitSubModel(
      "reduce_scatter_intra", 2, /*secondary_column=*/0, reduce_scatter_intra,
      ApplyAlphaBeta(&comm.reduce_scatter_intra_latency_seconds,
                     &comm.reduce_scatter_intra_bus_bytes_per_second)));
  result.reports.push_back(FitSubModel(
      "reduce_scatter_inter", 2, /*secondary_column=*/0, reduce_scatter_inter,
      ApplyAlphaBeta(&comm.reduce_scatter_inter_latency_seconds,
                     &comm.reduce_scatter_inter_bus_bytes_per_second)));
  result.reports.push_back(FitSubModel(
      "all_gather_intra", 2, /*secondary_column=*/0, all_gather_intra,
      ApplyAlphaBeta(&comm.all_gather_intra_latency_seconds,
                     &comm.all_gather_intra_bus_bytes_per_second)));
  result.reports.push_back(FitSubModel(
      "all_gather_inter", 2, /*secondary_column=*/0, all_gather_inter,
      ApplyAlphaBeta(&comm.all_gather_inter_latency_seconds,
                     &comm.all_gather_inter_bus_bytes_per_second)));
  result.reports.push_back(
      FitMicroBatches(model, micro_batch_samples, compute));
  result.reports.push_back(FitOptimizerStep(optimizer_samples, compute));
  result.reports.push_back(
      FitSpMicroBatches(model, cluster, sp_micro_batch_samples, result.params));
  return result;
}

std::vector<ProfileSample> SyntheticProfile(const CostModel &truth,
                                            uint64_t seed,
                                            double relative_noise) {
  const ModelSpec &model = truth.model();
  const ClusterSpec &cluster = truth.cluster();
  NormalSource normal(seed);
  auto noisy = [&](double value) {
    return value * std::max(1.0 + relative_noise * normal.Next(), 0.01);
  };
  std::vector<ProfileSample> samples;

  // GEMMs: a layer's matrices and the LM head, 64 to 64K rows.
  std::vector<double> flops_per_token = {model.LinearForwardFlopsPerToken()};
  if (model.vocab_size > 0) {
    flops_per_token.push_back(model.HeadForwardFlopsPerToken());
  }
  for (double per_token : flops_per_token) {
    for (double tokens = 64; tokens <= 65536; tokens *= 2) {
      ProfileSample s;
      s.op = ProfileSample::Op::kGemm;
      s.tokens = tokens;
      s.flops = per_token * tokens;
      s.measured_seconds = noisy(truth.compute().GemmSeconds(s.flops, tokens));
      samples.push_back(s);
    }
  }

  // Attention: single sequences of 128 to 90K tokens, and packs of four.
  std::vector<std::vector<double>> packs;
  for (double length = 128; length <= 65536; length *= 2) {
    packs.push_back({length});
    packs.push_back({std::round(length * std::sqrt(2.0))});
  }
  for (double length = 256; length <= 16384; length *= 2) {
    packs.push_back({length, length, length, length});
    packs.push_back({length, length / 2, length / 4, length / 4});
  }
  const double per_squared_token = model.AttentionForwardFlopsPerSquaredToken();
  for (const std::vector<double> &lengths : packs) {
    double sum_lengths = 0;
    double sum_squared_lengths = 0;
    for (double length : lengths) {
      sum_lengths += length;
      sum_squared_lengths += length * length;
    }
    ProfileSample s;
    s.sum_lengths = sum_lengths;
    s.sum_squared_lengths = sum_squared_lengths;
    s.flops = per_squared_token * sum_squared_lengths;
    const double linear_flops = per_squared_token * sum_lengths;
    s.op = ProfileSample::Op::kAttentionForward;
    s.measured_seconds =
        noisy(truth.compute().AttentionForwardSeconds(s.flops, linear_flops));
    samples.push_back(s);
    s.op = ProfileSample::Op::kAttentionBackward;
    constexpr double kFactor = ComputeModel::kBackwardAttentionFactor;
    s.measured_seconds = noisy(truth.compute().AttentionBackwardSeconds(
        kFactor * s.flops, kFactor * linear_flops));
    samples.push_back(s);
  }

  // Collectives: 64 KiB to 256 MiB over groups inside a node and across
  // nodes (whole nodes).
  std::vector<std::pair<int, bool>> groups;
  for (int n = 2; n <= cluster.gpus_per_node; ++n) groups.push_back({n, false});
  for (int nodes = 2; nodes <= cluster.num_nodes; ++nodes) {
    groups.push_back({nodes * cluster.gpus_per_node, true});
  }
  for (const auto &[group_size, inter_node] : groups) {
    for (double bytes = 64 * 1024.0; bytes <= 256 * 1024.0 * 1024.0;
         bytes *= 4) {
      ProfileSample s;
      s.group_size = group_size;
      s.inter_node = inter_node;
      s.bytes = bytes;
      s.op = ProfileSample::Op::kAllToAll;
      s.measured_seconds =
          noisy(truth.comm().AllToAllSeconds(bytes, group_size, inter_node));
      samples.push_back(s);
      s.op = ProfileSample::Op::kAllReduce;
      s.measured_seconds =
          noisy(truth.comm().AllReduceSeconds(bytes, group_size, inter_node));
      samples.push_back(s);
      s.op = ProfileSample::Op::kReduceScatter;
      s.measured_seconds = noisy(
          truth.comm().ReduceScatterSeconds(bytes, group_size, inter_node));
      samples.push_back(s);
      s.op = ProfileSample::Op::kAllGather;
      s.measured_seconds =
          noisy(truth.comm().AllGatherSeconds(bytes, group_size, inter_node));
      samples.push_back(s);
    }
  }

  // Whole micro-batches at SP 1: 1 to 16 sequences of 32 to 512 tokens,
  // without recompute and with every layer recomputed.
  for (int k : {0, model.num_layers}) {
    for (int sequences : {1, 4, 16}) {
      for (int64_t length : {32, 128, 512}) {
        std::vector<int64_t> lengths(sequences, length);
        const MicroBatchShape shape = ShapeOf(lengths, /*sp_size=*/1);
        samples.push_back(MicroBatchSample(
            shape, k, noisy(truth.MicroBatch(shape, k).total_seconds)));
      }
    }
  }
  // The same micro-batches over each collective group (two or more ranks).
  for (const auto &[group_size, inter_node] : groups) {
    for (int k : {0, model.num_layers}) {
      for (int sequences : {1, 4, 16}) {
        for (int64_t length : {32, 128, 512}) {
          std::vector<int64_t> lengths(sequences, length);
          const MicroBatchShape shape = ShapeOf(lengths, group_size);
          const MicroBatchCost cost = truth.MicroBatch(shape, k);
          const double communication = noisy(cost.communication_seconds);
          const double compute =
              noisy(cost.total_seconds - cost.communication_seconds);
          samples.push_back(SpMicroBatchSample(
              shape, inter_node, k, compute + communication, communication));
        }
      }
    }
  }
  for (int repeat = 0; repeat < 9; ++repeat) {
    ProfileSample s;
    s.op = ProfileSample::Op::kOptimizerStep;
    s.measured_seconds = noisy(truth.OptimizerStepSeconds());
    samples.push_back(s);
  }

  // Activation memory: 1K to 64K tokens per rank at every checkpointed layer
  // count (the checkpoint bytes are only seen through the change with k).
  const int layers = model.num_layers;
  const MemoryParams &truth_memory = truth.params().memory;
  const double communicator_bytes =
      truth_memory.communicator_bytes * truth_memory.communicators_per_rank;
  for (int k = 0; k <= layers; ++k) {
    for (double tokens = 1024; tokens <= 65536; tokens *= 2) {
      ProfileSample s;
      s.op = ProfileSample::Op::kActivationMemory;
      s.tokens = tokens;
      s.checkpointed_layers = k;
      // Profiled on one rank (SP 1): one copy of the KV heads. The
      // allocator does not see the communicators.
      s.measured_bytes =
          noisy(truth.memory().PeakBytes(static_cast<int64_t>(tokens), k,
                                         /*sp_size=*/1) -
                communicator_bytes);
      samples.push_back(s);
    }
  }
  return samples;
}

}  // namespace dcp

#include "cost_model/synthetic_profile.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "cost_model/micro_batch_shape.h"

namespace dcp {
namespace {

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

// Measured values with relative noise: each value times
// max(1 + relative_noise * z, 0.01), z the next standard normal deviate.
// Not thread-safe.
class Noise {
 public:
  Noise(uint64_t seed, double relative_noise)
      : normal_(seed), relative_noise_(relative_noise) {}

  double operator()(double value) {
    return value * std::max(1.0 + relative_noise_ * normal_.Next(), 0.01);
  }

 private:
  NormalSource normal_;
  double relative_noise_;
};

// The collectives' groups: (size, inter_node) for 2..gpus_per_node ranks
// inside a node and whole nodes across nodes.
std::vector<std::pair<int, bool>> CollectiveGroups(const ClusterSpec& cluster) {
  std::vector<std::pair<int, bool>> groups;
  for (int n = 2; n <= cluster.gpus_per_node; ++n) groups.push_back({n, false});
  for (int nodes = 2; nodes <= cluster.num_nodes; ++nodes) {
    groups.push_back({nodes * cluster.gpus_per_node, true});
  }
  return groups;
}

// GEMMs: a layer's matrices and the LM head, 64 to 64K rows.
void AddGemmSamples(const CostModel& truth, Noise& noisy,
                    std::vector<ProfileSample>& samples) {
  const ModelSpec& model = truth.model();
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
}

// Attention: single sequences of 128 to 90K tokens, and packs of four.
void AddAttentionSamples(const CostModel& truth, Noise& noisy,
                         std::vector<ProfileSample>& samples) {
  std::vector<std::vector<double>> packs;
  for (double length = 128; length <= 65536; length *= 2) {
    packs.push_back({length});
    packs.push_back({std::round(length * std::sqrt(2.0))});
  }
  for (double length = 256; length <= 16384; length *= 2) {
    packs.push_back({length, length, length, length});
    packs.push_back({length, length / 2, length / 4, length / 4});
  }
  const double per_squared_token =
      truth.model().AttentionForwardFlopsPerSquaredToken();
  for (const std::vector<double>& lengths : packs) {
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
}

// Collectives: 64 KiB to 256 MiB over each of `groups`.
void AddCollectiveSamples(const CostModel& truth,
                          const std::vector<std::pair<int, bool>>& groups,
                          Noise& noisy, std::vector<ProfileSample>& samples) {
  for (const auto& [group_size, inter_node] : groups) {
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
}

// Calls `add(shape, k)` for each whole micro-batch shape the profile times
// over `sp_size` ranks: 1 to 16 sequences of 32 to 512 tokens, without
// recompute and with every layer recomputed.
template <typename AddFn>
void ForEachMicroBatch(const ModelSpec& model, int sp_size, const AddFn& add) {
  for (int k : {0, model.num_layers}) {
    for (int sequences : {1, 4, 16}) {
      for (int64_t length : {32, 128, 512}) {
        std::vector<int64_t> lengths(sequences, length);
        add(ShapeOf(lengths, sp_size), k);
      }
    }
  }
}

// Whole micro-batches at SP 1, then the same over each collective group.
void AddMicroBatchSamples(const CostModel& truth,
                          const std::vector<std::pair<int, bool>>& groups,
                          Noise& noisy, std::vector<ProfileSample>& samples) {
  ForEachMicroBatch(
      truth.model(), /*sp_size=*/1, [&](const MicroBatchShape& shape, int k) {
        samples.push_back(MicroBatchSample(
            shape, k, noisy(truth.MicroBatch(shape, k).total_seconds)));
      });
  for (const auto& [group_size, inter_node] : groups) {
    ForEachMicroBatch(
        truth.model(), group_size, [&](const MicroBatchShape& shape, int k) {
          const MicroBatchCost cost = truth.MicroBatch(shape, k);
          const double communication = noisy(cost.communication_seconds);
          const double compute =
              noisy(cost.total_seconds - cost.communication_seconds);
          samples.push_back(SpMicroBatchSample(
              shape, inter_node, k, compute + communication, communication));
        });
  }
}

// Activation memory: 1K to 64K tokens per rank at every checkpointed layer
// count (the checkpoint bytes are only seen through the change with k).
void AddMemorySamples(const CostModel& truth, Noise& noisy,
                      std::vector<ProfileSample>& samples) {
  const int layers = truth.model().num_layers;
  const MemoryParams& truth_memory = truth.params().memory;
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
}

}  // namespace

std::vector<ProfileSample> SyntheticProfile(const CostModel& truth,
                                            uint64_t seed,
                                            double relative_noise) {
  Noise noisy(seed, relative_noise);
  const std::vector<std::pair<int, bool>> groups =
      CollectiveGroups(truth.cluster());
  std::vector<ProfileSample> samples;
  AddGemmSamples(truth, noisy, samples);
  AddAttentionSamples(truth, noisy, samples);
  AddCollectiveSamples(truth, groups, noisy, samples);
  AddMicroBatchSamples(truth, groups, noisy, samples);
  for (int repeat = 0; repeat < 9; ++repeat) {
    ProfileSample s;
    s.op = ProfileSample::Op::kOptimizerStep;
    s.measured_seconds = noisy(truth.OptimizerStepSeconds());
    samples.push_back(s);
  }
  AddMemorySamples(truth, noisy, samples);
  return samples;
}

}  // namespace dcp

#include "planner/search/lower_bound.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "planner/plan/batch_check.h"

namespace dcp {
namespace {

// Best-case seconds a sequence adds to an SP group of `sp`, in two parts:
// `base`, only the terms of the cost model that grow with its tokens,
// evaluated straight from the parameters (no per-call overheads, latencies
// or padding), and `layer_forward`, the same for one layer's forward (what
// each checkpointed layer adds again). Any micro-batch holding it costs at
// least base + k * layer_forward more on its group, k its checkpointed
// layers.
struct BestCase {
  double base = 0;
  double layer_forward = 0;
};

BestCase BestCaseSeconds(const CostModel& cost_model, int64_t length_tokens,
                         int sp) {
  const ModelSpec& model = cost_model.model();
  const ComputeParams& compute = cost_model.params().compute;
  const CommParams& comm = cost_model.params().comm;
  const double length = static_cast<double>(length_tokens);
  const double tokens_per_rank = length / sp;

  const double gemm_forward = model.LinearForwardFlopsPerToken() *
                              tokens_per_rank / compute.gemm_flops_per_second;
  const double attention_flops =
      model.AttentionForwardFlopsPerSquaredToken() * length / sp;
  const double attention_forward =
      attention_flops *
      (length + compute.attention_forward_half_length_tokens) /
      compute.attention_forward_flops_per_second;
  const double attention_backward =
      ComputeModel::kBackwardAttentionFactor * attention_flops *
      (length + compute.attention_backward_half_length_tokens) /
      compute.attention_backward_flops_per_second;
  const double elementwise = model.ElementwiseBytesPerTokenPerLayer() *
                             tokens_per_rank /
                             compute.elementwise_bytes_per_second;
  double all_to_all = 0;
  if (sp > 1) {
    const double bandwidth = cost_model.SpansNodes(sp)
                                 ? comm.all_to_all_inter_bus_bytes_per_second
                                 : comm.all_to_all_intra_bus_bytes_per_second;
    all_to_all = model.UlyssesBytesPerTokenPerLayer(sp) * tokens_per_rank *
                 (sp - 1) / sp / bandwidth;
  }
  // Each layer pass pays the sequence's fixed cost (its attention call).
  const double sequence = compute.sequence_layer_fixed_seconds;
  // The compute terms at SP >= 2 are scaled, as CostModel::MicroBatch does.
  const double scale = sp > 1 ? compute.sp_compute_scale : 1.0;
  const double layer_forward =
      scale * (gemm_forward + attention_forward + elementwise + sequence) +
      all_to_all;
  const double layer =
      scale * ((1 + ComputeModel::kBackwardGemmFactor) * gemm_forward +
               attention_forward + attention_backward + 3 * elementwise +
               2 * sequence) +
      2 * all_to_all;
  const double head = scale * (1 + ComputeModel::kBackwardGemmFactor) *
                      model.HeadForwardFlopsPerToken() * tokens_per_rank /
                      compute.gemm_flops_per_second;
  return {model.num_layers * layer + head, layer_forward};
}

// What every micro-batch pays whatever it holds, from the parameters: each
// layer's fixed cost forward and backward and the GEMMs' efficiency loss
// (a GEMM over t tokens takes (1 + half / t) times its FLOPs' time: a fixed
// `half` tokens' worth), in every layer and the head, and the micro-batch's
// own fixed cost (embedding, loss: micro_batch_fixed_seconds). All-to-all
// latencies and recompute are left out (they only add); ZeRO-3's
// collectives are added per SP size (unscaled by sp_compute_scale).
double MicroBatchFixedSeconds(const CostModel& cost_model) {
  const ModelSpec& model = cost_model.model();
  const ComputeParams& compute = cost_model.params().compute;
  const double gemm_fixed = (1 + ComputeModel::kBackwardGemmFactor) *
                            compute.gemm_half_efficiency_tokens /
                            compute.gemm_flops_per_second;
  return model.num_layers * (2 * compute.layer_fixed_seconds +
                             gemm_fixed * model.LinearForwardFlopsPerToken()) +
         gemm_fixed * model.HeadForwardFlopsPerToken() +
         compute.micro_batch_fixed_seconds;
}

// Per SP size: the fixed cost of a micro-batch and, per checkpointed-layer
// count k, the most tokens per rank a micro-batch at k may hold.
struct SizeLimits {
  double fixed_seconds = 0;
  std::vector<int64_t> capacity;  // [k], 0..num_layers
};

// Least GPU-seconds a sequence costs on SP `sp`: every micro-batch holding
// it has some checkpointed-layer count k at least what its tokens alone
// force, holds at most capacity[k] tokens per rank, and pays the fixed cost
// once; so the sequence costs at least base + k * layer_forward and its
// tokens' share, tokens_per_rank / capacity[k], of that fixed cost, for the
// best such k.
double LeastGpuSeconds(const CostModel& cost_model, const SizeLimits& limits,
                       int64_t length_tokens, int sp) {
  const BestCase best = BestCaseSeconds(cost_model, length_tokens, sp);
  MicroBatchShape alone;
  alone.sp_size = sp;
  alone.AddSequence(length_tokens);
  const int layers = cost_model.model().num_layers;
  const int forced = cost_model.MinCheckpointedLayers(alone).value_or(layers);
  const double tokens_per_rank = static_cast<double>(length_tokens) / sp;
  double least = std::numeric_limits<double>::infinity();
  for (int k = forced; k <= layers; ++k) {
    if (limits.capacity[k] <= 0) continue;
    least = std::min(least, k * best.layer_forward +
                                limits.fixed_seconds * tokens_per_rank /
                                    static_cast<double>(limits.capacity[k]));
  }
  // Without any capacity (cannot happen for a sequence that fits) only the
  // forced recompute.
  if (least == std::numeric_limits<double>::infinity()) {
    least = forced * best.layer_forward;
  }
  return sp * (best.base + least);
}

// The smallest share of any micro-batch's time that its forward pass takes,
// component by component: GEMMs and element-wise ops run backward at twice
// the forward work and may be recomputed once (1/4); all-to-alls, per-layer
// fixed costs and the head (1/3); attention by its forward/backward rates.
double MinForwardShare(const CostModel& cost_model) {
  const ComputeParams& compute = cost_model.params().compute;
  const double attention_backward_ratio =
      ComputeModel::kBackwardAttentionFactor *
      (compute.attention_forward_flops_per_second /
       compute.attention_backward_flops_per_second) *
      std::max(1.0, compute.attention_backward_half_length_tokens /
                        compute.attention_forward_half_length_tokens);
  return std::min(1.0 / (2 + ComputeModel::kBackwardGemmFactor),
                  1.0 / (2 + attention_backward_ratio));
}

}  // namespace

absl::StatusOr<SequenceBounds> SequenceBounds::Create(
    const CostModel& cost_model, absl::Span<const int> sp_sizes,
    absl::Span<const int64_t> lengths_tokens) {
  if (absl::Status status = ValidateBatch(lengths_tokens); !status.ok()) {
    return status;
  }
  SequenceBounds bounds;
  bounds.num_gpus_ = cost_model.cluster().NumGpus();
  bounds.forward_share_ = MinForwardShare(cost_model);
  bounds.allreduce_seconds_ = cost_model.GradientAllReduceSeconds();
  bounds.optimizer_seconds_ = cost_model.OptimizerStepSeconds();
  bounds.length_of_.reserve(lengths_tokens.size());
  // Sequences of one length are priced once (batches repeat lengths).
  absl::flat_hash_map<int64_t, int> distinct_of_length;
  const int layers = cost_model.model().num_layers;
  const double fixed_seconds = MicroBatchFixedSeconds(cost_model);
  absl::flat_hash_map<int, SizeLimits> limits_by_size;
  for (int sp : sp_sizes) {
    SizeLimits& limits = limits_by_size[sp];
    limits.fixed_seconds = fixed_seconds;
    if (sp > 1) {
      limits.fixed_seconds *= cost_model.params().compute.sp_compute_scale;
      // Two all-to-alls per layer forward and backward, each paying at
      // least its latency.
      const CommParams& comm = cost_model.params().comm;
      limits.fixed_seconds +=
          4.0 * layers *
          (cost_model.SpansNodes(sp) ? comm.all_to_all_inter_latency_seconds
                                     : comm.all_to_all_intra_latency_seconds);
    }
    // ZeRO-3's gathers and reduce-scatter: every micro-batch pays them in
    // full, whatever it holds.
    limits.fixed_seconds += cost_model.ShardingMicroBatchSeconds();
    for (int k = 0; k <= layers; ++k) {
      limits.capacity.push_back(cost_model.MaxTokensPerRank(k, sp));
    }
  }
  for (size_t i = 0; i < lengths_tokens.size(); ++i) {
    auto [it, inserted] = distinct_of_length.try_emplace(
        lengths_tokens[i], static_cast<int>(bounds.lengths_.size()));
    if (inserted) {
      absl::StatusOr<int> min_sp = MinFeasibleSpSize(
          cost_model, sp_sizes, static_cast<int>(i), lengths_tokens[i]);
      if (!min_sp.ok()) return min_sp.status();
      LengthBounds of_length;
      of_length.gpu_seconds = std::numeric_limits<double>::infinity();
      of_length.alone_seconds = std::numeric_limits<double>::infinity();
      for (int sp : sp_sizes) {
        if (sp < *min_sp) continue;
        SizeBounds at;
        at.sp_size = sp;
        at.gpu_seconds = LeastGpuSeconds(cost_model, limits_by_size[sp],
                                         lengths_tokens[i], sp);
        // The group running it takes at least its micro-batch with only it
        // (costs only grow as sequences join a micro-batch).
        MicroBatchShape alone;
        alone.sp_size = sp;
        alone.AddSequence(lengths_tokens[i]);
        const int fewest = cost_model.MinCheckpointedLayers(alone).value_or(
            cost_model.model().num_layers);
        at.alone_seconds = cost_model.MicroBatch(alone, fewest).total_seconds;
        at.added_seconds =
            BestCaseSeconds(cost_model, lengths_tokens[i], sp).base;
        of_length.gpu_seconds = std::min(of_length.gpu_seconds, at.gpu_seconds);
        of_length.alone_seconds =
            std::min(of_length.alone_seconds, at.alone_seconds);
        of_length.sizes.push_back(at);
      }
      bounds.lengths_.push_back(std::move(of_length));
    }
    ++bounds.lengths_[it->second].count;
    bounds.length_of_.push_back(it->second);
  }
  // The first two terms over every sequence, in index order.
  double total_gpu_seconds = 0;
  double longest = 0;
  for (int distinct : bounds.length_of_) {
    total_gpu_seconds += bounds.lengths_[distinct].gpu_seconds;
    longest = std::max(longest, bounds.lengths_[distinct].alone_seconds);
  }
  bounds.slowest_group_seconds_ =
      std::max(std::max(total_gpu_seconds / bounds.num_gpus_, longest),
               bounds.PackingBound());
  return bounds;
}

// The least T for which a schedule of the whole batch within T is not
// ruled out by three facts of any schedule, each of which holds for plans
// of one layout and of phases alike:
//  - every sequence runs at an SP size whose alone time is at most T;
//  - at those sizes, the least GPU-seconds of all sequences fit in T on
//    every GPU (the bound's first term, restricted to those sizes);
//  - a sequence that adds more than T/2 to its ranks' busy time at every
//    such size ("big") shares no GPU with another big one, since a GPU
//    running both would be busy more than T: the big sequences' smallest
//    such sizes sum to at most the GPU count.
// Each fact only gets easier as T grows, so the least such T is found by
// bisection over the points where one changes (each size's alone time and
// twice its added time). It reaches what the first two terms cannot where
// a few long sequences must each take a large group: ten sequences that
// take 3.3 s on 8 GPUs or 1.8 s on 16 cannot all run on 16 when 128 GPUs
// hold only eight such groups, so the step is at least 3.3 s, however
// little the GPU-seconds average.
double SequenceBounds::PackingBound() const {
  std::vector<double> points;
  for (const LengthBounds& of_length : lengths_) {
    for (const SizeBounds& at : of_length.sizes) {
      points.push_back(at.alone_seconds);
      points.push_back(2 * at.added_seconds);
    }
  }
  if (points.empty()) return 0;
  std::sort(points.begin(), points.end());
  points.erase(std::unique(points.begin(), points.end()), points.end());
  // Within [points[j], points[j + 1]) every fact's inputs are constant: the
  // least T there that none rules out, or nullopt.
  const auto least_in = [&](size_t j) -> std::optional<double> {
    const double t = points[j];
    double gpu_seconds = 0;
    int64_t big_gpus = 0;
    for (const LengthBounds& of_length : lengths_) {
      double least_gpu_seconds = std::numeric_limits<double>::infinity();
      double least_added = std::numeric_limits<double>::infinity();
      int smallest_size = 0;
      for (const SizeBounds& at : of_length.sizes) {
        if (at.alone_seconds > t) continue;
        least_gpu_seconds = std::min(least_gpu_seconds, at.gpu_seconds);
        least_added = std::min(least_added, at.added_seconds);
        if (smallest_size == 0 || at.sp_size < smallest_size) {
          smallest_size = at.sp_size;
        }
      }
      if (smallest_size == 0) return std::nullopt;
      gpu_seconds += of_length.count * least_gpu_seconds;
      if (least_added > t / 2) big_gpus += of_length.count * smallest_size;
    }
    if (big_gpus > num_gpus_) return std::nullopt;
    const double least = std::max(t, gpu_seconds / num_gpus_);
    if (j + 1 < points.size() && least >= points[j + 1]) return std::nullopt;
    return least;
  };
  // The last interval always holds one (no sequence is big there).
  size_t lo = 0;
  size_t hi = points.size() - 1;
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (least_in(mid).has_value()) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return least_in(lo).value_or(points.back());
}

double SequenceBounds::SlowestGroupSeconds(
    absl::Span<const int> members) const {
  double total_gpu_seconds = 0;
  double longest = 0;
  for (int index : members) {
    total_gpu_seconds += GpuSeconds(index);
    longest = std::max(longest, AloneSeconds(index));
  }
  return std::max(total_gpu_seconds / num_gpus_, longest);
}

double SequenceBounds::StepSeconds(double slowest_group_seconds) const {
  // The step also waits for whatever of the gradient all-reduce the slowest
  // group's last backward does not hide, and that backward is at most
  // (1 - forward share) of the group's time.
  // Then every plan runs the optimizer step once.
  return std::max(slowest_group_seconds,
                  forward_share_ * slowest_group_seconds + allreduce_seconds_) +
         optimizer_seconds_;
}

double SequenceBounds::SlowestGroupSeconds() const {
  return slowest_group_seconds_;
}

absl::StatusOr<double> StepTimeLowerBound(
    const CostModel& cost_model, absl::Span<const int> sp_sizes,
    absl::Span<const int64_t> lengths_tokens) {
  absl::StatusOr<SequenceBounds> bounds =
      SequenceBounds::Create(cost_model, sp_sizes, lengths_tokens);
  if (!bounds.ok()) return bounds.status();
  return bounds->StepSeconds(bounds->SlowestGroupSeconds());
}

}  // namespace dcp

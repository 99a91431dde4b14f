#include "planner/strategies/videosys_dcp.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "planner/plan/batch_check.h"

namespace dcp {
namespace {

// Batches with more distinct lengths than this are bucketed by powers of two.
constexpr size_t kMaxExactBuckets = 32;
// Running over the target costs this much more than running under it.
constexpr double kOvershootWeight = 1.2;

int64_t NextPowerOfTwo(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// One bucket of the batch and how far its micro-batches have been taken.
struct Bucket {
  VideoSysBucketProfile profile;
  std::vector<std::vector<int>> micro_batches;
  size_t next = 0;
  bool done() const { return next >= micro_batches.size(); }
};

// VideoSys's accumulation counts for groups whose micro-batches take
// `seconds`: the counts that bring every group closest to a common target
// (one of the groups' own multiples), scored with overshoot weighted.
std::vector<int> AccumulationCounts(const std::vector<double>& seconds,
                                    const VideoSysOptions& options) {
  const double max_time = *std::max_element(seconds.begin(), seconds.end()) *
                          options.max_accumulation;
  auto score = [](double time, double target) {
    return time > target ? (time - target) * kOvershootWeight : target - time;
  };
  // The best count for one group at a target, among 1..max_time/seconds:
  // the score is convex in the count, so floor or ceil of target/seconds.
  auto best_count = [&](double t, double target, double& diff) {
    const int most = std::max(1, static_cast<int>(max_time / t));
    const int below =
        std::clamp(static_cast<int>(std::floor(target / t)), 1, most);
    const int above = std::clamp(below + 1, 1, most);
    const double d_below = score(t * below, target);
    const double d_above = score(t * above, target);
    diff = d_above < d_below ? d_above : d_below;
    return d_above < d_below ? above : below;
  };
  double best_diff = INFINITY;
  std::vector<int> best;
  std::set<double> tried;
  for (double outer : seconds) {
    if (!tried.insert(outer).second) continue;
    const int most = static_cast<int>(max_time / outer);
    for (int mult = 1; mult <= most; ++mult) {
      const double target = outer * mult;
      if (target > max_time) break;
      double total = 0;
      std::vector<int> counts;
      for (double t : seconds) {
        double diff = 0;
        counts.push_back(best_count(t, target, diff));
        total += diff;
      }
      if (total < best_diff) {
        best_diff = total;
        best = std::move(counts);
      }
    }
  }
  if (best.empty()) best.assign(seconds.size(), 1);
  const int largest = *std::max_element(best.begin(), best.end());
  if (largest < options.min_accumulation) {
    const int factor = (options.min_accumulation + largest - 1) / largest;
    for (int& count : best) count *= factor;
  }
  return best;
}

}  // namespace

absl::StatusOr<VideoSysBucketProfile> ProfileVideoSysBucket(
    const CostModel& cost_model, absl::Span<const int> sp_sizes,
    int64_t length_tokens) {
  absl::StatusOr<std::vector<int>> legal = LegalSpSizes(cost_model, sp_sizes);
  if (!legal.ok()) return legal.status();
  const int per_node = cost_model.cluster().gpus_per_node;
  std::optional<VideoSysBucketProfile> best;
  auto throughput = [](const VideoSysBucketProfile& p) {
    return p.batch_size / (p.sp_size * p.seconds);
  };
  for (int sp_size : *legal) {
    // Across nodes only while nothing fits inside one.
    if (sp_size > per_node && best) break;
    for (int batch_size = 1;; batch_size *= 2) {
      MicroBatchShape shape;
      shape.sp_size = sp_size;
      for (int i = 0; i < batch_size; ++i) shape.AddSequence(length_tokens);
      std::optional<int> layers = cost_model.MinCheckpointedLayers(shape);
      if (!layers) break;
      VideoSysBucketProfile profile{
          length_tokens, sp_size, batch_size, *layers,
          cost_model.MicroBatch(shape, *layers).total_seconds};
      if (!best || throughput(profile) > throughput(*best)) best = profile;
      if (batch_size >= (1 << 20)) break;
    }
  }
  if (!best) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "videosys-dcp: a sequence of ", length_tokens,
        " tokens fits memory on no SP size even with full recompute"));
  }
  return *best;
}

absl::StatusOr<PhasedPlan> PlanVideoSysDcp(
    const CostModel& cost_model, absl::Span<const int> sp_sizes,
    absl::Span<const int64_t> lengths_tokens, const VideoSysOptions& options) {
  if (absl::Status status = ValidateBatch(lengths_tokens); !status.ok()) {
    return status;
  }
  if (options.max_accumulation < 1 || options.min_accumulation < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "videosys-dcp accumulation bounds ", options.min_accumulation, "..",
        options.max_accumulation, " must be at least 1"));
  }
  // Bucket keys, longest first.
  const std::set<int64_t> distinct(lengths_tokens.begin(),
                                   lengths_tokens.end());
  const bool exact = distinct.size() <= kMaxExactBuckets;
  std::map<int64_t, std::vector<int>, std::greater<int64_t>> members;
  for (int i = 0; i < static_cast<int>(lengths_tokens.size()); ++i) {
    members[exact ? lengths_tokens[i] : NextPowerOfTwo(lengths_tokens[i])]
        .push_back(i);
  }
  std::vector<Bucket> buckets;
  for (const auto& [key, indices] : members) {
    int64_t longest = 0;
    for (int index : indices)
      longest = std::max(longest, lengths_tokens[index]);
    absl::StatusOr<VideoSysBucketProfile> profile =
        ProfileVideoSysBucket(cost_model, sp_sizes, key);
    // A bin's upper edge may not fit where its members do.
    if (!profile.ok() && key != longest) {
      profile = ProfileVideoSysBucket(cost_model, sp_sizes, longest);
    }
    if (!profile.ok()) return profile.status();
    Bucket bucket;
    bucket.profile = *profile;
    for (size_t start = 0; start < indices.size();
         start += profile->batch_size) {
      const size_t end = std::min(indices.size(), start + profile->batch_size);
      bucket.micro_batches.emplace_back(indices.begin() + start,
                                        indices.begin() + end);
    }
    buckets.push_back(std::move(bucket));
  }

  const int world = cost_model.cluster().NumGpus();
  PhasedPlan plan;
  plan.strategy = "videosys-dcp";
  auto all_done = [&buckets] {
    return std::all_of(buckets.begin(), buckets.end(),
                       [](const Bucket& b) { return b.done(); });
  };
  while (!all_done()) {
    // Fill the GPUs: the largest SP size that still fits, its first bucket.
    std::vector<std::pair<int, std::vector<std::vector<int>>>> groups;
    std::vector<int> group_bucket;
    int remaining = world;
    for (;;) {
      int chosen = -1;
      for (int b = 0; b < static_cast<int>(buckets.size()); ++b) {
        if (buckets[b].done() || buckets[b].profile.sp_size > remaining) {
          continue;
        }
        if (chosen < 0 ||
            buckets[b].profile.sp_size > buckets[chosen].profile.sp_size) {
          chosen = b;
        }
      }
      if (chosen < 0) break;
      Bucket& bucket = buckets[chosen];
      groups.push_back(
          {bucket.profile.sp_size, {bucket.micro_batches[bucket.next++]}});
      group_bucket.push_back(chosen);
      remaining -= bucket.profile.sp_size;
    }
    // Accumulation balanced by the profiles' predicted times.
    std::vector<double> seconds;
    for (int b : group_bucket) seconds.push_back(buckets[b].profile.seconds);
    const std::vector<int> counts = AccumulationCounts(seconds, options);
    for (size_t g = 0; g < groups.size(); ++g) {
      Bucket& bucket = buckets[group_bucket[g]];
      for (int more = counts[g] - 1; more > 0 && !bucket.done(); --more) {
        groups[g].second.push_back(bucket.micro_batches[bucket.next++]);
      }
    }
    std::vector<PhaseGroup> phase_groups;
    for (size_t g = 0; g < groups.size(); ++g) {
      PhaseGroup phase_group;
      phase_group.sp_size = groups[g].first;
      const int layers = buckets[group_bucket[g]].profile.checkpointed_layers;
      for (std::vector<int>& indices : groups[g].second) {
        MicroBatchPlan micro_batch;
        micro_batch.sequence_indices = std::move(indices);
        micro_batch.checkpointed_layers = layers;
        phase_group.micro_batches.push_back(std::move(micro_batch));
      }
      phase_groups.push_back(std::move(phase_group));
    }
    absl::StatusOr<Plan> phase =
        LayOutPhase(cost_model.cluster(), std::move(phase_groups));
    if (!phase.ok()) return phase.status();
    plan.phases.push_back(*std::move(phase));
  }
  PredictPhasedPlan(cost_model, lengths_tokens, plan);
  return plan;
}

}  // namespace dcp

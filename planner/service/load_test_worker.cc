#include "planner/service/load_test_worker.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/split_mix64.h"

namespace dcp {
namespace {

/// 1 + noise x u, u uniform in [-1, 1) from the raw output of `rng` (the
/// same on every platform).
double NoiseFactor(std::mt19937_64& rng, double noise) {
  const double unit = static_cast<double>(rng() >> 11) * 0x1.0p-53;
  return 1 + noise * (2 * unit - 1);
}

}  // namespace

/// A hash of what the workers act on in `plan`: its predicted step time and
/// every group's ranks, and every micro-batch's sequences and recompute.
size_t PlanDigest(const v1::Plan& plan) {
  size_t digest = absl::HashOf(plan.step(), plan.predicted_step_seconds(),
                               plan.groups_size());
  for (const v1::Group& group : plan.groups()) {
    digest = absl::HashOf(
        digest, absl::MakeConstSpan(group.ranks().data(), group.ranks_size()),
        group.micro_batches_size());
    for (const v1::MicroBatch& micro_batch : group.micro_batches()) {
      digest = absl::HashOf(
          digest,
          absl::MakeConstSpan(micro_batch.sequence_indices().data(),
                              micro_batch.sequence_indices_size()),
          micro_batch.checkpointed_layers());
    }
  }
  return digest;
}

/// The reports of `worker`'s ranks for the plan in `response`; problems
/// (a rank without a group) go to `log`.
void MakeReports(const v1::GetPlanResponse& response, int64_t step,
                 int num_ranks, const LoadTestOptions& options,
                 SimulatedWorker& worker, ThreadLog& log) {
  const v1::Plan& plan = response.plan();
  std::vector<int> group_of_local_rank(num_ranks, -1);
  for (int g = 0; g < plan.groups_size(); ++g) {
    for (int rank : plan.groups(g).ranks()) {
      const int local = rank - worker.first_rank;
      if (local >= 0 && local < num_ranks) group_of_local_rank[local] = g;
    }
  }
  worker.reports.clear();
  for (int local = 0; local < num_ranks; ++local) {
    const int rank = worker.first_rank + local;
    if (group_of_local_rank[local] < 0) {
      log.problems.push_back(
          absl::StrCat("rank ", rank, " of ", worker.worker_id,
                       " has no group in step ", step, "'s plan"));
      continue;
    }
    const v1::Group& group = plan.groups(group_of_local_rank[local]);
    // A stream of its own for each (seed, step, rank).
    std::mt19937_64 rng(SplitMix64Chain(
        options.seed,
        {static_cast<uint64_t>(step), static_cast<uint64_t>(rank)}));
    v1::ReportStepStatsRequest report;
    report.set_worker_id(worker.worker_id);
    report.set_step(step);
    report.set_rank(rank);
    report.set_step_seconds(std::max(
        1e-6, group.predicted_seconds() * NoiseFactor(rng, options.noise)));
    for (int i = 0; i < group.micro_batches_size(); ++i) {
      const v1::MicroBatch& micro_batch = group.micro_batches(i);
      v1::MicroBatchStats* stats = report.add_micro_batches();
      stats->set_micro_batch_index(i);
      stats->set_compute_seconds(micro_batch.predicted_seconds() *
                                 NoiseFactor(rng, options.noise));
      stats->set_peak_memory_bytes(micro_batch.predicted_peak_bytes());
    }
    worker.reports.push_back(std::move(report));
  }
}

}  // namespace dcp

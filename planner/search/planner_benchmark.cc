// Planning latency of the dcp planner at four scales (Google Benchmark):
//   32 GPUs x 256 sequences, 256 GPUs x 4,096, 4,096 GPUs x 65,536 and
//   4,096 GPUs x 1,048,576 (the most a batch may hold, planner/plan/limits.h)
// on llama3-8b over H200 nodes of 8 with the long-tail workload. Targets:
// p99 under 10 ms, 100 ms, 1 s and 2 s. Then with re-grouping within the
// step on (PlanPhasedBatch, what the service and `dcp plan` run): 32 GPUs x
// 2M tokens (target p99 under 100 ms), 256 GPUs x 16M tokens, 4,096 GPUs x
// 65,536 sequences, and 4,096 GPUs x 1,048,576 sequences (under 2 s). Each iteration plans one batch of
// a pre-generated stream; p50/p99 over iterations are reported as counters.
//
//   bazel run -c opt //planner/search:planner_benchmark
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/percentile.h"
#include "planner/search/phased_planner.h"
#include "planner/search/planner.h"
#include "planner/workload/workload.h"

namespace dcp {
namespace {

int PhaseCount(const Plan&) { return 1; }
int PhaseCount(const PhasedPlan& plan) {
  return static_cast<int>(plan.phases.size());
}

std::vector<std::vector<int64_t>> MakeBatches(const BatchOptions& options,
                                              int count) {
  BatchStream stream = *BatchStream::Create(*ParseWorkloadSpec("longtail"),
                                            options, /*seed=*/42);
  std::vector<std::vector<int64_t>> batches;
  for (int b = 0; b < count; ++b) {
    std::vector<int64_t> lengths;
    for (const Sample& sample : stream.Next()) {
      lengths.push_back(sample.length_tokens);
    }
    batches.push_back(std::move(lengths));
  }
  return batches;
}

// Plans each iteration's batch (of 8 drawn with `batch_options`) with
// `plan` (a StatusOr of Plan or PhasedPlan) on `num_gpus` GPUs of H200
// nodes of 8 and reports p50/p99 latency, the mean gap to the lower bound,
// and the share of plans with more than one phase.
template <typename PlanFn>
void TimePlans(benchmark::State& state, int num_gpus,
               const BatchOptions& batch_options, const PlanFn& plan) {
  const CostModel cost_model = *CostModel::CreateDefault(
      *ModelPreset("llama3-8b"), H200Cluster(num_gpus / 8, /*gpus_per_node=*/8));
  const std::vector<std::vector<int64_t>> batches =
      MakeBatches(batch_options, /*count=*/8);
  std::vector<double> latencies_ms;
  double gap = 0;
  int phased = 0;
  size_t next = 0;
  for (auto _ : state) {
    const std::vector<int64_t>& batch = batches[next++ % batches.size()];
    const auto start = std::chrono::steady_clock::now();
    auto planned = plan(cost_model, batch);
    const auto end = std::chrono::steady_clock::now();
    if (!planned.ok()) {
      state.SkipWithError(std::string(planned.status().message()).c_str());
      return;
    }
    latencies_ms.push_back(
        std::chrono::duration<double, std::milli>(end - start).count());
    // Using the plan keeps the call from being optimised away.
    gap += planned->GapToLowerBound();
    phased += PhaseCount(*planned) > 1 ? 1 : 0;
  }
  state.counters["p50_ms"] = Percentile(latencies_ms, 0.50);
  state.counters["p99_ms"] = Percentile(latencies_ms, 0.99);
  state.counters["mean_gap_to_lower_bound"] = gap / latencies_ms.size();
  state.counters["phased_share"] =
      static_cast<double>(phased) / latencies_ms.size();
}

void BM_PlanBatch(benchmark::State& state) {
  BatchOptions batch_options;
  batch_options.global_batch_samples = static_cast<int>(state.range(1));
  TimePlans(state, static_cast<int>(state.range(0)), batch_options,
            [](const CostModel& cost_model, absl::Span<const int64_t> batch) {
              return Planner(cost_model, PlannerOptions{}).PlanBatch(batch);
            });
}

// The same with re-grouping within the step on (PlanPhasedBatch, as the
// planner service and `dcp plan` run it), on batches of `batch_options`.
void PlanPhased(benchmark::State& state, int num_gpus,
                const BatchOptions& batch_options) {
  TimePlans(state, num_gpus, batch_options,
            [](const CostModel& cost_model, absl::Span<const int64_t> batch) {
              return PlanPhasedBatch(cost_model, batch, PhasedPlannerOptions());
            });
}

// Batches of 64K tokens per GPU (`dcp plan`'s default size): 2M tokens on
// 32 GPUs, target p99 under 100 ms.
void BM_PlanPhasedTokens(benchmark::State& state) {
  const int num_gpus = static_cast<int>(state.range(0));
  BatchOptions batch_options;
  batch_options.global_batch_tokens = int64_t{65536} * num_gpus;
  PlanPhased(state, num_gpus, batch_options);
}

// Batches of a sequence count: 1,048,576 on 4,096 GPUs, target p99 under 2 s.
void BM_PlanPhasedSequences(benchmark::State& state) {
  BatchOptions batch_options;
  batch_options.global_batch_samples = static_cast<int>(state.range(1));
  PlanPhased(state, static_cast<int>(state.range(0)), batch_options);
}

// One scale of a benchmark: its arguments and how many batches it plans.
struct Scale {
  std::vector<int64_t> args;
  int iterations;
};

// Registers `fn` as `name` at each of `scales`, with arguments named
// `arg_names`, timed in milliseconds.
bool RegisterScales(const char* name, void (*fn)(benchmark::State&),
                    const std::vector<std::string>& arg_names,
                    const std::vector<Scale>& scales) {
  for (const Scale& scale : scales) {
    benchmark::RegisterBenchmark(name, fn)
        ->ArgNames(arg_names)
        ->Args(scale.args)
        ->Iterations(scale.iterations)
        ->Unit(benchmark::kMillisecond);
  }
  return true;
}

[[maybe_unused]] const bool kRegistered =
    RegisterScales("BM_PlanBatch", BM_PlanBatch, {"gpus", "sequences"},
                   {{{32, 256}, 200},
                    {{256, 4096}, 40},
                    {{4096, 65536}, 16},
                    {{4096, 1 << 20}, 8}}) &&
    RegisterScales("BM_PlanPhasedTokens", BM_PlanPhasedTokens, {"gpus"},
                   {{{32}, 100}, {{256}, 16}}) &&
    RegisterScales("BM_PlanPhasedSequences", BM_PlanPhasedSequences,
                   {"gpus", "sequences"},
                   {{{4096, 65536}, 8}, {{4096, 1 << 20}, 4}});

}  // namespace
}  // namespace dcp

BENCHMARK_MAIN();

#include "planner/cli/cli_support.h"

#include <cstdint>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "common/status_macros.h"
#include "cost_model/cluster_spec.h"
#include "cost_model/model_spec.h"
#include "planner/plan/batch_check.h"
#include "planner/plan/limits.h"

namespace dcp {
namespace cli {

const ModelClusterFlags& ModelCluster() {
  static const auto* const flags = new ModelClusterFlags(
      {/*default_model=*/"llama3-8b", /*default_nodes=*/"4",
       /*default_gpus_per_node=*/"8", /*default_memory_fraction=*/"0.8",
       /*gpus_flag=*/true, /*cluster_file_flag=*/false});
  return *flags;
}

// ---------------------------------------------------------------------------
// Typed flag values beyond ParsedFlags' getters.

// --sp-sizes: the SP sizes given, or none (every legal size).
absl::StatusOr<std::vector<int>> SpSizes(const ParsedFlags& flags) {
  if (!flags.Given("sp-sizes")) return std::vector<int>();
  absl::StatusOr<std::vector<int64_t>> sizes = flags.IntList(
      "sp-sizes", /*min=*/1, /*max=*/std::numeric_limits<int>::max());
  if (!sizes.ok()) return sizes.status();
  return std::vector<int>(sizes->begin(), sizes->end());
}

// ---------------------------------------------------------------------------
// Shared configuration from the flags; all errors are usage errors.

absl::StatusOr<CostModel> LoadCostModel(const ParsedFlags& flags) {
  DCP_ASSIGN_OR_RETURN(ModelSpec model, ModelCluster().Model(flags));
  DCP_ASSIGN_OR_RETURN(ClusterSpec cluster, ModelCluster().Cluster(flags));
  DCP_ASSIGN_OR_RETURN(bool zero3, flags.Bool("zero3"));
  CostParams params = DefaultCostParams(model, cluster);
  // The defaults are bf16 with ZeRO-1; --zero3 shards the rest too.
  if (zero3) {
    SetTrainingStateBytes(TrainingPrecision::kBf16, ParameterSharding::kZero3,
                          params.memory);
  }
  return CostModel::Create(model, cluster, params);
}

// The --workload or --lengths source.
absl::StatusOr<std::unique_ptr<LengthSource>> LoadSource(
    const ParsedFlags& flags) {
  if (flags.Given("workload") && flags.Given("lengths")) {
    return absl::InvalidArgumentError(
        "--workload and --lengths are exclusive; give one");
  }
  if (flags.Given("lengths")) {
    DCP_ASSIGN_OR_RETURN(std::vector<int64_t> list,
                         ReadLengthsFile(flags.String("lengths")));
    return MakeListSource(std::move(list));
  }
  absl::StatusOr<std::unique_ptr<LengthSource>> source =
      ParseWorkloadSpec(flags.String("workload"));
  if (!source.ok()) {
    return absl::Status(
        source.status().code(),
        absl::StrCat("--workload: ", source.status().message()));
  }
  return source;
}

absl::StatusOr<BatchStream> LoadStream(const ParsedFlags& flags, int num_gpus) {
  DCP_ASSIGN_OR_RETURN(std::unique_ptr<LengthSource> source, LoadSource(flags));
  const bool has_tokens = flags.Given("global-batch-tokens");
  const bool has_samples = flags.Given("global-batch-samples");
  if (has_tokens && has_samples) {
    return absl::InvalidArgumentError(
        "--global-batch-tokens and --global-batch-samples are exclusive; "
        "give one");
  }
  BatchOptions options;
  if (has_samples) {
    DCP_ASSIGN_OR_RETURN(
        options.global_batch_samples,
        flags.IntWithSuffix("global-batch-samples", 1, kMaxBatchSequences));
  } else if (has_tokens) {
    DCP_ASSIGN_OR_RETURN(
        options.global_batch_tokens,
        flags.IntWithSuffix("global-batch-tokens", 1, kMaxSequenceTokens));
  } else {
    options.global_batch_tokens = kDefaultTokensPerGpu * num_gpus;
  }
  DCP_ASSIGN_OR_RETURN(int64_t seed, flags.IntWithSuffix("seed", /*min=*/0));
  return BatchStream::Create(std::move(source), options,
                             static_cast<uint64_t>(seed));
}

namespace {

// OK when LegalSpSizes takes `sp_sizes`, the value of `flag`; else its
// message, prefixed with the flag.
absl::Status CheckSpSizesFlag(absl::string_view flag,
                              const CostModel& cost_model,
                              const std::vector<int>& sp_sizes) {
  absl::StatusOr<std::vector<int>> legal = LegalSpSizes(cost_model, sp_sizes);
  if (legal.ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(flag, ": ", legal.status().message()));
}

}  // namespace

// --sp-sizes (checked against the model and cluster),
// --bucket-micro-batch-sequences and --static-sp.
absl::Status LoadStrategyOptions(const ParsedFlags& flags,
                                 const CostModel& cost_model,
                                 StaticOptions& static_options,
                                 PlannerOptions& planner_options) {
  DCP_ASSIGN_OR_RETURN(std::vector<int> sp_sizes, SpSizes(flags));
  DCP_RETURN_IF_ERROR(CheckSpSizesFlag("--sp-sizes", cost_model, sp_sizes));
  planner_options.sp_sizes = sp_sizes;
  DCP_ASSIGN_OR_RETURN(
      static_options.micro_batch_sequences,
      flags.IntWithSuffix("bucket-micro-batch-sequences", 1, 1 << 20));
  DCP_ASSIGN_OR_RETURN(static_options.sp_size,
                       flags.IntWithSuffix("static-sp", 0, 1 << 20));
  if (static_options.sp_size != 0) {
    DCP_RETURN_IF_ERROR(CheckSpSizesFlag("--static-sp", cost_model,
                                         {static_options.sp_size}));
  }
  return absl::OkStatus();
}

}  // namespace cli
}  // namespace dcp

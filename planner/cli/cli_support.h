#ifndef DCP_PLANNER_CLI_SUPPORT_H_
#define DCP_PLANNER_CLI_SUPPORT_H_

// What the `dcp` subcommand runners (planner/cli/cli.cc,
// planner/cli/cli_plan_file.cc) share: the model and cluster flags, the loaders
// of the cost model, workload and strategy options from parsed flags, and
// the Command that prints a run's results and errors. Internal to the
// command line.

#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/command_line.h"
#include "common/main_prologue.h"
#include "cost_model/cost_model.h"
#include "cost_model/model_cluster_flags.h"
#include "planner/strategies/baselines.h"
#include "planner/search/planner.h"
#include "planner/workload/workload.h"

namespace dcp {
namespace cli {

inline constexpr double kGiB = 1024.0 * 1024 * 1024;
/// Default global batch: this many tokens per GPU.
inline constexpr int64_t kDefaultTokensPerGpu = 64 * 1024;

/// The model and cluster flags of every subcommand.
const ModelClusterFlags& ModelCluster();

/// The training-state flags of every subcommand that loads a cost model
/// (simulate, plan, validate, price), beside the model and cluster flags.
inline constexpr FlagSpec kShardingFlags[] = {
    {"zero3", nullptr, "false",
     "plan with ZeRO-3 / FSDP2 sharding: weights, gradients and optimizer "
     "states sharded over every GPU (instead of ZeRO-1's optimizer states "
     "only), each micro-batch paying an all-gather of the weights in its "
     "forward, another in its backward and a reduce-scatter of the "
     "gradients over the whole world, and no step-end all-reduce; a "
     "prediction of the cost model: dcp_worker does not run ZeRO-3"},
};

/// --sp-sizes: the SP sizes given, or none (every legal size).
absl::StatusOr<std::vector<int>> SpSizes(const ParsedFlags& flags);

/// The default cost model of the flags' model and cluster, with ZeRO-3 when
/// --zero3 is given.
absl::StatusOr<CostModel> LoadCostModel(const ParsedFlags& flags);

/// The --workload or --lengths source.
absl::StatusOr<std::unique_ptr<LengthSource>> LoadSource(
    const ParsedFlags& flags);

/// The source cut into global batches (--global-batch-tokens or
/// --global-batch-samples, --seed).
absl::StatusOr<BatchStream> LoadStream(const ParsedFlags& flags, int num_gpus);

/// --sp-sizes (checked against the model and cluster),
/// --bucket-micro-batch-sequences and --static-sp.
absl::Status LoadStrategyOptions(const ParsedFlags& flags,
                                 const CostModel& cost_model,
                                 StaticOptions& static_options,
                                 PlannerOptions& planner_options);

// Writes results and errors of one subcommand run.
class Command {
 public:
  Command(const SubcommandSpec& subcommand, std::ostream& out,
          std::ostream& err)
      : name_(absl::StrCat("dcp ", subcommand.name)), out_(out), err_(err) {}

  std::ostream& out() { return out_; }
  std::ostream& err() { return err_; }

  /// A wrong command line: one line on stderr, exit 2.
  int UsageError(absl::string_view message) {
    return PrintUsageError(err_, name_, message, /*help_command=*/name_);
  }
  /// The work failed: one line on stderr, exit 1.
  int Failure(absl::string_view message) {
    return PrintFailure(err_, name_, message);
  }

 private:
  /// "dcp plan".
  const std::string name_;
  std::ostream& out_;
  std::ostream& err_;
};

}  // namespace cli
}  // namespace dcp

#endif  // DCP_PLANNER_CLI_SUPPORT_H_

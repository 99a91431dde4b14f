// dcp_local_job's command line: its flags and the configuration they give.

#ifndef DCP_LAUNCHER_LOCAL_JOB_CONFIG_H_
#define DCP_LAUNCHER_LOCAL_JOB_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/command_line.h"
#include "common/main_prologue.h"
#include "worker/checkpoint_flags.h"

namespace dcp {

/// What one dcp_local_job run does, from its flags. Plain value.
struct LocalJobConfig {
  std::string planner_binary;
  std::string worker_binary;
  std::string work_dir;
  /// The job id given to the planner and every worker (--job-id): the
  /// planner accepts only this job's registrations.
  std::string job_id;
  int nodes = 2;
  int ranks_per_node = 1;
  std::string model;
  int64_t rank_memory_bytes = 0;
  std::string workload;
  int64_t global_batch_tokens = 0;
  int64_t seed = 1;
  int64_t steps = 0;
  bool profile = true;
  std::string profile_attention_lengths;
  int64_t profile_repeats = 3;
  bool online_refit = true;
  /// The planner's --phased-plans and --phased-min-gap.
  bool phased_plans = true;
  double phased_min_gap = 0.03;
  bool compare_bucket = true;
  /// Peer strategies whose plans run the same batches after the bucket run
  /// (worker --plan-source), in order.
  std::vector<std::string> compare_peers = {"best-static", "megatron-dyncp"};
  /// The step whose predicted-vs-measured timeline is drawn (-1: none), and
  /// the SVG file (empty: <work_dir>/timeline_step<K>.svg).
  int64_t timeline_step = -1;
  std::string timeline_out;
  /// The dcp run's checkpoints, passed on to its workers.
  CheckpointFlags checkpoint;
  int64_t sigterm_after_step = -1;
  /// Planner drill: once rank 0 reports this step (-1: never), the planner
  /// gets `planner_stop_signal`, stays down for `planner_down_for` after
  /// it exited, then restarts on the same port and --state-dir.
  int64_t restart_planner_after_step = -1;
  /// The planner's --state-dir (empty: WORK_DIR/planner_state for the
  /// drill, else none).
  std::string planner_state_dir;
  int planner_stop_signal = 9;
  absl::Duration planner_down_for;
  std::string planner_outage_tolerance;
  int64_t torch_threads = 1;
  std::string collective_timeout;
  absl::Duration timeout;

  int world_size() const { return nodes * ranks_per_node; }
};

/// dcp_local_job's program (name, flags, help) for StartMain.
const ProgramSpec& LocalJobProgram();

/// The configuration `flags` give. The planner and worker binaries are
/// --planner-binary / --worker-binary, else found next to `argv0` (in
/// bazel-bin or runfiles). INVALID_ARGUMENT naming the flag for a bad value;
/// NOT_FOUND naming the places tried for a binary that is not there.
absl::StatusOr<LocalJobConfig> ConfigureLocalJob(const ParsedFlags& flags,
                                                 const char* argv0);

}  // namespace dcp

#endif  // DCP_LAUNCHER_LOCAL_JOB_CONFIG_H_

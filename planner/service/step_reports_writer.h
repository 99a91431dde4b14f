#ifndef DCP_PLANNER_SERVICE_STEP_REPORTS_WRITER_H_
#define DCP_PLANNER_SERVICE_STEP_REPORTS_WRITER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "dcp/v1/step_state.pb.h"
#include "planner/service/planner_state_store.h"

namespace dcp {

/// Writes the records of steps that are for tools only (step_state_files.h)
/// on a thread of its own: step reports records
/// (PlannerStateStore::WriteStepReports), so that no ReportStepStats call
/// waits for the disk (the C++ workers report inside their training loop),
/// and step plan records (WriteStepPlan: several MB, fsynced, at the
/// largest batches), so that no GetPlan that planned its step waits for
/// them. Keeps the latest record of each kind of each step until it is
/// written: a newer one replaces one still waiting. A failed write is
/// logged.
///
/// Thread-safe. `mu_` guards the waiting records and is never held while
/// writing.
class StepReportsWriter {
 public:
  /// `store` and `log` must outlive the writer.
  StepReportsWriter(PlannerStateStore& store,
                    std::function<void(const std::string&)> log);
  /// Writes what waits, then stops.
  ~StepReportsWriter();
  StepReportsWriter(const StepReportsWriter&) = delete;
  StepReportsWriter& operator=(const StepReportsWriter&) = delete;

  /// Queues `record` (replacing a waiting record of its step).
  void Write(v1::StepReportsRecord record) ABSL_LOCKS_EXCLUDED(mu_);
  /// Queues a step's plan record (replacing a waiting one of its step).
  void WritePlan(v1::StepPlanRecord record) ABSL_LOCKS_EXCLUDED(mu_);
  /// Returns once every record queued before the call is written.
  void Flush() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);
  bool Idle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return waiting_.empty() && waiting_plans_.empty() && !writing_;
  }
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !waiting_.empty() || !waiting_plans_.empty() || stopping_;
  }

  PlannerStateStore& store_;
  const std::function<void(const std::string&)> log_;
  absl::Mutex mu_;
  /// By step.
  std::map<int64_t, v1::StepReportsRecord> waiting_ ABSL_GUARDED_BY(mu_);
  /// Plan records, by step.
  std::map<int64_t, v1::StepPlanRecord> waiting_plans_ ABSL_GUARDED_BY(mu_);
  /// A record taken from `waiting_` is being written.
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace dcp

#endif  // DCP_PLANNER_SERVICE_STEP_REPORTS_WRITER_H_

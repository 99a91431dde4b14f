#include "planner/service/step_reports_writer.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace dcp {

StepReportsWriter::StepReportsWriter(
    PlannerStateStore& store, std::function<void(const std::string&)> log)
    : store_(store), log_(std::move(log)), thread_([this] { Loop(); }) {}

StepReportsWriter::~StepReportsWriter() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void StepReportsWriter::Write(v1::StepReportsRecord record) {
  absl::MutexLock lock(&mu_);
  const int64_t step = record.step();
  waiting_[step] = std::move(record);
}

void StepReportsWriter::WritePlan(v1::StepPlanRecord record) {
  absl::MutexLock lock(&mu_);
  const int64_t step = record.step();
  waiting_plans_[step] = std::move(record);
}

void StepReportsWriter::Flush() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &StepReportsWriter::Idle));
}

void StepReportsWriter::Loop() {
  while (true) {
    std::optional<v1::StepPlanRecord> plan;
    std::optional<v1::StepReportsRecord> reports;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      mu_.Await(absl::Condition(this, &StepReportsWriter::HasWork));
      // Stopping: return once everything is written.
      if (waiting_.empty() && waiting_plans_.empty()) return;
      // Plans first: a step's plan precedes its reports.
      if (!waiting_plans_.empty()) {
        plan = std::move(waiting_plans_.begin()->second);
        waiting_plans_.erase(waiting_plans_.begin());
      } else {
        reports = std::move(waiting_.begin()->second);
        waiting_.erase(waiting_.begin());
      }
      writing_ = true;
    }
    if (plan.has_value()) {
      if (absl::Status status = store_.WriteStepPlan(*plan);
          !status.ok() && log_) {
        log_(absl::StrCat("step ", plan->step(),
                          "'s plan was not recorded: ", status.message()));
      }
      continue;
    }
    if (absl::Status status = store_.WriteStepReports(*reports);
        !status.ok() && log_) {
      log_(absl::StrCat("step ", reports->step(),
                        "'s reports were not recorded: ", status.message()));
    }
  }
}

}  // namespace dcp

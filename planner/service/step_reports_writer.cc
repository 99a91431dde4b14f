#include "planner/service/step_reports_writer.h"

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

void StepReportsWriter::Flush() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &StepReportsWriter::Idle));
}

void StepReportsWriter::Loop() {
  while (true) {
    v1::StepReportsRecord record;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      mu_.Await(absl::Condition(this, &StepReportsWriter::HasWork));
      if (waiting_.empty()) return;  // stopping, everything written
      record = std::move(waiting_.begin()->second);
      waiting_.erase(waiting_.begin());
      writing_ = true;
    }
    if (absl::Status status = store_.WriteStepReports(record);
        !status.ok() && log_) {
      log_(absl::StrCat("step ", record.step(),
                        "'s reports were not recorded: ", status.message()));
    }
  }
}

}  // namespace dcp

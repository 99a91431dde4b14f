#include "launcher/timeline_output.h"

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "launcher/cost_breakdown.h"
#include "launcher/measured_timeline.h"

namespace dcp {

std::string LabelledPath(const std::string& path, const std::string& label) {
  const std::filesystem::path file(path);
  std::filesystem::path out = file.parent_path() / file.stem();
  return absl::StrCat(out.string(), ".", label, file.extension().string());
}

absl::Status ReportMeasuredRun(
    const MeasuredRunOutput& output, const RunSummary& summary,
    const std::function<void(const std::string&)>& print) {
  const int64_t first =
      summary.next_step - summary.first_step > 1 ? summary.first_step + 1
                                                 : summary.first_step;
  // Steps that ran a plan of phases have no step plan file: the breakdown
  // and the timeline cover one-layout steps.
  const auto has_phases = [&summary](int64_t step) {
    for (const StepRecord& record : summary.steps) {
      if (record.step == step) {
        return absl::StartsWith(record.plan_shape, "phases ");
      }
    }
    return false;
  };
  std::vector<MeasuredStep> steps;
  absl::Status read;
  int phased_steps = 0;
  for (int64_t step = first; step < summary.next_step && read.ok(); ++step) {
    if (has_phases(step)) {
      ++phased_steps;
      continue;
    }
    absl::StatusOr<MeasuredStep> measured =
        ReadMeasuredStep(output.dir, step, output.world_size);
    if (measured.ok()) {
      steps.push_back(*std::move(measured));
    } else {
      read = measured.status();
    }
  }
  absl::StatusOr<CostBreakdown> breakdown =
      read.ok() ? BreakdownOf(steps) : absl::StatusOr<CostBreakdown>(read);
  if (breakdown.ok()) {
    for (const std::string& line : FormatBreakdown(
             absl::StrFormat(
                 "%s (steps %d-%d%s)", output.label, first,
                 summary.next_step - 1,
                 phased_steps == 0
                     ? ""
                     : absl::StrCat(", ", phased_steps,
                                    " step(s) of phases left out")),
             *breakdown)) {
      print(line);
    }
  } else {
    print(absl::StrCat("warning: no ", output.label,
                       " cost-model breakdown: ",
                       breakdown.status().message()));
  }

  if (output.timeline_step < 0) return absl::OkStatus();
  if (output.timeline_step < summary.first_step ||
      output.timeline_step >= summary.next_step) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--timeline-step=", output.timeline_step, ": the ", output.label,
        " run ran steps ", summary.first_step, " to ", summary.next_step - 1));
  }
  if (has_phases(output.timeline_step)) {
    // Not an error: the peers' runs (Megatron's rounds) are phased on
    // every step, and dcp's where re-grouping paid.
    print(absl::StrCat(
        "no timeline of ", output.label, " step ", output.timeline_step,
        ": it ran a plan of phases, and the measured timeline draws plans of "
        "one layout only (pick a step whose line says \"plan SP[...]\", or "
        "run with --phased-plans=false)"));
    return absl::OkStatus();
  }
  absl::StatusOr<MeasuredStep> step = ReadMeasuredStep(
      output.dir, output.timeline_step, output.world_size);
  if (!step.ok()) {
    return absl::Status(step.status().code(),
                        absl::StrCat("the timeline of ", output.label,
                                     " step ", output.timeline_step, ": ",
                                     step.status().message()));
  }
  const std::string title = absl::StrCat(
      output.label, " step ", output.timeline_step,
      ": predicted (upper half of each row) vs measured (lower half)");
  if (absl::Status written =
          WriteMeasuredTimelineSvg(*step, title, output.timeline_path);
      !written.ok()) {
    return absl::Status(written.code(),
                        absl::StrCat("writing the timeline of ", output.label,
                                     " step ", output.timeline_step, " to ",
                                     output.timeline_path, ": ",
                                     written.message()));
  }
  print(absl::StrCat("timeline of ", output.label, " step ",
                     output.timeline_step, " (predicted vs measured): ",
                     output.timeline_path));
  return absl::OkStatus();
}

}  // namespace dcp

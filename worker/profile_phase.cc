#include "worker/profile_phase.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "cost_model/memory_model.h"
#include "planner/client/proto_convert.h"
#include "worker/status_context.h"

namespace dcp {
namespace {

/// Whether this rank wants a profile: it was asked to, and the planner has
/// no fitted parameters yet.
absl::StatusOr<bool> Wanted(PlannerClient& planner,
                            const ProfilePhaseOptions& options) {
  if (!options.wanted) return false;
  absl::StatusOr<v1::GetClusterModelResponse> model =
      planner.GetClusterModel(v1::GetClusterModelRequest());
  if (!model.ok()) {
    return WithContext(model.status(), "asking the planner for its cost model");
  }
  if (!model->using_default_params()) {
    options.log(absl::StrCat("the planner already has fitted parameters (v",
                             model->params_version(),
                             "); not profiling again"));
    return false;
  }
  return true;
}

/// Rank 0's report of the planner's fit.
absl::Status PrintFit(PlannerClient& planner, int world_size,
                      const ProfilePhaseOptions& options) {
  absl::StatusOr<v1::GetClusterModelResponse> fitted =
      planner.GetClusterModel(v1::GetClusterModelRequest());
  if (!fitted.ok()) {
    return WithContext(fitted.status(),
                       "asking the planner for the fitted cost model");
  }
  options.print(absl::StrCat("profile: ", world_size,
                             " ranks submitted their samples; cost model "
                             "params v",
                             fitted->params_version()));
  for (const v1::FitReport& proto : fitted->reports()) {
    const ModelFitReport report = FitReportFromProto(proto);
    if (report.used_defaults) {
      options.print(absl::StrCat(
          "  fit ", report.name, ": defaults kept (", report.num_samples,
          " samples", report.note.empty() ? "" : "; ", report.note, ")"));
    } else {
      options.print(absl::StrFormat(
          "  fit %s: %d samples, rms error %.1f%%, max %.1f%%%s", report.name,
          report.num_samples, 100 * report.rms_relative_error,
          100 * report.max_relative_error,
          report.held_out_samples > 0
              ? absl::StrFormat("; held out %.1f%%",
                                100 * report.held_out_rms_relative_error)
              : ""));
      // What the whole-micro-batch fits found (fixed costs, in-situ
      // all-to-alls): the terms the op-level fits cannot see.
      if (!report.note.empty() &&
          (report.name == "micro_batch" || report.name == "sp_micro_batch")) {
        options.print(absl::StrCat("    ", report.note));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunProfilePhase(PlannerClient& planner, const ModelSpec& model,
                             Communicator& communicator,
                             WorldConsensus& consensus,
                             const ProfilePhaseOptions& options,
                             const Clock& clock) {
  DCP_ASSIGN_OR_RETURN(const bool wanted, Wanted(planner, options));
  // RunProfile is collective: profile when any rank wants to.
  DCP_ASSIGN_OR_RETURN(
      const bool any_wants,
      consensus.Any(wanted, "whether to profile", options.collective_timeout));
  if (!any_wants) return absl::OkStatus();
  ProfileOptions profile = options.profile;
  if (profile.memory_static_bytes == 0 && !profile.memory_tokens.empty()) {
    // The activation-memory samples carry the model state the planner's
    // memory model assumes, so that its fit sees only the measured excess.
    absl::StatusOr<v1::GetClusterModelResponse> planned =
        planner.GetClusterModel(v1::GetClusterModelRequest());
    if (!planned.ok()) {
      return WithContext(planned.status(),
                         "asking the planner for its memory model");
    }
    // Without the communicators: they live outside the allocator that the
    // samples measure, and the fit adds them back (fitting.cc).
    MemoryParams memory = MemoryParamsFromProto(planned->params().memory());
    memory.communicator_bytes = 0;
    profile.memory_static_bytes =
        MemoryModel(model, memory, communicator.world_size()).StaticBytes();
  }
  const absl::Time start = clock.Now();
  absl::StatusOr<std::vector<ProfileSample>> samples =
      RunProfile(model, communicator, options.gpus_per_node, profile, clock);
  if (!samples.ok()) return WithContext(samples.status(), "profiling");
  options.log(absl::StrFormat("profiled %d samples in %.3f s", samples->size(),
                              absl::ToDoubleSeconds(clock.Now() - start)));
  v1::SubmitProfileRequest request;
  request.set_worker_id(options.worker_id);
  request.set_incarnation(options.incarnation);
  for (const ProfileSample& sample : *samples) {
    *request.add_samples() = ProfileSampleToProto(sample);
  }
  DCP_RETURN_IF_ERROR(WithContext(planner.SubmitProfile(request).status(),
                                  "submitting the profile to the planner"));
  // Every rank's samples are in before anyone plans.
  DCP_RETURN_IF_ERROR(
      WithContext(communicator.World().Barrier(options.collective_timeout),
                  "waiting for every rank's profile"));
  if (communicator.rank() != 0) return absl::OkStatus();
  return PrintFit(planner, communicator.world_size(), options);
}

}  // namespace dcp

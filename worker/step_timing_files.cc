#include "worker/step_timing_files.h"

#include <algorithm>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "cost_model/cluster_spec.h"
#include "cost_model/model_spec.h"
#include "dcp/v1/profile.pb.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"
#include "planner/client/proto_convert.h"
#include "planner/plan/plan_json.h"
#include "worker/json_field.h"

namespace dcp {
namespace {

using nlohmann::json;

std::string RankFile(const std::string& dir, int64_t step, int rank) {
  return absl::StrCat(dir, "/step_", step, ".rank_", rank, ".json");
}

std::string PlanFile(const std::string& dir, int64_t step) {
  return absl::StrCat(dir, "/step_", step, ".plan.json");
}

absl::Status EnsureDir(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::InternalError(absl::StrCat(
        "cannot create the step timing directory ", dir, ": ",
        error.message()));
  }
  return absl::OkStatus();
}

/// Writes `document` to `path` atomically, then removes `stale` (the same
/// writer's file kKeptStepTimings steps back) if it is there.
absl::Status WriteAndPrune(const std::string& dir, const std::string& path,
                           const json& document, const std::string& stale) {
  if (absl::Status made = EnsureDir(dir); !made.ok()) return made;
  if (absl::Status written = WriteFileAtomically(path, document.dump() + "\n");
      !written.ok()) {
    return written;
  }
  std::error_code ignored;
  std::filesystem::remove(stale, ignored);
  return absl::OkStatus();
}

absl::StatusOr<json> ReadJson(const std::string& path) {
  std::ifstream file(path);
  if (!file) return absl::NotFoundError(absl::StrCat("there is no ", path));
  try {
    json document;
    file >> document;
    return document;
  } catch (const std::exception& e) {
    return absl::DataLossError(
        absl::StrCat(path, " is not JSON (", e.what(), ")"));
  }
}

absl::Status NotOurs(const std::string& path, const std::string& why) {
  return absl::DataLossError(absl::StrCat(
      path, " is not a step timing file the workers wrote (", why,
      "); delete the directory and run again"));
}

}  // namespace

std::string StepTimingDir(const std::string& summary_file) {
  return absl::StrCat(summary_file, ".steps");
}

double RankStepTiming::IdleSeconds() const {
  double busy = 0;
  for (const MicroBatch& micro : micro_batches) {
    busy += micro.compute_seconds + micro.communication_seconds;
  }
  return std::max(0.0, step_seconds - busy);
}

absl::StatusOr<CostModel> StepPlanFile::MakeCostModel() const {
  return CostModel::Create(model, cluster, params);
}

absl::Status WriteRankStepTiming(const std::string& dir,
                                 const RankStepTiming& timing) {
  json micro_batches = json::array();
  for (const RankStepTiming::MicroBatch& micro : timing.micro_batches) {
    micro_batches.push_back({{"compute_seconds", micro.compute_seconds},
                             {"communication_seconds",
                              micro.communication_seconds}});
  }
  const json document = {
      {"step", timing.step},
      {"rank", timing.rank},
      {"group_index", timing.group_index},
      {"step_seconds", timing.step_seconds},
      {"gradient_allreduce_seconds", timing.gradient_allreduce_seconds},
      {"micro_batches", micro_batches}};
  return WriteAndPrune(
      dir, RankFile(dir, timing.step, timing.rank), document,
      RankFile(dir, timing.step - kKeptStepTimings, timing.rank));
}

absl::Status WriteStepPlanFile(const std::string& dir,
                               const StepPlanFile& plan_file) {
  absl::StatusOr<CostModel> cost_model = plan_file.MakeCostModel();
  if (!cost_model.ok()) return cost_model.status();
  std::string params;
  const auto converted = google::protobuf::util::MessageToJsonString(
      CostParamsToProto(plan_file.params), &params);
  if (!converted.ok()) {
    return absl::InternalError(absl::StrCat(
        "cannot write the cost parameters as JSON: ", converted.ToString()));
  }
  const json document = {
      {"step", plan_file.step},
      {"plan_params_version", plan_file.plan_params_version},
      {"cost_model_params_version", plan_file.cost_model_params_version},
      {"lengths_tokens", plan_file.lengths_tokens},
      {"model", json::parse(ModelSpecToJson(plan_file.model))},
      {"cluster", json::parse(ClusterSpecToJson(plan_file.cluster))},
      {"params", json::parse(params)},
      {"plan", json::parse(PlanToJson(plan_file.plan, plan_file.lengths_tokens,
                                      *cost_model))}};
  return WriteAndPrune(dir, PlanFile(dir, plan_file.step), document,
                       PlanFile(dir, plan_file.step - kKeptStepTimings));
}

absl::StatusOr<RankStepTiming> ReadRankStepTiming(const std::string& dir,
                                                  int64_t step, int rank) {
  const std::string path = RankFile(dir, step, rank);
  absl::StatusOr<json> document = ReadJson(path);
  if (!document.ok()) return document.status();
  RankStepTiming timing;
  try {
    timing.step = JsonField<int64_t>(*document, "step");
    timing.rank = JsonField<int>(*document, "rank");
    timing.group_index = JsonField<int>(*document, "group_index");
    timing.step_seconds = JsonField<double>(*document, "step_seconds");
    timing.gradient_allreduce_seconds =
        JsonField<double>(*document, "gradient_allreduce_seconds");
    for (const json& micro : JsonField<json>(*document, "micro_batches")) {
      timing.micro_batches.push_back(
          {JsonField<double>(micro, "compute_seconds"),
           JsonField<double>(micro, "communication_seconds")});
    }
  } catch (const std::exception& e) {
    return NotOurs(path, e.what());
  }
  if (timing.step != step || timing.rank != rank) {
    return NotOurs(path, absl::StrCat("it holds step ", timing.step,
                                      " of rank ", timing.rank));
  }
  return timing;
}

absl::StatusOr<StepPlanFile> ReadStepPlanFile(const std::string& dir,
                                              int64_t step) {
  const std::string path = PlanFile(dir, step);
  absl::StatusOr<json> document = ReadJson(path);
  if (!document.ok()) return document.status();
  StepPlanFile plan_file;
  try {
    plan_file.step = JsonField<int64_t>(*document, "step");
    plan_file.plan_params_version =
        JsonField<int64_t>(*document, "plan_params_version");
    plan_file.cost_model_params_version =
        JsonField<int64_t>(*document, "cost_model_params_version");
    plan_file.lengths_tokens =
        JsonField<std::vector<int64_t>>(*document, "lengths_tokens");
    absl::StatusOr<ModelSpec> model =
        ModelSpecFromJson(JsonField<json>(*document, "model").dump());
    if (!model.ok()) return NotOurs(path, std::string(model.status().message()));
    plan_file.model = *std::move(model);
    absl::StatusOr<ClusterSpec> cluster =
        ClusterSpecFromJson(JsonField<json>(*document, "cluster").dump());
    if (!cluster.ok()) {
      return NotOurs(path, std::string(cluster.status().message()));
    }
    plan_file.cluster = *std::move(cluster);
    v1::CostParams params;
    const auto parsed = google::protobuf::util::JsonStringToMessage(
        JsonField<json>(*document, "params").dump(), &params);
    if (!parsed.ok()) return NotOurs(path, parsed.ToString());
    plan_file.params = CostParamsFromProto(params);
    absl::StatusOr<Plan> plan =
        PlanFromJson(JsonField<json>(*document, "plan").dump());
    if (!plan.ok()) return NotOurs(path, std::string(plan.status().message()));
    plan_file.plan = *std::move(plan);
  } catch (const std::exception& e) {
    return NotOurs(path, e.what());
  }
  if (plan_file.step != step) {
    return NotOurs(path, absl::StrCat("it holds step ", plan_file.step));
  }
  return plan_file;
}

}  // namespace dcp

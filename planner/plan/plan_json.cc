#include "planner/plan/plan_json.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace dcp {
namespace {

using Json = nlohmann::json;
// Writers keep the documented key order for human readers.
using OrderedJson = nlohmann::ordered_json;

// Real tokens of a micro-batch; indices outside the batch count 0.
int64_t MicroBatchTokens(const MicroBatchPlan& micro_batch,
                         absl::Span<const int64_t> lengths_tokens) {
  int64_t tokens = 0;
  for (int index : micro_batch.sequence_indices) {
    if (index >= 0 && static_cast<size_t>(index) < lengths_tokens.size()) {
      tokens += lengths_tokens[index];
    }
  }
  return tokens;
}

absl::Status FieldError(absl::string_view path, absl::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat("plan JSON field '", path, "' ", problem));
}

// The JSON type of `value` in words, for error messages.
std::string TypeName(const Json& value) {
  if (value.is_number_integer()) return "an integer";
  if (value.is_number()) return "a number";
  if (value.is_object()) return "an object";
  if (value.is_array()) return "an array";
  if (value.is_null()) return "null";
  return std::string("a ") + value.type_name();
}

// The name of `key` of the object at `path` ("" for the top level).
std::string FieldPath(absl::string_view path, absl::string_view key) {
  return path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
}

// Finds `key` in `object` (which is at `path`); an error if it is missing.
absl::StatusOr<const Json*> Member(const Json& object, absl::string_view path,
                                   absl::string_view key) {
  const std::string field = FieldPath(path, key);
  auto it = object.find(std::string(key));
  if (it == object.end()) {
    return FieldError(field, "is missing; write it as PlanToJson does");
  }
  return &*it;
}

absl::StatusOr<double> ReadNumber(const Json& object, absl::string_view path,
                                  absl::string_view key) {
  absl::StatusOr<const Json*> value = Member(object, path, key);
  if (!value.ok()) return value.status();
  if (!(*value)->is_number()) {
    return FieldError(FieldPath(path, key),
                      absl::StrCat("is ", TypeName(**value), " (",
                                   (*value)->dump(), "); it must be a number"));
  }
  return (*value)->get<double>();
}

absl::StatusOr<int> ToInt(const Json& value, absl::string_view field) {
  if (!value.is_number_integer()) {
    return FieldError(field,
                      absl::StrCat("is ", TypeName(value), " (", value.dump(),
                                   "); it must be an integer"));
  }
  if (value.is_number_unsigned()) {
    const uint64_t v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int>::max())) {
      return FieldError(field, absl::StrCat("= ", v, " is out of range"));
    }
    return static_cast<int>(v);
  }
  const int64_t v = value.get<int64_t>();
  if (v < std::numeric_limits<int>::min() ||
      v > std::numeric_limits<int>::max()) {
    return FieldError(field, absl::StrCat("= ", v, " is out of range"));
  }
  return static_cast<int>(v);
}

absl::StatusOr<int> ReadInt(const Json& object, absl::string_view path,
                            absl::string_view key) {
  absl::StatusOr<const Json*> value = Member(object, path, key);
  if (!value.ok()) return value.status();
  return ToInt(**value, FieldPath(path, key));
}

absl::StatusOr<std::vector<int>> ReadIntArray(const Json& object,
                                              absl::string_view path,
                                              absl::string_view key) {
  const std::string field = absl::StrCat(path, ".", key);
  absl::StatusOr<const Json*> value = Member(object, path, key);
  if (!value.ok()) return value.status();
  if (!(*value)->is_array()) {
    return FieldError(field, absl::StrCat("is ", TypeName(**value),
                                          "; it must be an array of integers"));
  }
  std::vector<int> result;
  result.reserve((*value)->size());
  for (size_t i = 0; i < (*value)->size(); ++i) {
    absl::StatusOr<int> element =
        ToInt((**value)[i], absl::StrCat(field, "[", i, "]"));
    if (!element.ok()) return element.status();
    result.push_back(*element);
  }
  return result;
}

absl::StatusOr<const Json*> ReadArray(const Json& object,
                                      absl::string_view path,
                                      absl::string_view key) {
  absl::StatusOr<const Json*> value = Member(object, path, key);
  if (!value.ok()) return value.status();
  if (!(*value)->is_array()) {
    return FieldError(
        FieldPath(path, key),
        absl::StrCat("is ", TypeName(**value), "; it must be an array"));
  }
  return *value;
}

absl::Status RequireObject(const Json& value, absl::string_view path) {
  if (value.is_object()) return absl::OkStatus();
  return FieldError(
      path, absl::StrCat("is ", TypeName(value), "; it must be a JSON object"));
}

absl::StatusOr<MicroBatchPlan> ReadMicroBatch(const Json& json,
                                              const std::string& path) {
  if (absl::Status status = RequireObject(json, path); !status.ok()) {
    return status;
  }
  MicroBatchPlan micro_batch;
  absl::StatusOr<std::vector<int>> indices =
      ReadIntArray(json, path, "sequence_indices");
  if (!indices.ok()) return indices.status();
  micro_batch.sequence_indices = *std::move(indices);
  absl::StatusOr<int> checkpointed = ReadInt(json, path, "checkpointed_layers");
  if (!checkpointed.ok()) return checkpointed.status();
  micro_batch.checkpointed_layers = *checkpointed;
  absl::StatusOr<double> seconds = ReadNumber(json, path, "predicted_seconds");
  if (!seconds.ok()) return seconds.status();
  micro_batch.predicted_seconds = *seconds;
  absl::StatusOr<double> peak = ReadNumber(json, path, "predicted_peak_bytes");
  if (!peak.ok()) return peak.status();
  micro_batch.predicted_peak_bytes = *peak;
  return micro_batch;
}

absl::StatusOr<GroupPlan> ReadGroup(const Json& json, const std::string& path) {
  if (absl::Status status = RequireObject(json, path); !status.ok()) {
    return status;
  }
  GroupPlan group;
  absl::StatusOr<std::vector<int>> ranks = ReadIntArray(json, path, "ranks");
  if (!ranks.ok()) return ranks.status();
  group.ranks = *std::move(ranks);
  absl::StatusOr<double> seconds = ReadNumber(json, path, "predicted_seconds");
  if (!seconds.ok()) return seconds.status();
  group.predicted_seconds = *seconds;
  absl::StatusOr<const Json*> micro_batches =
      ReadArray(json, path, "micro_batches");
  if (!micro_batches.ok()) return micro_batches.status();
  for (size_t m = 0; m < (*micro_batches)->size(); ++m) {
    absl::StatusOr<MicroBatchPlan> micro_batch = ReadMicroBatch(
        (**micro_batches)[m], absl::StrCat(path, ".micro_batches[", m, "]"));
    if (!micro_batch.ok()) return micro_batch.status();
    group.micro_batches.push_back(*std::move(micro_batch));
  }
  return group;
}

}  // namespace

namespace {

OrderedJson GroupsJson(const Plan& plan,
                       absl::Span<const int64_t> lengths_tokens) {
  OrderedJson groups = OrderedJson::array();
  for (const GroupPlan& group : plan.groups) {
    OrderedJson micro_batches = OrderedJson::array();
    for (const MicroBatchPlan& micro_batch : group.micro_batches) {
      micro_batches.push_back({
          {"sequence_indices", micro_batch.sequence_indices},
          {"tokens", MicroBatchTokens(micro_batch, lengths_tokens)},
          {"checkpointed_layers", micro_batch.checkpointed_layers},
          {"predicted_seconds", micro_batch.predicted_seconds},
          {"predicted_peak_bytes", micro_batch.predicted_peak_bytes},
      });
    }
    groups.push_back({
        {"ranks", group.ranks},
        {"sp_size", group.sp_size()},
        {"predicted_seconds", group.predicted_seconds},
        {"micro_batches", std::move(micro_batches)},
    });
  }
  return groups;
}

absl::StatusOr<Json> ParsePlanObject(absl::string_view text) {
  Json json = Json::parse(text.begin(), text.end(), /*cb=*/nullptr,
                          /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    return absl::InvalidArgumentError(
        "the plan is not valid JSON; expected the object `dcp plan "
        "--format=json` prints");
  }
  if (!json.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the plan is ", TypeName(json),
        ", not a JSON object; expected the object `dcp plan --format=json` "
        "prints"));
  }
  return json;
}

// The fields a one-layout plan and a plan of phases both start with.
struct PlanSummaryFields {
  std::string strategy;
  double predicted_step_seconds = 0;
  double lower_bound_seconds = 0;
  double exposed_allreduce_seconds = 0;
};

absl::StatusOr<PlanSummaryFields> ReadPlanSummaryFields(const Json& json) {
  PlanSummaryFields fields;
  absl::StatusOr<const Json*> strategy = Member(json, "", "strategy");
  if (!strategy.ok()) return strategy.status();
  if (!(*strategy)->is_string()) {
    return FieldError("strategy", absl::StrCat("is ", TypeName(**strategy),
                                               "; it must be a string"));
  }
  fields.strategy = (*strategy)->get<std::string>();
  absl::StatusOr<double> step = ReadNumber(json, "", "predicted_step_seconds");
  if (!step.ok()) return step.status();
  fields.predicted_step_seconds = *step;
  absl::StatusOr<double> lower_bound =
      ReadNumber(json, "", "lower_bound_seconds");
  if (!lower_bound.ok()) return lower_bound.status();
  fields.lower_bound_seconds = *lower_bound;
  absl::StatusOr<double> exposed =
      ReadNumber(json, "", "exposed_allreduce_seconds");
  if (!exposed.ok()) return exposed.status();
  fields.exposed_allreduce_seconds = *exposed;
  return fields;
}

// Sets the summary fields of a Plan or a PhasedPlan.
template <typename AnyPlan>
void SetSummaryFields(const PlanSummaryFields& fields, AnyPlan& plan) {
  plan.strategy = fields.strategy;
  plan.predicted_step_seconds = fields.predicted_step_seconds;
  plan.lower_bound_seconds = fields.lower_bound_seconds;
  plan.exposed_allreduce_seconds = fields.exposed_allreduce_seconds;
}

// The "groups" array of `object` (at `path`, "" for the top level).
absl::Status ReadGroups(const Json& object, const std::string& path,
                        std::vector<GroupPlan>& out) {
  absl::StatusOr<const Json*> groups = ReadArray(object, path, "groups");
  if (!groups.ok()) return groups.status();
  const std::string prefix =
      path.empty() ? "groups[" : absl::StrCat(path, ".groups[");
  for (size_t g = 0; g < (*groups)->size(); ++g) {
    absl::StatusOr<GroupPlan> group =
        ReadGroup((**groups)[g], absl::StrCat(prefix, g, "]"));
    if (!group.ok()) return group.status();
    out.push_back(*std::move(group));
  }
  return absl::OkStatus();
}

// The fields a plan (Plan or PhasedPlan) file starts with: `before_key`
// names the time before the step's end (the slowest group's, or the phases'
// sum).
template <typename StepPlan>
OrderedJson StepJson(const StepPlan& plan, const char* before_key,
                     double before_seconds,
                     absl::Span<const int64_t> lengths_tokens,
                     const CostModel& cost_model) {
  return {
      {"strategy", plan.strategy},
      {"predicted_step_seconds", plan.predicted_step_seconds},
      {before_key, before_seconds},
      {"lower_bound_seconds", plan.lower_bound_seconds},
      {"gap_to_lower_bound", plan.GapToLowerBound()},
      {"exposed_allreduce_seconds", plan.exposed_allreduce_seconds},
      {"memory_budget_bytes", cost_model.MemoryBudgetBytes()},
      {"num_sequences", lengths_tokens.size()},
  };
}

}  // namespace

std::string PlanToJson(const Plan& plan,
                       absl::Span<const int64_t> lengths_tokens,
                       const CostModel& cost_model) {
  OrderedJson json =
      StepJson(plan, "slowest_group_seconds", plan.slowest_group_seconds,
               lengths_tokens, cost_model);
  json["groups"] = GroupsJson(plan, lengths_tokens);
  return json.dump();
}

std::string PhasedPlanToJson(const PhasedPlan& plan,
                             absl::Span<const int64_t> lengths_tokens,
                             const CostModel& cost_model) {
  OrderedJson phases = OrderedJson::array();
  for (const Plan& phase : plan.phases) {
    phases.push_back({
        {"slowest_group_seconds", phase.slowest_group_seconds},
        {"groups", GroupsJson(phase, lengths_tokens)},
    });
  }
  OrderedJson json = StepJson(plan, "phases_seconds", plan.phases_seconds,
                              lengths_tokens, cost_model);
  // Written only for the rarer kind, so that plans with barriers read as
  // they always have.
  if (!plan.barriers) json["barriers"] = false;
  json["phases"] = std::move(phases);
  return json.dump();
}

bool PlanJsonHasPhases(absl::string_view text) {
  const Json json = Json::parse(text.begin(), text.end(), /*cb=*/nullptr,
                                /*allow_exceptions=*/false);
  return json.is_object() && json.contains("phases");
}

absl::StatusOr<PhasedPlan> PhasedPlanFromJson(absl::string_view text) {
  absl::StatusOr<Json> parsed = ParsePlanObject(text);
  if (!parsed.ok()) return parsed.status();
  const Json& json = *parsed;
  if (!json.contains("phases")) {
    absl::StatusOr<Plan> one = PlanFromJson(text);
    if (!one.ok()) return one.status();
    return AsOnePhase(*std::move(one));
  }
  PhasedPlan plan;
  absl::StatusOr<PlanSummaryFields> summary = ReadPlanSummaryFields(json);
  if (!summary.ok()) return summary.status();
  SetSummaryFields(*summary, plan);
  if (json.contains("barriers")) {
    if (!json["barriers"].is_boolean()) {
      return FieldError("barriers",
                        absl::StrCat("is ", TypeName(json["barriers"]),
                                     "; write true (phases end at barriers) "
                                     "or false (groups start when their "
                                     "ranks are free)"));
    }
    plan.barriers = json["barriers"].get<bool>();
  }
  absl::StatusOr<const Json*> phases = ReadArray(json, "", "phases");
  if (!phases.ok()) return phases.status();
  for (size_t p = 0; p < (*phases)->size(); ++p) {
    const Json& phase_json = (**phases)[p];
    const std::string path = absl::StrCat("phases[", p, "]");
    if (absl::Status status = RequireObject(phase_json, path); !status.ok()) {
      return status;
    }
    Plan phase;
    phase.strategy = plan.strategy;
    if (absl::Status read = ReadGroups(phase_json, path, phase.groups);
        !read.ok()) {
      return read;
    }
    for (const GroupPlan& group : phase.groups) {
      phase.slowest_group_seconds =
          std::max(phase.slowest_group_seconds, group.predicted_seconds);
    }
    plan.phases_seconds += phase.slowest_group_seconds;
    plan.phases.push_back(std::move(phase));
  }
  return plan;
}

absl::StatusOr<Plan> PlanFromJson(absl::string_view text) {
  absl::StatusOr<Json> parsed = ParsePlanObject(text);
  if (!parsed.ok()) return parsed.status();
  const Json& json = *parsed;
  Plan plan;
  absl::StatusOr<PlanSummaryFields> summary = ReadPlanSummaryFields(json);
  if (!summary.ok()) return summary.status();
  SetSummaryFields(*summary, plan);

  if (absl::Status read = ReadGroups(json, "", plan.groups); !read.ok()) {
    return read;
  }

  if (json.contains("slowest_group_seconds")) {
    absl::StatusOr<double> slowest =
        ReadNumber(json, "", "slowest_group_seconds");
    if (!slowest.ok()) return slowest.status();
    plan.slowest_group_seconds = *slowest;
  } else {
    for (const GroupPlan& group : plan.groups) {
      plan.slowest_group_seconds =
          std::max(plan.slowest_group_seconds, group.predicted_seconds);
    }
  }
  return plan;
}

absl::Status CheckDerivedFields(absl::string_view text,
                                absl::Span<const int64_t> lengths_tokens,
                                const CostModel& cost_model) {
  const Json json = Json::parse(text.begin(), text.end(), /*cb=*/nullptr,
                                /*allow_exceptions=*/false);
  if (!json.is_object()) {
    return absl::InvalidArgumentError("the plan is not a JSON object");
  }
  auto contradiction = [](const std::string& path, const Json& value,
                          const std::string& derived) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, " = ", value.dump(), " contradicts the plan: ", derived));
  };
  // Integers compare exactly; a non-integer where one is derived is wrong.
  auto integer_is = [](const Json& value, int64_t expected) {
    return value.is_number_integer() && value.get<int64_t>() == expected;
  };
  auto close = [](double a, double b) {
    return std::abs(a - b) <= 1e-9 * std::max({1.0, std::abs(a), std::abs(b)});
  };
  if (json.contains("num_sequences") &&
      !integer_is(json["num_sequences"],
                  static_cast<int64_t>(lengths_tokens.size()))) {
    return contradiction(
        "num_sequences", json["num_sequences"],
        absl::StrCat("the batch has ", lengths_tokens.size(), " sequences"));
  }
  if (json.contains("memory_budget_bytes")) {
    const Json& budget = json["memory_budget_bytes"];
    if (!budget.is_number() ||
        !close(budget.get<double>(), cost_model.MemoryBudgetBytes())) {
      return contradiction(
          "memory_budget_bytes", budget,
          absl::StrCat("the model and cluster give a budget of ",
                       cost_model.MemoryBudgetBytes(),
                       " bytes (was the plan made with another "
                       "--memory-fraction or cluster?)"));
    }
  }
  if (json.contains("gap_to_lower_bound") &&
      json.value("lower_bound_seconds", Json()).is_number() &&
      json.value("predicted_step_seconds", Json()).is_number()) {
    const double lower_bound = json["lower_bound_seconds"].get<double>();
    const double step = json["predicted_step_seconds"].get<double>();
    const double gap = RelativeGapToBound(step, lower_bound);
    const Json& stated = json["gap_to_lower_bound"];
    if (!stated.is_number() || !close(stated.get<double>(), gap)) {
      return contradiction(
          "gap_to_lower_bound", stated,
          absl::StrCat("predicted_step_seconds / lower_bound_seconds - 1 = ",
                       gap));
    }
  }
  const Json& groups = json.value("groups", Json::array());
  for (size_t g = 0; g < groups.size(); ++g) {
    const Json& group = groups[g];
    const std::string path = absl::StrCat("groups[", g, "]");
    if (group.contains("sp_size") &&
        !integer_is(
            group["sp_size"],
            static_cast<int64_t>(group.value("ranks", Json::array()).size()))) {
      return contradiction(
          absl::StrCat(path, ".sp_size"), group["sp_size"],
          absl::StrCat("the group has ",
                       group.value("ranks", Json::array()).size(), " ranks"));
    }
    const Json& micro_batches = group.value("micro_batches", Json::array());
    for (size_t m = 0; m < micro_batches.size(); ++m) {
      const Json& micro_batch = micro_batches[m];
      if (!micro_batch.contains("tokens")) continue;
      int64_t tokens = 0;
      for (const Json& index :
           micro_batch.value("sequence_indices", Json::array())) {
        if (index.is_number_integer() && index.get<int64_t>() >= 0 &&
            static_cast<size_t>(index.get<int64_t>()) < lengths_tokens.size()) {
          tokens += lengths_tokens[index.get<int64_t>()];
        }
      }
      if (!integer_is(micro_batch["tokens"], tokens)) {
        return contradiction(
            absl::StrCat(path, ".micro_batches[", m, "].tokens"),
            micro_batch["tokens"],
            absl::StrCat("its sequences have ", tokens, " tokens"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckPhasedDerivedFields(absl::string_view text,
                                      absl::Span<const int64_t> lengths_tokens,
                                      const CostModel& cost_model) {
  if (absl::Status status =
          CheckDerivedFields(text, lengths_tokens, cost_model);
      !status.ok()) {
    return status;
  }
  const Json json = Json::parse(text.begin(), text.end(), /*cb=*/nullptr,
                                /*allow_exceptions=*/false);
  const Json& phases = json.value("phases", Json::array());
  for (size_t p = 0; p < phases.size(); ++p) {
    // A phase's groups derive from the whole batch, as a plan's do.
    Json phase = Json::object();
    phase["groups"] = phases[p].value("groups", Json::array());
    if (absl::Status status =
            CheckDerivedFields(phase.dump(), lengths_tokens, cost_model);
        !status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("phases[", p, "].", status.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace dcp

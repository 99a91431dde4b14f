#include "planner/service/prometheus_metrics.h"

#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace dcp {
namespace {

namespace names = metric_names;

/// Latency buckets from 0.5 ms to 60 s (planning a 4,096-GPU step takes
/// seconds; most RPCs take well under a millisecond).
prometheus::Histogram::BucketBoundaries LatencyBucketsSeconds() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
          0.25,   0.5,   1,      2.5,   5,    10,    30,   60};
}

// A gauge without labels, registered in `registry`.
prometheus::Gauge& UnlabelledGauge(prometheus::Registry& registry,
                                   const char* name, const char* help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add(
      {});
}

}  // namespace

absl::string_view GrpcStatusCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN";
  }
}

PrometheusPlannerMetrics::PrometheusPlannerMetrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      plan_latency_seconds_(
          prometheus::BuildHistogram()
              .Name(names::kPlanLatencySeconds)
              .Help("Seconds to compute one step's plan (once per step).")
              .Register(*registry_)
              .Add({}, LatencyBucketsSeconds())),
      plans_total_(prometheus::BuildCounter()
                       .Name(names::kPlansTotal)
                       .Help("Steps planned (one per step, however many "
                             "workers fetch the plan).")
                       .Register(*registry_)
                       .Add({})),
      predicted_step_seconds_(
          UnlabelledGauge(*registry_, names::kPredictedStepSeconds,
                          "Predicted step time of the last planned step.")),
      plan_sp_groups_(prometheus::BuildGauge()
                          .Name(names::kPlanSpGroups)
                          .Help("SP groups of each size (label sp_size) in "
                                "the last planned step; 0 for a size an "
                                "earlier plan used.")
                          .Register(*registry_)),
      plan_micro_batches_(UnlabelledGauge(
          *registry_, names::kPlanMicroBatches,
          "Micro-batches of the last planned step, summed over its "
          "SP groups.")),
      plan_recomputed_layers_(UnlabelledGauge(
          *registry_, names::kPlanRecomputedLayers,
          "Mean checkpointed (recomputed) layers per micro-batch "
          "of the last planned step.")),
      plan_max_checkpointed_layers_(
          UnlabelledGauge(*registry_, names::kPlanMaxCheckpointedLayers,
                          "Most checkpointed (recomputed) layers of any "
                          "micro-batch of the last planned step.")),
      measured_step_seconds_(prometheus::BuildGauge()
                                 .Name(names::kMeasuredStepSeconds)
                                 .Help("Last measured step time of each rank.")
                                 .Register(*registry_)),
      step_imbalance_ratio_(UnlabelledGauge(
          *registry_, names::kStepImbalanceRatio,
          "(max - mean) / max of the ranks' measured step times of "
          "the last step every rank reported.")),
      cost_model_relative_error_(UnlabelledGauge(
          *registry_, names::kCostModelRelativeError,
          "|measured - predicted| / measured step time of the last "
          "reported group.")),
      registered_workers_(
          UnlabelledGauge(*registry_, names::kRegisteredWorkers,
                          "Workers registered with the planner.")),
      rpc_requests_total_(
          prometheus::BuildCounter()
              .Name(names::kRpcRequestsTotal)
              .Help("RPCs answered by the planner, by method and status code.")
              .Register(*registry_)),
      rpc_latency_seconds_(
          prometheus::BuildHistogram()
              .Name(names::kRpcLatencySeconds)
              .Help("Seconds from receiving an RPC to answering it, by "
                    "method.")
              .Register(*registry_)) {}

void PrometheusPlannerMetrics::PlanComputed(double latency_seconds,
                                            double predicted_step_seconds) {
  plan_latency_seconds_.Observe(latency_seconds);
  plans_total_.Increment();
  predicted_step_seconds_.Set(predicted_step_seconds);
}

void PrometheusPlannerMetrics::PlanShape(
    const std::map<int, int>& groups_by_sp_size, int micro_batches,
    double mean_checkpointed_layers, int max_checkpointed_layers) {
  absl::MutexLock lock(&mutex_);
  for (const auto& [size, count] : groups_by_sp_size) {
    prometheus::Gauge*& cached = plan_sp_groups_by_size_[size];
    if (cached == nullptr) {
      cached =
          &plan_sp_groups_.Add({{names::kSpSizeLabel, absl::StrCat(size)}});
    }
  }
  for (const auto& [size, gauge] : plan_sp_groups_by_size_) {
    const auto it = groups_by_sp_size.find(size);
    gauge->Set(it != groups_by_sp_size.end() ? it->second : 0);
  }
  plan_micro_batches_.Set(micro_batches);
  plan_recomputed_layers_.Set(mean_checkpointed_layers);
  plan_max_checkpointed_layers_.Set(max_checkpointed_layers);
}

void PrometheusPlannerMetrics::StepMeasured(int rank,
                                            double measured_step_seconds) {
  prometheus::Gauge* gauge = nullptr;
  {
    absl::MutexLock lock(&mutex_);
    prometheus::Gauge*& cached = measured_step_seconds_by_rank_[rank];
    if (cached == nullptr) {
      cached = &measured_step_seconds_.Add(
          {{names::kRankLabel, absl::StrCat(rank)}});
    }
    gauge = cached;
  }
  gauge->Set(measured_step_seconds);
}

void PrometheusPlannerMetrics::StepImbalance(double imbalance) {
  step_imbalance_ratio_.Set(imbalance);
}

void PrometheusPlannerMetrics::CostModelError(double relative_error) {
  cost_model_relative_error_.Set(relative_error);
}

void PrometheusPlannerMetrics::RegisteredWorkers(int workers) {
  registered_workers_.Set(workers);
}

void PrometheusPlannerMetrics::RpcCompleted(absl::string_view method,
                                            grpc::StatusCode code,
                                            double seconds) {
  prometheus::Counter* requests = nullptr;
  prometheus::Histogram* latency = nullptr;
  {
    absl::MutexLock lock(&mutex_);
    prometheus::Counter*& cached_requests =
        rpc_requests_by_method_and_code_[std::make_pair(
            std::string(method), static_cast<int>(code))];
    if (cached_requests == nullptr) {
      cached_requests = &rpc_requests_total_.Add(
          {{names::kMethodLabel, std::string(method)},
           {names::kCodeLabel, std::string(GrpcStatusCodeName(code))}});
    }
    requests = cached_requests;
    prometheus::Histogram*& cached_latency =
        rpc_latency_by_method_[std::string(method)];
    if (cached_latency == nullptr) {
      cached_latency = &rpc_latency_seconds_.Add(
          {{names::kMethodLabel, std::string(method)}},
          LatencyBucketsSeconds());
    }
    latency = cached_latency;
  }
  requests->Increment();
  latency->Observe(seconds);
}

}  // namespace dcp

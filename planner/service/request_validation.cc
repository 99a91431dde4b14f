#include "planner/service/request_validation.h"

#include <cmath>
#include <optional>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "cost_model/memory_model.h"
#include "planner/client/proto_convert.h"
#include "planner/plan/limits.h"

namespace dcp {
namespace {

// A batch's limits are the planner core's (planner/plan/limits.h).
constexpr int kMaxProfileSamples = 1 << 20;
constexpr size_t kMaxIdentifierLength = 128;
constexpr size_t kMaxFreeTextLength = 256;

bool IsIdentifierCharacter(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' ||
         c == '_' || c == ':' || c == '-';
}

}  // namespace

std::string Hex(uint64_t value) { return absl::StrFormat("%016x", value); }

std::string Quote(absl::string_view value) {
  std::string shown(value.substr(0, 64));
  for (char& c : shown) {
    if (!absl::ascii_isprint(static_cast<unsigned char>(c))) c = '?';
  }
  return absl::StrCat("'", shown, value.size() > 64 ? "...'" : "'");
}

absl::Status ValidateIdentifier(absl::string_view field,
                                absl::string_view value,
                                absl::string_view example) {
  if (value.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " is empty; set it to a stable name such as ", example));
  }
  if (value.size() > kMaxIdentifierLength) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " ", Quote(value), " has ", value.size(),
                     " characters; use at most ", kMaxIdentifierLength));
  }
  for (char c : value) {
    if (!IsIdentifierCharacter(c)) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " ", Quote(value), " contains ",
                       Quote(absl::string_view(&c, 1)),
                       "; use only letters, digits and . _ : -"));
    }
  }
  return absl::OkStatus();
}

namespace {

absl::Status ValidateIncarnation(absl::string_view value) {
  if (value.empty()) return absl::OkStatus();
  return ValidateIdentifier("incarnation", value, "a random hex string");
}

// A batch decides its step's plan: only a registered worker may send one.
absl::Status ValidateBatchSender(absl::string_view worker_id,
                                 absl::string_view call) {
  if (worker_id.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker_id is empty; ", call,
        " decides a step's batch and needs the id of a registered worker of "
        "the job (the one whose batches these are)"));
  }
  return ValidateIdentifier("worker_id", worker_id, "the pod name");
}

// Descriptive fields (gpu_kind, libtorch_version, address): printable ASCII,
// so that they log, persist and compare plainly.
absl::Status ValidateFreeText(absl::string_view field,
                              absl::string_view value) {
  if (value.size() > kMaxFreeTextLength) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " ", Quote(value), " has ", value.size(),
                     " characters; use at most ", kMaxFreeTextLength));
  }
  for (char c : value) {
    const unsigned char byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s %s contains byte 0x%02x; use printable ASCII",
                          field, Quote(value), byte));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateAddress(absl::string_view address) {
  if (address.empty()) return absl::OkStatus();
  DCP_RETURN_IF_ERROR(ValidateFreeText("address", address));
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 1 ||
      port > 65535 ||
      address.substr(colon + 1).find_first_not_of("0123456789") !=
          absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "address ", Quote(address),
        " is not host:port with a port in 1..65535; give where this worker "
        "would host the c10d store, e.g. 10.0.0.5:29500"));
  }
  return absl::OkStatus();
}
}  // namespace

absl::Status ValidateGlobalBatch(const v1::GlobalBatch& batch,
                                 absl::string_view field) {
  if (batch.step() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".step = ", batch.step(), "; steps are numbered from 0"));
  }
  if (batch.samples().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".samples is empty (step ", batch.step(),
                     "); give the step's sequences"));
  }
  if (batch.samples_size() > kMaxBatchSequences) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".samples has ", batch.samples_size(), " sequences; at most ",
        kMaxBatchSequences, " are supported"));
  }
  absl::flat_hash_map<int64_t, int> index_of_id;
  index_of_id.reserve(batch.samples_size());
  for (int i = 0; i < batch.samples_size(); ++i) {
    const v1::Sample& sample = batch.samples(i);
    if (sample.length_tokens() <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".samples[", i, "] (id ", sample.id(),
                       ") has length_tokens = ", sample.length_tokens(),
                       "; every sequence needs at least 1 token"));
    }
    if (sample.length_tokens() > kMaxSequenceTokens) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".samples[", i, "] (id ", sample.id(),
          ") has length_tokens = ", sample.length_tokens(), "; at most ",
          kMaxSequenceTokens, " tokens are supported"));
    }
    auto [it, inserted] = index_of_id.emplace(sample.id(), i);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".samples[", i, "].id = ", sample.id(), " repeats ", field,
          ".samples[", it->second, "].id; ids must be unique within a batch"));
    }
  }
  return absl::OkStatus();
}

namespace {

/// A measured duration of a step's phase: 0..kMaxStepSeconds.
absl::Status CheckPhaseSeconds(absl::string_view field, double value) {
  if (!std::isfinite(value) || value < 0 || value > kMaxStepSeconds) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " = ", value,
                     "; it must be a measured time of 0 to ", kMaxStepSeconds,
                     " seconds (a week)"));
  }
  return absl::OkStatus();
}

// Descriptive fields of a registration, checked in this order.
absl::Status ValidateRegistrationText(
    const v1::RegisterWorkerRequest& request) {
  DCP_RETURN_IF_ERROR(ValidateAddress(request.address()));
  DCP_RETURN_IF_ERROR(ValidateFreeText("gpu_kind", request.gpu_kind()));
  return ValidateFreeText("libtorch_version", request.libtorch_version());
}

}  // namespace

absl::Status ValidateRegisterWorkerRequest(
    const v1::RegisterWorkerRequest& request, int gpus_per_node) {
  const int per_node = gpus_per_node;
  DCP_RETURN_IF_ERROR(
      ValidateIdentifier("worker_id", request.worker_id(), "the pod name"));
  DCP_RETURN_IF_ERROR(
      ValidateIdentifier("node_name", request.node_name(), "the host name"));
  if (!request.job_id().empty()) {
    DCP_RETURN_IF_ERROR(ValidateIdentifier("job_id", request.job_id(),
                                           "the launcher's job name"));
  }
  if (request.num_ranks() < 1 || request.num_ranks() > per_node) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_ranks = ", request.num_ranks(), " for worker ",
        Quote(request.worker_id()), "; it must be in [1, ", per_node,
        "] (the cluster has ", per_node, " GPUs per node)"));
  }
  if (request.backend() != "" && request.backend() != "gloo" &&
      request.backend() != "nccl") {
    return absl::InvalidArgumentError(absl::StrCat(
        "backend ", Quote(request.backend()), " for worker ",
        Quote(request.worker_id()),
        " is not supported; use \"gloo\" (CPU) or \"nccl\" (GPU)"));
  }
  if (request.max_cached_groups() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_cached_groups = ", request.max_cached_groups(), " for worker ",
        Quote(request.worker_id()),
        "; give the most SP groups a rank keeps cached (0: unbounded)"));
  }
  if (request.backend() == "nccl" && request.max_cached_groups() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker ", Quote(request.worker_id()),
        " uses NCCL with an unbounded SP group cache (max_cached_groups = "
        "0); each NCCL communicator holds ~0.6 GB of GPU memory that the "
        "planner's memory model must count, so bound it (dcp_worker "
        "--max-cached-groups=N, N >= 1; the default on NCCL is ",
        kDefaultNcclMaxCachedGroups, ")"));
  }
  if (request.gpu_memory_bytes() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpu_memory_bytes = ", request.gpu_memory_bytes(),
                     " for worker ", Quote(request.worker_id()),
                     "; give the GPU's total memory, or 0 if unknown"));
  }
  DCP_RETURN_IF_ERROR(ValidateIncarnation(request.incarnation()));
  if (request.precision().empty() != request.optimizer_sharding().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker ", Quote(request.worker_id()), " gives precision ",
        Quote(request.precision()), " and optimizer_sharding ",
        Quote(request.optimizer_sharding()),
        "; declare both (the training state they make) or neither"));
  }
  if (!request.precision().empty() &&
      !TrainingPrecisionFromName(request.precision()).has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("precision ", Quote(request.precision()), " for worker ",
                     Quote(request.worker_id()),
                     " is not supported; use \"bf16\" or \"fp32\""));
  }
  if (!request.optimizer_sharding().empty() &&
      !ParameterShardingFromName(request.optimizer_sharding()).has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer_sharding ", Quote(request.optimizer_sharding()),
        " for worker ", Quote(request.worker_id()),
        " is not supported; use \"none\", \"zero1\" or \"zero3\""));
  }
  return ValidateRegistrationText(request);
}

absl::Status ValidateSubmitProfileRequest(
    const v1::SubmitProfileRequest& request) {
  DCP_RETURN_IF_ERROR(
      ValidateIdentifier("worker_id", request.worker_id(), "the pod name"));
  DCP_RETURN_IF_ERROR(ValidateIncarnation(request.incarnation()));
  if (request.samples().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("samples is empty (worker ", Quote(request.worker_id()),
                     "); send the worker's micro-benchmark measurements"));
  }
  if (request.samples_size() > kMaxProfileSamples) {
    return absl::InvalidArgumentError(
        absl::StrCat("samples has ", request.samples_size(),
                     " entries; send at most ", kMaxProfileSamples));
  }
  return absl::OkStatus();
}

absl::StatusOr<SubmittedBatches> ValidateSubmitBatchesRequest(
    const v1::SubmitBatchesRequest& request) {
  DCP_RETURN_IF_ERROR(
      ValidateBatchSender(request.worker_id(), "SubmitBatches"));
  DCP_RETURN_IF_ERROR(ValidateIncarnation(request.incarnation()));
  SubmittedBatches result;
  for (int i = 0; i < request.batches_size(); ++i) {
    const v1::GlobalBatch& batch = request.batches(i);
    DCP_RETURN_IF_ERROR(
        ValidateGlobalBatch(batch, absl::StrCat("batches[", i, "]")));
    result.fingerprints.push_back(BatchFingerprint(batch));
    auto [it, inserted] = result.index_of_step.emplace(batch.step(), i);
    if (!inserted &&
        result.fingerprints[it->second] != result.fingerprints[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "batches[", i, "] and batches[", it->second, "] are both step ",
          batch.step(), " with different samples; a step has one batch"));
    }
  }
  return result;
}

absl::Status ValidateGetPlanWithBatch(const v1::GetPlanRequest& request,
                                      uint64_t fingerprint) {
  DCP_RETURN_IF_ERROR(
      ValidateBatchSender(request.worker_id(), "GetPlan with a batch"));
  DCP_RETURN_IF_ERROR(ValidateIncarnation(request.incarnation()));
  const int64_t step = request.batch().step();
  if (request.step() != 0 && request.step() != step) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step = ", request.step(), " but batch.step = ", step,
        "; give the step once (batch.step with the samples, or step without "
        "them)"));
  }
  if (request.batch_fingerprint() != 0 &&
      request.batch_fingerprint() != fingerprint) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch_fingerprint = ", Hex(request.batch_fingerprint()),
        " but the samples sent have fingerprint ", Hex(fingerprint),
        "; compute it with BatchFingerprint over the same samples, or leave "
        "it 0"));
  }
  return absl::OkStatus();
}

absl::Status ValidateGetPlanByStep(const v1::GetPlanRequest& request) {
  if (!request.worker_id().empty()) {
    DCP_RETURN_IF_ERROR(
        ValidateIdentifier("worker_id", request.worker_id(), "the pod name"));
  }
  DCP_RETURN_IF_ERROR(ValidateIncarnation(request.incarnation()));
  const int64_t step = request.step();
  if (request.has_batch() && request.batch().step() != step) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch.samples is empty (step ", request.batch().step(),
        ") and step = ", step,
        "; give the step's sequences in batch, or leave batch unset and ask "
        "by step"));
  }
  if (step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("step = ", step, "; steps are numbered from 0"));
  }
  return absl::OkStatus();
}

absl::Status ValidateReportStepStatsRequest(
    const v1::ReportStepStatsRequest& request, int world_size) {
  DCP_RETURN_IF_ERROR(
      ValidateIdentifier("worker_id", request.worker_id(), "the pod name"));
  DCP_RETURN_IF_ERROR(ValidateIncarnation(request.incarnation()));
  if (request.step() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("step = ", request.step(), "; steps are numbered from 0"));
  }
  if (request.rank() < 0 || request.rank() >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank = ", request.rank(), "; ranks are 0..",
                     world_size - 1, " in this world of ", world_size));
  }
  if (!std::isfinite(request.step_seconds()) || request.step_seconds() <= 0 ||
      request.step_seconds() > kMaxStepSeconds) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step_seconds = ", request.step_seconds(),
        "; report the measured step time, a number > 0 and at most ",
        kMaxStepSeconds, " (a week)"));
  }
  std::set<int> seen_indices;
  for (int i = 0; i < request.micro_batches_size(); ++i) {
    const v1::MicroBatchStats& stats = request.micro_batches(i);
    const std::string field = absl::StrCat("micro_batches[", i, "]");
    if (stats.micro_batch_index() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".micro_batch_index = ", stats.micro_batch_index(),
          "; indices start at 0"));
    }
    if (!seen_indices.insert(stats.micro_batch_index()).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".micro_batch_index = ", stats.micro_batch_index(),
          " repeats an earlier entry; report each micro-batch once"));
    }
    for (const auto& [name, value] :
         {std::pair<const char*, double>{"compute_seconds",
                                         stats.compute_seconds()},
          {"communication_seconds", stats.communication_seconds()},
          {"idle_seconds", stats.idle_seconds()}}) {
      DCP_RETURN_IF_ERROR(
          CheckPhaseSeconds(absl::StrCat(field, ".", name), value));
    }
    if (stats.peak_memory_bytes() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".peak_memory_bytes = ", stats.peak_memory_bytes(),
          "; it must be >= 0"));
    }
  }
  return absl::OkStatus();
}

}  // namespace dcp

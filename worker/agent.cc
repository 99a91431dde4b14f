#include "worker/agent.h"

#if DCP_LIBTORCH_HAS_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "cost_model/cost_model.h"
#include "nlohmann/json.hpp"
#include "planner/baselines.h"
#include "planner/plan.h"
#include "planner/service/batch_fingerprint.h"
#include "planner/service/proto_convert.h"
#include "planner/validate.h"
#include "torch/torch.h"
#include "worker/checkpoint.h"
#include "worker/model.h"
#include "worker/plan_executor.h"

#ifndef DCP_LIBTORCH_HAS_CUDA
#error "DCP_LIBTORCH_HAS_CUDA is undefined: depend on @libtorch//:cuda"
#endif

namespace dcp {
namespace {

/// `status` with `context` in front of its message, same code.
absl::Status WithContext(const absl::Status& status,
                         absl::string_view context) {
  return absl::Status(status.code(),
                      absl::StrCat(context, ": ", status.message()));
}

#define DCP_AGENT_RETURN_IF_ERROR(expr)    \
  do {                                     \
    const ::absl::Status status_ = (expr); \
    if (!status_.ok()) return status_;     \
  } while (false)

/// Where the model and the collectives run.
struct Placement {
  std::string backend = "gloo";
  torch::Device device = torch::kCPU;
};

bool CudaUsable() {
#if DCP_LIBTORCH_HAS_CUDA
  return torch::cuda::is_available();
#else
  return false;
#endif
}

absl::StatusOr<std::string> ChooseBackend(const std::string& requested) {
  if (requested.empty()) return CudaUsable() ? "nccl" : "gloo";
  if (requested == "gloo") return requested;
  if (requested == "nccl") {
    if (!CudaUsable()) {
      return absl::FailedPreconditionError(
          "backend nccl needs a LibTorch built with CUDA and a visible GPU; "
          "use gloo on this machine (or leave the backend unset to choose)");
    }
    return requested;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "backend \"", requested, "\" is not supported; use gloo or nccl"));
}

/// Splits "host:port" (or "[v6]:port").
absl::StatusOr<std::pair<std::string, int>> SplitHostPort(
    absl::string_view address) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 1 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous address \"", address,
                     "\" is not host:port with a port in 1..65535"));
  }
  absl::string_view host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return std::make_pair(std::string(host), port);
}

std::string JoinHostPort(const std::string& host, int port) {
  return absl::StrContains(host, ':') ? absl::StrCat("[", host, "]:", port)
                                      : absl::StrCat(host, ":", port);
}

/// Whether a TCP connection to host:port succeeds within a second (closed
/// at once).
bool AcceptsConnections(const std::string& host, int port) {
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* addresses = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints,
                    &addresses) != 0) {
    return false;
  }
  bool connected = false;
  for (addrinfo* address = addresses; address != nullptr && !connected;
       address = address->ai_next) {
    const int fd =
        ::socket(address->ai_family, address->ai_socktype | SOCK_NONBLOCK,
                 address->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, address->ai_addr, address->ai_addrlen) == 0) {
      connected = true;
    } else if (errno == EINPROGRESS) {
      pollfd poll_fd = {fd, POLLOUT, 0};
      int error = 0;
      socklen_t length = sizeof(error);
      connected =
          ::poll(&poll_fd, 1, /*timeout=*/1000) == 1 &&
          ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 &&
          error == 0;
    }
    ::close(fd);
  }
  ::freeaddrinfo(addresses);
  return connected;
}

std::string Seconds(double seconds) {
  return absl::StrFormat("%.3f s", seconds);
}

/// Writes `text` to `path` through a temporary file and a rename.
absl::Status WriteFileAtomically(const std::string& path,
                                 const std::string& text) {
  const std::string temporary =
      absl::StrCat(path, ".tmp.", static_cast<long>(::getpid()));
  {
    std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
    file << text;
    file.close();
    if (!file) {
      std::remove(temporary.c_str());
      return absl::InternalError(absl::StrCat("cannot write ", temporary));
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    return absl::InternalError(
        absl::StrCat("cannot rename ", temporary, " to ", path));
  }
  return absl::OkStatus();
}

/// One rank's run of the agent: the phases of WorkerAgent::Run in order.
/// Not thread-safe.
class AgentRun {
 public:
  AgentRun(PlannerClient& planner, const WorkerAgentOptions& options,
           const Clock& clock, WorkerMetrics& metrics)
      : planner_(planner),
        options_(options),
        clock_(clock),
        metrics_(metrics) {}

  absl::StatusOr<AgentRunResult> Run() {
    DCP_AGENT_RETURN_IF_ERROR(CheckOptions());
    absl::StatusOr<std::string> backend = ChooseBackend(options_.backend);
    if (!backend.ok()) return backend.status();
    placement_.backend = *backend;

    DCP_AGENT_RETURN_IF_ERROR(Register());
    if (stopped_before_joining_) {
      Log("asked to stop while waiting for the world; exiting without "
          "joining it");
      result_.stopped_on_request = true;
      return result_;
    }
    DCP_AGENT_RETURN_IF_ERROR(Join());
    DCP_AGENT_RETURN_IF_ERROR(BuildModel());
    DCP_AGENT_RETURN_IF_ERROR(Resume());
    DCP_AGENT_RETURN_IF_ERROR(Profile());
    DCP_AGENT_RETURN_IF_ERROR(Train());
    return result_;
  }

 private:
  void Log(const std::string& line) const {
    const std::string text = absl::StrCat(
        "worker ", options_.worker_id,
        rank_ >= 0 ? absl::StrCat(" (rank ", rank_, ")") : std::string(), ": ",
        line);
    if (options_.log) {
      options_.log(text);
    } else {
      std::fprintf(stderr, "%s\n", text.c_str());
      std::fflush(stderr);
    }
  }

  /// Rank 0's report lines.
  void Print(const std::string& line) const {
    if (rank_ != 0) return;
    if (options_.print) {
      options_.print(line);
    } else {
      std::fprintf(stdout, "%s\n", line.c_str());
      std::fflush(stdout);
    }
  }

  bool StopRequested() const {
    return options_.stop_requested && options_.stop_requested();
  }

  absl::Status CheckOptions() const {
    if (options_.worker_id.empty()) {
      return absl::InvalidArgumentError(
          "worker_id is empty; give a stable name such as the pod name");
    }
    if (options_.node_name.empty()) {
      return absl::InvalidArgumentError(
          "node_name is empty; give the host name (ranks of one node share "
          "it)");
    }
    if (options_.steps < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("steps = ", options_.steps, "; it must be >= 0"));
    }
    if (options_.checkpoint_every < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint_every = ", options_.checkpoint_every,
                       "; it must be >= 0 (0: only when stopping)"));
    }
    if ((options_.resume || options_.checkpoint_every > 0) &&
        options_.checkpoint_dir.empty()) {
      return absl::InvalidArgumentError(
          "resuming or periodic checkpoints need a checkpoint directory");
    }
    if (options_.store_port < 0 || options_.store_port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("store_port = ", options_.store_port,
                       " is not a TCP port (0 picks a free one)"));
    }
    if (options_.collective_timeout <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError("collective_timeout must be positive");
    }
    if (options_.bucket_micro_batch_sequences < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bucket_micro_batch_sequences = ",
          options_.bucket_micro_batch_sequences, "; it must be >= 1"));
    }
    return absl::OkStatus();
  }

  // --- Registration ------------------------------------------------------

  absl::Status Register() {
    store_port_ = options_.store_port;
    if (store_port_ == 0) {
      absl::StatusOr<int> port = PickFreePort(options_.store_host);
      if (!port.ok()) {
        return WithContext(port.status(),
                           "choosing the port of this worker's c10d store");
      }
      store_port_ = *port;
    }
    v1::RegisterWorkerRequest request;
    request.set_worker_id(options_.worker_id);
    request.set_node_name(options_.node_name);
    request.set_num_ranks(1);
    request.set_gpu_kind(placement_.backend == "nccl" ? "cuda" : "cpu");
    request.set_gpu_memory_bytes(0);
    request.set_address(JoinHostPort(options_.store_host, store_port_));
    request.set_libtorch_version(TORCH_VERSION);
    request.set_backend(placement_.backend);

    register_request_ = request;
    world_deadline_ = clock_.Now() + options_.world_timeout;
    const absl::Time& deadline = world_deadline_;
    absl::Duration backoff = options_.poll_initial_backoff;
    std::string last_waiting_for;
    while (true) {
      absl::StatusOr<v1::RegisterWorkerResponse> response =
          planner_.RegisterWorker(request);
      if (!response.ok()) {
        return WithContext(
            response.status(),
            absl::StrCat("registering worker \"", options_.worker_id,
                         "\" with the planner"));
      }
      if (response->num_ranks() != 1) {
        return absl::InternalError(
            absl::StrCat("the planner gave this one-rank worker ",
                         response->num_ranks(), " ranks"));
      }
      if (response->world_complete()) {
        registration_ = *std::move(response);
        break;
      }
      if (response->waiting_for() != last_waiting_for) {
        last_waiting_for = response->waiting_for();
        Log(absl::StrCat("registered as rank ", response->first_rank(), " of ",
                         response->world_size(),
                         "; waiting for the world: ", last_waiting_for));
      }
      if (StopRequested()) {
        stopped_before_joining_ = true;
        return absl::OkStatus();
      }
      if (clock_.Now() >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("the world did not complete within ",
                         absl::FormatDuration(options_.world_timeout),
                         " (still ", last_waiting_for,
                         "); start the missing workers, or check the planner's "
                         "--nodes/--gpus-per-node (or --cluster)"));
      }
      Sleep(backoff);
      backoff = std::min(backoff * 2, options_.poll_max_backoff);
    }
    rank_ = registration_.first_rank();
    result_.rank = rank_;
    result_.world_size = registration_.world_size();
    Log(absl::StrCat(
        "rank ", rank_, " of ", registration_.world_size(), " (node slot ",
        registration_.node_index(), "); c10d store of rank 0 at ",
        registration_.rendezvous_address(), ", backend ", placement_.backend));
    return absl::OkStatus();
  }

  // --- World, model, checkpoint ----------------------------------------------

  absl::Status Join() {
    cluster_ = ClusterSpecFromProto(registration_.cluster());
    if (cluster_.NumGpus() != registration_.world_size()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the planner's cluster has ", cluster_.NumGpus(),
          " ranks but its world has ", registration_.world_size()));
    }
    C10dOptions c10d;
    c10d.rank = rank_;
    c10d.world_size = registration_.world_size();
    c10d.backend = placement_.backend;
    c10d.timeout = options_.collective_timeout;
    c10d.store_prefix = "dcp";
    if (rank_ == 0) {
      c10d.store_host = options_.store_host;
      c10d.store_port = store_port_;
    } else {
      absl::StatusOr<std::pair<std::string, int>> rendezvous =
          AwaitRendezvous();
      if (!rendezvous.ok()) return rendezvous.status();
      c10d.store_host = rendezvous->first;
      c10d.store_port = rendezvous->second;
    }
    CommunicatorFactory factory = options_.create_communicator;
    if (!factory) factory = &CreateC10dCommunicator;
    absl::StatusOr<std::unique_ptr<Communicator>> communicator = factory(c10d);
    if (!communicator.ok()) {
      return WithContext(
          communicator.status(),
          absl::StrCat("joining the world (", c10d.backend, ", store at ",
                       JoinHostPort(c10d.store_host, c10d.store_port), ")"));
    }
    communicator_ = *std::move(communicator);
    if (placement_.backend == "nccl") {
#if DCP_LIBTORCH_HAS_CUDA
      const int devices = static_cast<int>(torch::cuda::device_count());
      placement_.device = torch::Device(
          torch::kCUDA, static_cast<c10::DeviceIndex>(
                            (rank_ % cluster_.gpus_per_node) % devices));
#endif
    }
    Log(absl::StrCat("joined the world of ", communicator_->world_size(),
                     " on ", placement_.device.str()));
    return absl::OkStatus();
  }

  /// Ranks other than 0: rank 0's store address once it accepts
  /// connections. A restarted job's first registrations may still show the
  /// address of rank 0's previous incarnation (the world looks complete from
  /// the old registrations), so until the store answers this re-registers
  /// to pick up the address rank 0 announces when it comes back.
  absl::StatusOr<std::pair<std::string, int>> AwaitRendezvous() {
    absl::Duration backoff = options_.poll_initial_backoff;
    std::string logged_address;
    while (true) {
      const std::string& address = registration_.rendezvous_address();
      absl::StatusOr<std::pair<std::string, int>> rendezvous =
          SplitHostPort(address);
      if (!rendezvous.ok()) {
        return WithContext(rendezvous.status(), "joining the world");
      }
      if (AcceptsConnections(rendezvous->first, rendezvous->second)) {
        return rendezvous;
      }
      if (address != logged_address) {
        logged_address = address;
        Log(absl::StrCat("waiting for rank 0's c10d store at ", address));
      }
      if (clock_.Now() >= world_deadline_) {
        return absl::DeadlineExceededError(absl::StrCat(
            "rank 0's c10d store at ", address,
            " did not accept connections within ",
            absl::FormatDuration(options_.world_timeout),
            "; is rank 0's worker running, and is its --store-host "
            "reachable from here?"));
      }
      Sleep(backoff);
      backoff = std::min(backoff * 2, options_.poll_max_backoff);
      absl::StatusOr<v1::RegisterWorkerResponse> response =
          planner_.RegisterWorker(register_request_);
      if (!response.ok()) {
        return WithContext(response.status(),
                           "registering again for rank 0's store address");
      }
      if (response->first_rank() != rank_) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the planner moved this worker from rank ", rank_, " to rank ",
            response->first_rank(), " while it was joining the world"));
      }
      registration_ = *std::move(response);
    }
  }

  void Sleep(absl::Duration duration) const {
    if (options_.sleep) {
      options_.sleep(duration);
    } else {
      absl::SleepFor(duration);
    }
  }

  absl::Status BuildModel() {
    model_spec_ = ModelSpecFromProto(registration_.model());
    GptModelOptions model_options;
    model_options.seed = options_.model_seed;
    model_options.dtype = torch::kFloat32;
    model_options.device = placement_.device;
    absl::StatusOr<std::shared_ptr<GptModel>> model =
        GptModel::Create(model_spec_, model_options);
    if (!model.ok()) {
      return WithContext(model.status(),
                         absl::StrCat("building model \"", model_spec_.name,
                                      "\" from the planner's ModelSpec"));
    }
    model_ = *std::move(model);
    PlanExecutorOptions executor_options;
    executor_options.collective_timeout = options_.collective_timeout;
    executor_options.learning_rate = options_.learning_rate;
    executor_options.clock = &clock_;
    executor_ = std::make_unique<PlanExecutor>(model_, *communicator_,
                                               executor_options);
    return absl::OkStatus();
  }

  /// Every rank's `value`, by rank (an all-reduce of one-hot vectors),
  /// waiting at most `timeout`.
  absl::StatusOr<std::vector<double>> AllGather(double value,
                                                absl::string_view what,
                                                absl::Duration timeout) {
    const int world = communicator_->world_size();
    torch::Tensor values =
        torch::zeros({world}, torch::TensorOptions()
                                  .dtype(torch::kFloat64)
                                  .device(placement_.device));
    values[rank_].fill_(value);
    if (absl::Status status =
            communicator_->World().AllReduceSum(values, timeout);
        !status.ok()) {
      return WithContext(status, absl::StrCat("agreeing on ", what));
    }
    values = values.to(torch::kCPU);
    return std::vector<double>(values.data_ptr<double>(),
                               values.data_ptr<double>() + world);
  }

  absl::Status Resume() {
    if (!options_.resume) return absl::OkStatus();
    absl::StatusOr<std::optional<int64_t>> next_step =
        ReadCheckpoint(options_.checkpoint_dir, model_spec_.name, *model_,
                       executor_->optimizer());
    if (!next_step.ok()) {
      return WithContext(next_step.status(), "resuming");
    }
    const double mine =
        next_step->has_value() ? static_cast<double>(**next_step) : -1;
    absl::StatusOr<std::vector<double>> all =
        AllGather(mine, "the checkpoint step", options_.checkpoint_timeout);
    if (!all.ok()) return all.status();
    for (int r = 0; r < static_cast<int>(all->size()); ++r) {
      if ((*all)[r] != mine) {
        return absl::FailedPreconditionError(absl::StrCat(
            "ranks disagree on the checkpoint to resume from: rank ", rank_,
            " found ", next_step->has_value() ? "next step " : "none",
            next_step->has_value() ? absl::StrCat(**next_step) : "", " in ",
            options_.checkpoint_dir, ", rank ", r, " found ",
            (*all)[r] < 0 ? std::string("none")
                          : absl::StrCat("next step ", (*all)[r]),
            "; --checkpoint-dir must be one directory shared by every rank"));
      }
    }
    if (next_step->has_value()) {
      result_.first_step = **next_step;
      Log(absl::StrCat("resumed from ", CheckpointPath(options_.checkpoint_dir),
                       " at step ", **next_step));
      Print(absl::StrCat("resumed from ",
                         CheckpointPath(options_.checkpoint_dir), " at step ",
                         **next_step));
    } else {
      Log(absl::StrCat("no checkpoint in ", options_.checkpoint_dir,
                       "; starting at step 0"));
    }
    return absl::OkStatus();
  }

  // --- Profile
  // -----------------------------------------------------------------

  absl::Status Profile() {
    bool wanted = options_.profile;
    if (wanted) {
      absl::StatusOr<v1::GetClusterModelResponse> model =
          planner_.GetClusterModel(v1::GetClusterModelRequest());
      if (!model.ok()) {
        return WithContext(model.status(),
                           "asking the planner for its cost model");
      }
      if (!model->using_default_params()) {
        wanted = false;
        Log(absl::StrCat("the planner already has fitted parameters (v",
                         model->params_version(), "); not profiling again"));
      }
    }
    // RunProfile is collective: profile when any rank wants to.
    absl::StatusOr<double> wants = WorldSum(
        wanted ? 1 : 0, "whether to profile", options_.collective_timeout);
    if (!wants.ok()) return wants.status();
    if (*wants == 0) return absl::OkStatus();
    ProfileOptions profile_options = options_.profile_options;
    profile_options.device = placement_.device;
    profile_options.dtype = torch::kFloat32;
    profile_options.collective_timeout = options_.collective_timeout;
    const absl::Time start = clock_.Now();
    absl::StatusOr<std::vector<ProfileSample>> samples =
        RunProfile(model_spec_, *communicator_, cluster_.gpus_per_node,
                   profile_options, clock_);
    if (!samples.ok()) return WithContext(samples.status(), "profiling");
    Log(absl::StrCat("profiled ", samples->size(), " samples in ",
                     Seconds(absl::ToDoubleSeconds(clock_.Now() - start))));
    v1::SubmitProfileRequest request;
    request.set_worker_id(options_.worker_id);
    for (const ProfileSample& sample : *samples) {
      *request.add_samples() = ProfileSampleToProto(sample);
    }
    absl::StatusOr<v1::SubmitProfileResponse> submitted =
        planner_.SubmitProfile(request);
    if (!submitted.ok()) {
      return WithContext(submitted.status(),
                         "submitting the profile to the planner");
    }
    // Every rank's samples are in before anyone plans.
    if (absl::Status status =
            communicator_->World().Barrier(options_.collective_timeout);
        !status.ok()) {
      return WithContext(status, "waiting for every rank's profile");
    }
    if (rank_ != 0) return absl::OkStatus();
    absl::StatusOr<v1::GetClusterModelResponse> fitted =
        planner_.GetClusterModel(v1::GetClusterModelRequest());
    if (!fitted.ok()) {
      return WithContext(fitted.status(),
                         "asking the planner for the fitted cost model");
    }
    Print(absl::StrCat("profile: ", communicator_->world_size(),
                       " ranks submitted their samples; cost model params v",
                       fitted->params_version()));
    for (const v1::FitReport& proto : fitted->reports()) {
      const ModelFitReport report = FitReportFromProto(proto);
      if (report.used_defaults) {
        Print(absl::StrCat("  fit ", report.name, ": defaults kept (",
                           report.num_samples, " samples",
                           report.note.empty() ? "" : "; ", report.note, ")"));
      } else {
        Print(absl::StrFormat(
            "  fit %s: %d samples, rms error %.1f%%, max "
            "%.1f%%",
            report.name, report.num_samples, 100 * report.rms_relative_error,
            100 * report.max_relative_error));
      }
    }
    return absl::OkStatus();
  }

  // --- Training
  // ------------------------------------------------------------------

  v1::GlobalBatch ToProto(const std::vector<Sample>& samples,
                          int64_t step) const {
    v1::GlobalBatch batch;
    batch.set_step(step);
    for (const Sample& sample : samples) {
      v1::Sample* proto = batch.add_samples();
      proto->set_id(sample.id);
      proto->set_length_tokens(sample.length_tokens);
    }
    return batch;
  }

  /// The planner's plan of step `step`, checked against the batch.
  /// Asks by step with the batch's fingerprint (a few bytes; rank 0 has
  /// submitted the batch ahead), and with the whole batch when the planner
  /// does not know the step (yet, or any more): FAILED_PRECONDITION. A batch
  /// that really differs from the planner's fails that second call too.
  absl::StatusOr<Plan> FetchPlan(const std::vector<Sample>& samples,
                                 int64_t step, int64_t* params_version) {
    v1::GetPlanRequest request;
    request.set_worker_id(options_.worker_id);
    request.set_step(step);
    request.set_batch_fingerprint(BatchFingerprint(samples));
    absl::StatusOr<v1::GetPlanResponse> response = planner_.GetPlan(request);
    if (response.status().code() == absl::StatusCode::kFailedPrecondition) {
      *request.mutable_batch() = ToProto(samples, step);
      response = planner_.GetPlan(request);
    }
    if (!response.ok()) {
      return WithContext(response.status(),
                         absl::StrCat("fetching the plan of step ", step));
    }
    if (response->plan().step() != step) {
      return absl::InternalError(absl::StrCat("asked for the plan of step ",
                                              step, " and got step ",
                                              response->plan().step()));
    }
    if (response->sample_ids_size() != 0) {
      bool same =
          response->sample_ids_size() == static_cast<int>(samples.size());
      for (int i = 0; same && i < response->sample_ids_size(); ++i) {
        same = response->sample_ids(i) == samples[i].id;
      }
      if (!same) {
        return absl::InternalError(absl::StrCat(
            "the plan of step ", step,
            " was made for other sample ids than this rank's batch; every "
            "rank must use the same --workload, seed and batch size"));
      }
    }
    *params_version = response->params_version();
    Plan plan = PlanFromProto(response->plan());
    // Every rank checks the same plan, so all refuse a bad one together
    // (an index out of range would otherwise throw mid-step, and a
    // sequence planned twice or not at all would change the loss scale).
    std::vector<int64_t> lengths;
    lengths.reserve(samples.size());
    for (const Sample& sample : samples)
      lengths.push_back(sample.length_tokens);
    if (absl::Status valid =
            ValidatePlanStructure(model_spec_, cluster_, lengths, plan);
        !valid.ok()) {
      return WithContext(valid, absl::StrCat("the plan of step ", step));
    }
    return plan;
  }

  /// The sum of every rank's `value`, waiting at most `timeout`.
  absl::StatusOr<double> WorldSum(double value, absl::string_view what,
                                  absl::Duration timeout) {
    torch::Tensor sum = torch::full({1}, value,
                                    torch::TensorOptions()
                                        .dtype(torch::kFloat64)
                                        .device(placement_.device));
    if (absl::Status status = communicator_->World().AllReduceSum(sum, timeout);
        !status.ok()) {
      return WithContext(status, absl::StrCat("agreeing ", what));
    }
    return sum.to(torch::kCPU).item<double>();
  }

  /// True when any rank was asked to stop.
  absl::StatusOr<bool> AgreeToStop() {
    absl::StatusOr<double> stopping =
        WorldSum(StopRequested() ? 1 : 0, "whether to stop",
                 options_.collective_timeout);
    if (!stopping.ok()) return stopping.status();
    return *stopping > 0;
  }

  void ResetPeakMemory() {
#if DCP_LIBTORCH_HAS_CUDA
    if (placement_.device.is_cuda()) {
      c10::cuda::CUDACachingAllocator::resetPeakStats(
          placement_.device.index());
    }
#endif
  }

  int64_t PeakMemoryBytes() const {
#if DCP_LIBTORCH_HAS_CUDA
    if (placement_.device.is_cuda()) {
      constexpr size_t kAggregate = static_cast<size_t>(
          c10::CachingDeviceAllocator::StatType::AGGREGATE);
      return c10::cuda::CUDACachingAllocator::getDeviceStats(
                 placement_.device.index())
          .allocated_bytes[kAggregate]
          .peak;
    }
#endif
    return 0;  // The CPU allocator reports no peak.
  }

  absl::Status Train() {
    absl::StatusOr<std::unique_ptr<LengthSource>> source =
        ParseWorkloadSpec(options_.workload);
    if (!source.ok()) return WithContext(source.status(), "the workload");
    const int64_t workload_max_length = (*source)->MaxLengthTokens();
    absl::StatusOr<BatchStream> stream = BatchStream::Create(
        *std::move(source), options_.batch, options_.workload_seed);
    if (!stream.ok()) return WithContext(stream.status(), "the batch stream");
    absl::StatusOr<std::unique_ptr<Dataset>> dataset =
        OpenDataset(options_.data, model_spec_.vocab_size);
    if (!dataset.ok()) return dataset.status();

    std::optional<CostModel> bucket_cost_model;
    StaticOptions static_options;
    static_options.workload_max_length_tokens = workload_max_length;
    static_options.micro_batch_sequences =
        options_.bucket_micro_batch_sequences;
    static_options.sp_size = options_.bucket_static_sp;
    if (options_.plan_source == PlanSource::kBucket) {
      absl::StatusOr<v1::GetClusterModelResponse> model =
          planner_.GetClusterModel(v1::GetClusterModelRequest());
      if (!model.ok()) {
        return WithContext(model.status(),
                           "asking the planner for its cost model");
      }
      absl::StatusOr<CostModel> cost_model =
          CostModel::Create(ModelSpecFromProto(model->model()),
                            ClusterSpecFromProto(model->cluster()),
                            CostParamsFromProto(model->params()));
      if (!cost_model.ok()) {
        return WithContext(cost_model.status(), "the planner's cost model");
      }
      bucket_cost_model = *std::move(cost_model);
      Log(absl::StrCat("bucket plans from the planner's cost model v",
                       model->params_version()));
    }

    const int64_t first_step = result_.first_step;
    result_.next_step = first_step;
    for (int64_t k = 0; k < first_step; ++k) stream->Next();
    if (first_step >= options_.steps) {
      Log(absl::StrCat("nothing to do: the run is at step ", first_step, " of ",
                       options_.steps));
      return rank_ == 0 ? WriteSummary() : absl::OkStatus();
    }
    const bool submits_ahead =
        rank_ == 0 && options_.plan_source == PlanSource::kPlanner;
    std::vector<Sample> current = stream->Next();
    if (submits_ahead) SubmitAhead(current, first_step);

    for (int64_t step = first_step; step < options_.steps; ++step) {
      std::vector<Sample> next;
      if (step + 1 < options_.steps) {
        next = stream->Next();
        if (submits_ahead) SubmitAhead(next, step + 1);
      }
      std::vector<int64_t> lengths;
      int64_t loss_tokens = 0;
      for (const Sample& sample : current) {
        lengths.push_back(sample.length_tokens);
        loss_tokens += sample.length_tokens - 1;
      }
      Plan plan;
      int64_t params_version = 0;
      if (options_.plan_source == PlanSource::kPlanner) {
        absl::StatusOr<Plan> fetched =
            FetchPlan(current, step, &params_version);
        if (!fetched.ok()) return fetched.status();
        plan = *std::move(fetched);
      } else {
        absl::StatusOr<Plan> bucket =
            PlanBucket(*bucket_cost_model, lengths, static_options);
        if (!bucket.ok()) {
          return WithContext(bucket.status(),
                             absl::StrCat("the bucket plan of step ", step));
        }
        plan = *std::move(bucket);
      }

      absl::Status token_error;
      const Dataset& data = **dataset;
      auto tokens_of = [&](int index) -> std::vector<int64_t> {
        const Sample& sample = current.at(index);
        absl::StatusOr<std::vector<int32_t>> tokens =
            data.Tokens(sample.id, sample.length_tokens);
        if (!tokens.ok()) {
          if (token_error.ok()) token_error = tokens.status();
          return {};
        }
        return std::vector<int64_t>(tokens->begin(), tokens->end());
      };
      ResetPeakMemory();
      const absl::Time start = clock_.Now();
      absl::StatusOr<StepResult> executed =
          executor_->RunStep(plan, tokens_of, loss_tokens);
      const double step_seconds = absl::ToDoubleSeconds(clock_.Now() - start);
      if (!token_error.ok()) {
        return WithContext(token_error,
                           absl::StrCat("reading the tokens of step ", step));
      }
      if (!executed.ok()) {
        return WithContext(executed.status(),
                           absl::StrCat("step ", step, " on rank ", rank_));
      }
      absl::StatusOr<bool> stop = AgreeToStop();
      if (!stop.ok()) return stop.status();

      WorkerStepMetrics measured;
      measured.step_seconds = step_seconds;
      measured.peak_memory_bytes = PeakMemoryBytes();
      measured.loss = executed->global_loss;
      for (const MicroBatchResult& micro : executed->micro_batches) {
        measured.compute_seconds += micro.compute_seconds;
        measured.communication_seconds += micro.communication_seconds;
        measured.tokens += micro.real_tokens;
      }
      measured.idle_seconds =
          std::max(0.0, step_seconds - measured.compute_seconds -
                            measured.communication_seconds);
      metrics_.StepCompleted(rank_, measured);
      if (options_.plan_source == PlanSource::kPlanner) {
        Report(step, *executed, measured);
      }

      StepRecord record;
      record.step = step;
      for (const GroupPlan& group : plan.groups) {
        record.sp_sizes.push_back(group.sp_size());
        record.micro_batches.push_back(
            static_cast<int>(group.micro_batches.size()));
        int low = 0;
        int high = 0;
        for (size_t m = 0; m < group.micro_batches.size(); ++m) {
          const int layers = group.micro_batches[m].checkpointed_layers;
          low = m == 0 ? layers : std::min(low, layers);
          high = m == 0 ? layers : std::max(high, layers);
        }
        record.recompute.emplace_back(low, high);
      }
      record.plan_shape = PlanShape(plan);
      record.predicted_seconds = plan.predicted_step_seconds;
      record.measured_seconds = step_seconds;
      record.loss = executed->global_loss;
      record.params_version = params_version;
      result_.steps.push_back(record);
      result_.next_step = step + 1;
      Print(absl::StrFormat(
          "step %d: plan %s | predicted %.3f s measured %.3f s | loss %.4f",
          step, record.plan_shape, record.predicted_seconds,
          record.measured_seconds, record.loss));

      const bool last = step + 1 == options_.steps;
      const bool periodic = options_.checkpoint_every > 0 &&
                            (step + 1) % options_.checkpoint_every == 0;
      if (*stop) result_.stopped_on_request = true;
      if (!options_.checkpoint_dir.empty() && (*stop || last || periodic)) {
        DCP_AGENT_RETURN_IF_ERROR(CheckpointOnEveryRank(step + 1));
      }
      if (rank_ == 0) {
        // Only a report: failing here would leave the other ranks waiting
        // in the next step's collectives.
        if (absl::Status written = WriteSummary(); !written.ok()) {
          Log(absl::StrCat("warning: the run summary was not written: ",
                           written.ToString()));
        }
      }
      if (*stop) {
        Log(absl::StrCat(
            "stopping at the step boundary before step ", step + 1, " as asked",
            options_.checkpoint_dir.empty()
                ? "; no checkpoint directory, so no checkpoint"
                : absl::StrCat("; rank 0 wrote the checkpoint ",
                               CheckpointPath(options_.checkpoint_dir))));
        Print(absl::StrCat("stopped on request before step ", step + 1));
        break;
      }
      current = std::move(next);
    }
    return absl::OkStatus();
  }

  /// Queues `samples` as step `step` so the planner plans it ahead; a
  /// failure only costs that head start.
  void SubmitAhead(const std::vector<Sample>& samples, int64_t step) {
    v1::SubmitBatchesRequest request;
    *request.add_batches() = ToProto(samples, step);
    absl::StatusOr<v1::SubmitBatchesResponse> response =
        planner_.SubmitBatches(request);
    if (!response.ok()) {
      Log(absl::StrCat("warning: SubmitBatches of step ", step,
                       " failed (it will be planned on demand): ",
                       response.status().ToString()));
    }
  }

  void Report(int64_t step, const StepResult& executed,
              const WorkerStepMetrics& measured) {
    v1::ReportStepStatsRequest request;
    request.set_worker_id(options_.worker_id);
    request.set_step(step);
    request.set_rank(rank_);
    request.set_step_seconds(std::max(measured.step_seconds, 1e-9));
    const int count = static_cast<int>(executed.micro_batches.size());
    for (int m = 0; m < count; ++m) {
      const MicroBatchResult& micro = executed.micro_batches[m];
      v1::MicroBatchStats* stats = request.add_micro_batches();
      stats->set_micro_batch_index(m);
      stats->set_compute_seconds(std::max(0.0, micro.compute_seconds));
      stats->set_communication_seconds(
          std::max(0.0, micro.communication_seconds));
      // The wait at the step-end all-reduce follows the last micro-batch.
      stats->set_idle_seconds(m + 1 == count ? measured.idle_seconds : 0);
      stats->set_peak_memory_bytes(measured.peak_memory_bytes);
    }
    absl::StatusOr<v1::ReportStepStatsResponse> response =
        planner_.ReportStepStats(request);
    if (!response.ok()) {
      Log(absl::StrCat("warning: ReportStepStats of step ", step,
                       " failed: ", response.status().ToString()));
    }
  }

  /// Rank 0 writes the checkpoint while the others wait (up to
  /// checkpoint_timeout, not the shorter collective timeout of their next
  /// step); then every rank learns whether it was written, so a failed
  /// write stops the whole job at once with the reason on rank 0.
  absl::Status CheckpointOnEveryRank(int64_t next_step) {
    const absl::Status written =
        rank_ == 0 ? Checkpoint(next_step) : absl::OkStatus();
    absl::StatusOr<double> failed =
        WorldSum(written.ok() ? 0 : 1, "whether the checkpoint was written",
                 options_.checkpoint_timeout);
    if (!written.ok()) return written;
    if (!failed.ok()) return failed.status();
    if (*failed != 0) {
      return absl::AbortedError(absl::StrCat(
          "rank 0 could not write the checkpoint before step ", next_step,
          " to ", options_.checkpoint_dir, " (its log says why)"));
    }
    return absl::OkStatus();
  }

  absl::Status Checkpoint(int64_t next_step) {
    const absl::Time start = clock_.Now();
    if (absl::Status status =
            WriteCheckpoint(options_.checkpoint_dir, next_step,
                            model_spec_.name, *model_, executor_->optimizer());
        !status.ok()) {
      return WithContext(status, "writing the checkpoint");
    }
    Log(absl::StrCat("checkpoint (next step ", next_step, ") written to ",
                     CheckpointPath(options_.checkpoint_dir), " in ",
                     Seconds(absl::ToDoubleSeconds(clock_.Now() - start))));
    return absl::OkStatus();
  }

  absl::Status WriteSummary() const {
    if (options_.summary_file.empty()) return absl::OkStatus();
    nlohmann::json steps = nlohmann::json::array();
    double measured_sum = 0;
    double predicted_sum = 0;
    double error_sum = 0;
    for (const StepRecord& record : result_.steps) {
      nlohmann::json recompute = nlohmann::json::array();
      for (const auto& [low, high] : record.recompute) {
        recompute.push_back({low, high});
      }
      steps.push_back({{"step", record.step},
                       {"plan", record.plan_shape},
                       {"sp_sizes", record.sp_sizes},
                       {"micro_batches", record.micro_batches},
                       {"recompute", recompute},
                       {"predicted_seconds", record.predicted_seconds},
                       {"measured_seconds", record.measured_seconds},
                       {"loss", record.loss},
                       {"params_version", record.params_version}});
      measured_sum += record.measured_seconds;
      predicted_sum += record.predicted_seconds;
      if (record.measured_seconds > 0) {
        error_sum +=
            std::abs(record.predicted_seconds - record.measured_seconds) /
            record.measured_seconds;
      }
    }
    const double count = static_cast<double>(result_.steps.size());
    const nlohmann::json summary = {
        {"plan_source",
         options_.plan_source == PlanSource::kPlanner ? "planner" : "bucket"},
        {"model", model_spec_.name},
        {"world_size", result_.world_size},
        {"workload", options_.workload},
        {"workload_seed", options_.workload_seed},
        {"first_step", result_.first_step},
        {"next_step", result_.next_step},
        {"steps_requested", options_.steps},
        {"stopped_on_request", result_.stopped_on_request},
        {"mean_measured_seconds", count > 0 ? measured_sum / count : 0},
        {"mean_predicted_seconds", count > 0 ? predicted_sum / count : 0},
        {"mean_relative_error", count > 0 ? error_sum / count : 0},
        {"steps", steps}};
    if (absl::Status status =
            WriteFileAtomically(options_.summary_file, summary.dump(2) + "\n");
        !status.ok()) {
      return WithContext(status, "writing the run summary");
    }
    return absl::OkStatus();
  }

  PlannerClient& planner_;
  const WorkerAgentOptions& options_;
  const Clock& clock_;
  WorkerMetrics& metrics_;

  Placement placement_;
  /// -1 until registered.
  int rank_ = -1;
  int store_port_ = 0;
  bool stopped_before_joining_ = false;
  v1::RegisterWorkerRequest register_request_;
  /// Until when registration and rendezvous may wait for the world.
  absl::Time world_deadline_;
  v1::RegisterWorkerResponse registration_;
  ClusterSpec cluster_;
  ModelSpec model_spec_;
  std::unique_ptr<Communicator> communicator_;
  std::shared_ptr<GptModel> model_;
  std::unique_ptr<PlanExecutor> executor_;
  AgentRunResult result_;
};

}  // namespace

WorkerAgent::WorkerAgent(PlannerClient& planner, WorkerAgentOptions options,
                         const Clock& clock, WorkerMetrics* metrics)
    : planner_(planner),
      options_(std::move(options)),
      clock_(clock),
      metrics_(metrics) {}

absl::StatusOr<AgentRunResult> WorkerAgent::Run() {
  NoopWorkerMetrics no_metrics;
  AgentRun run(planner_, options_, clock_,
               metrics_ != nullptr ? *metrics_ : no_metrics);
  return run.Run();
}

std::string PlanShape(const Plan& plan) {
  std::vector<std::string> sp;
  std::vector<std::string> micro_batches;
  std::vector<std::string> recompute;
  for (const GroupPlan& group : plan.groups) {
    sp.push_back(absl::StrCat(group.sp_size()));
    micro_batches.push_back(absl::StrCat(group.micro_batches.size()));
    int low = 0;
    int high = 0;
    for (size_t m = 0; m < group.micro_batches.size(); ++m) {
      const int layers = group.micro_batches[m].checkpointed_layers;
      low = m == 0 ? layers : std::min(low, layers);
      high = m == 0 ? layers : std::max(high, layers);
    }
    recompute.push_back(low == high ? absl::StrCat(low)
                                    : absl::StrCat(low, "-", high));
  }
  return absl::StrCat("SP[", absl::StrJoin(sp, ","), "] mb[",
                      absl::StrJoin(micro_batches, ","), "] recompute[",
                      absl::StrJoin(recompute, ","), "]");
}

absl::StatusOr<std::unique_ptr<Dataset>> OpenDataset(const std::string& spec,
                                                     int64_t vocab_size) {
  if (spec == "synthetic" || absl::StartsWith(spec, "synthetic:")) {
    uint64_t seed = 0;
    if (spec != "synthetic" &&
        !absl::SimpleAtoi(absl::string_view(spec).substr(10), &seed)) {
      return absl::InvalidArgumentError(
          absl::StrCat("data \"", spec,
                       "\": the synthetic seed must be a non-negative "
                       "integer, e.g. synthetic:7"));
    }
    absl::StatusOr<SyntheticDataset> dataset =
        SyntheticDataset::Create(seed, vocab_size);
    if (!dataset.ok()) return dataset.status();
    return std::make_unique<SyntheticDataset>(*std::move(dataset));
  }
  if (absl::StartsWith(spec, "tokens:") && spec.size() > 7) {
    const std::string prefix = spec.substr(7);
    absl::StatusOr<std::unique_ptr<TokenFileDataset>> dataset =
        TokenFileDataset::Open(prefix);
    if (!dataset.ok()) {
      return WithContext(dataset.status(), absl::StrCat("data \"", spec, "\""));
    }
    if ((*dataset)->vocab_size() > vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data \"", spec, "\" has token ids up to ",
          (*dataset)->vocab_size() - 1, " but the model's vocabulary has ",
          vocab_size, "; tokenize for this model or train a larger one"));
    }
    return std::unique_ptr<Dataset>(*std::move(dataset));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "data \"", spec, "\" is not synthetic, synthetic:SEED or tokens:PREFIX"));
}

absl::StatusOr<int> PickFreePort(const std::string& host) {
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* addresses = nullptr;
  if (const int error = ::getaddrinfo(host.c_str(), "0", &hints, &addresses);
      error != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve \"", host, "\": ", ::gai_strerror(error)));
  }
  std::string last_error = "no address";
  int port = 0;
  for (addrinfo* address = addresses; address != nullptr && port == 0;
       address = address->ai_next) {
    const int fd = ::socket(address->ai_family, address->ai_socktype,
                            address->ai_protocol);
    if (fd < 0) continue;
    sockaddr_storage bound = {};
    socklen_t length = sizeof(bound);
    if (::bind(fd, address->ai_addr, address->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) == 0) {
      port = bound.ss_family == AF_INET6
                 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                 : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    } else {
      last_error = std::strerror(errno);
    }
    ::close(fd);
  }
  ::freeaddrinfo(addresses);
  if (port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot bind a port on \"", host, "\": ", last_error,
                     "; give a host of this machine (--store-host)"));
  }
  return port;
}

}  // namespace dcp

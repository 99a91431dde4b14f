// WorkerRegistry: registration, placement of ranks, incarnation and job
// checks, liveness and the world's completeness. Over 600 lines: they all
// read and write the one worker table under the one mutex, so they stay in
// one class.

#include "planner/service/worker_registry.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "planner/client/proto_convert.h"
#include "planner/service/request_validation.h"

namespace dcp {
namespace {

absl::Status WorkersError(absl::string_view why) {
  return absl::FailedPreconditionError(
      absl::StrCat("the state directory's worker records ", why,
                   "; restore the state directory or start with an empty one"));
}

// A job id in a message: quoted, or "no job id".
std::string ShownJob(const std::string& job_id) {
  return job_id.empty() ? std::string("no job id") : Quote(job_id);
}

}  // namespace

WorkerRegistry::WorkerRegistry(ModelSpec model, ClusterSpec cluster,
                               absl::Duration liveness_timeout,
                               const Clock& clock, PlannerStateStore* store,
                               PlannerMetrics& metrics,
                               std::function<void(const std::string&)> log,
                               std::string job_id)
    : model_(std::move(model)),
      cluster_(std::move(cluster)),
      world_size_(cluster_.NumGpus()),
      liveness_timeout_(liveness_timeout),
      clock_(clock),
      store_(store),
      metrics_(metrics),
      log_(std::move(log)),
      job_id_(std::move(job_id)) {}

absl::Status WorkerRegistry::Load(
    const std::vector<v1::WorkerRecord>& records) {
  absl::MutexLock lock(&mu_);
  const int per_node = cluster_.gpus_per_node;
  std::vector<std::optional<Node>> nodes(cluster_.num_nodes);
  for (const v1::WorkerRecord& record : records) {
    Worker worker;
    worker.registration = record.registration();
    worker.node_index = record.node_index();
    worker.first_rank = record.first_rank();
    worker.superseded.assign(record.superseded_incarnations().begin(),
                             record.superseded_incarnations().end());
    MarkSeen(worker);
    const v1::RegisterWorkerRequest& registration = worker.registration;
    const int offset = worker.first_rank - worker.node_index * per_node;
    if (worker.node_index < 0 || worker.node_index >= cluster_.num_nodes ||
        registration.num_ranks() < 1 || offset < 0 ||
        offset + registration.num_ranks() > per_node ||
        workers_.count(registration.worker_id()) > 0) {
      return WorkersError(absl::StrCat("place worker ",
                                       Quote(registration.worker_id()),
                                       " outside the cluster"));
    }
    std::optional<Node>& node = nodes[worker.node_index];
    if (!node.has_value()) node = Node{registration.node_name(), 0};
    if (node->name != registration.node_name()) {
      return WorkersError("put two node names in one node slot");
    }
    node->ranks_used += registration.num_ranks();
    workers_[registration.worker_id()] = std::move(worker);
  }
  for (const std::optional<Node>& node : nodes) {
    if (!node.has_value()) break;
    nodes_.push_back(*node);
  }
  if (nodes_.size() != static_cast<size_t>(std::count_if(
                           nodes.begin(), nodes.end(), [](const auto& node) {
                             return node.has_value();
                           }))) {
    return WorkersError("leave a gap between node slots");
  }
  // Ranks of a node must be contiguous from the node's first rank.
  std::vector<std::vector<std::pair<int, int>>> spans(nodes_.size());
  for (const auto& [id, worker] : workers_) {
    spans[worker.node_index].push_back(
        {worker.first_rank, worker.registration.num_ranks()});
  }
  for (size_t n = 0; n < spans.size(); ++n) {
    std::sort(spans[n].begin(), spans[n].end());
    int next = static_cast<int>(n) * per_node;
    for (const auto& [first, count] : spans[n]) {
      if (first != next)
        return WorkersError("have overlapping or gapped ranks");
      next += count;
    }
  }
  metrics_.RegisteredWorkers(static_cast<int>(workers_.size()));
  return absl::OkStatus();
}

bool WorkerRegistry::WorldComplete() const {
  if (static_cast<int>(nodes_.size()) < cluster_.num_nodes) return false;
  for (const Node& node : nodes_) {
    if (node.ranks_used < cluster_.gpus_per_node) return false;
  }
  return true;
}

std::string WorkerRegistry::WaitingFor() const {
  if (WorldComplete()) return "";
  const int num_nodes = cluster_.num_nodes;
  const int per_node = cluster_.gpus_per_node;
  int ranks = 0;
  for (const Node& node : nodes_) ranks += node.ranks_used;
  std::string text =
      absl::StrCat(nodes_.size(), " of ", num_nodes, " nodes, ", ranks, " of ",
                   world_size_, " ranks registered");
  if (static_cast<int>(nodes_.size()) < num_nodes) {
    std::vector<int> missing;
    for (int n = static_cast<int>(nodes_.size()); n < num_nodes; ++n) {
      if (missing.size() == 8) break;
      missing.push_back(n);
    }
    const int count = num_nodes - static_cast<int>(nodes_.size());
    absl::StrAppend(&text, "; missing node slot", count > 1 ? "s " : " ",
                    absl::StrJoin(missing, ", "),
                    count > 8 ? absl::StrCat(", ... (", count, " slots)") : "");
  }
  for (size_t n = 0; n < nodes_.size(); ++n) {
    if (nodes_[n].ranks_used < per_node) {
      absl::StrAppend(&text, "; node ", Quote(nodes_[n].name), " (slot ", n,
                      ") has ", nodes_[n].ranks_used, " of ", per_node,
                      " ranks");
    }
  }
  return text;
}

bool WorkerRegistry::AllJoining() const {
  for (const auto& [id, worker] : workers_) {
    if (!worker.joining) return false;
  }
  return true;
}

std::string WorkerRegistry::NotJoining() const {
  const absl::Time now = clock_.MonotonicNow();
  std::vector<const Worker*> missing;
  for (const auto& [id, worker] : workers_) {
    if (!worker.joining) missing.push_back(&worker);
  }
  std::sort(missing.begin(), missing.end(),
            [](const Worker* a, const Worker* b) {
              return a->first_rank < b->first_rank;
            });
  std::vector<std::string> shown;
  for (const Worker* worker : missing) {
    if (shown.size() == 8) break;
    shown.push_back(absl::StrCat(
        Quote(worker->registration.worker_id()), " (rank ", worker->first_rank,
        ", silent for ",
        absl::FormatDuration(
            absl::Trunc(now - worker->last_seen_monotonic, absl::Seconds(1))),
        ")"));
  }
  return absl::StrCat(
      missing.size(), " of ", workers_.size(),
      " workers have not joined yet: ", absl::StrJoin(shown, ", "),
      missing.size() > shown.size() ? ", ..." : "");
}

absl::Status WorkerRegistry::CheckIncarnation(const Worker& worker,
                                              absl::string_view incarnation,
                                              absl::string_view call) const {
  const v1::RegisterWorkerRequest& registered = worker.registration;
  if (incarnation.empty() || registered.incarnation().empty() ||
      incarnation == registered.incarnation()) {
    return absl::OkStatus();
  }
  const bool replaced = Superseded(worker, incarnation);
  return absl::FailedPreconditionError(absl::StrCat(
      call, " of worker ", Quote(registered.worker_id()), ": this process ",
      "(incarnation ", Quote(incarnation), ") ",
      replaced ? "was replaced by another process"
               : "is not the process registered",
      " with this worker id (incarnation ", Quote(registered.incarnation()),
      ", c10d store at ", registered.address(), ", registered by ",
      registered.registered_by().empty() ? std::string("(unknown)")
                                         : registered.registered_by(),
      "); two processes with one worker id cannot both run (a second copy of "
      "the job?): stop this one, or give each copy its own worker ids and "
      "planner"));
}

v1::WorkerRecord WorkerRegistry::RecordOf(const Worker& worker) {
  v1::WorkerRecord record;
  *record.mutable_registration() = worker.registration;
  record.set_node_index(worker.node_index);
  record.set_first_rank(worker.first_rank);
  for (const std::string& incarnation : worker.superseded) {
    record.add_superseded_incarnations(incarnation);
  }
  return record;
}

std::string WorkerRegistry::RendezvousAddress() const {
  for (const auto& [id, worker] : workers_) {
    if (worker.first_rank == 0) return worker.registration.address();
  }
  return "";
}

absl::Status WorkerRegistry::CheckBackend(
    const v1::RegisterWorkerRequest& request) const {
  if (request.backend().empty()) return absl::OkStatus();
  for (const auto& [id, worker] : workers_) {
    const std::string& other = worker.registration.backend();
    if (id != request.worker_id() && !other.empty() &&
        other != request.backend()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "worker ", Quote(request.worker_id()), " uses backend ",
          Quote(request.backend()), " but worker ", Quote(id), " uses ",
          Quote(other), "; every worker of a job must use the same backend"));
    }
    // The memory model counts one bound for every rank.
    const int bound = worker.registration.max_cached_groups();
    if (id != request.worker_id() && !other.empty() &&
        bound != request.max_cached_groups()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "worker ", Quote(request.worker_id()), " keeps up to ",
          request.max_cached_groups(), " SP groups cached but worker ",
          Quote(id), " keeps ", bound,
          " (0: unbounded); the planner's memory model counts one bound "
          "for every rank: start every worker with the same "
          "--max-cached-groups"));
    }
  }
  return absl::OkStatus();
}

absl::Status WorkerRegistry::CheckTrainingState(
    const v1::RegisterWorkerRequest& request) const {
  if (request.precision().empty()) return absl::OkStatus();
  // The memory model counts one training state for every rank.
  for (const auto& [id, worker] : workers_) {
    const v1::RegisterWorkerRequest& theirs = worker.registration;
    if (id != request.worker_id() && !theirs.precision().empty() &&
        (theirs.precision() != request.precision() ||
         theirs.optimizer_sharding() != request.optimizer_sharding())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "worker ", Quote(request.worker_id()), " trains in ",
          request.precision(), " with optimizer sharding ",
          request.optimizer_sharding(), " but worker ", Quote(id),
          " trains in ", theirs.precision(), " with ",
          theirs.optimizer_sharding(),
          "; the planner's memory model counts one training state for every "
          "rank: start every worker with the same --precision and --zero1"));
    }
  }
  return absl::OkStatus();
}

v1::RegisterWorkerResponse WorkerRegistry::Response(
    const Worker& worker) const {
  v1::RegisterWorkerResponse response;
  response.set_first_rank(worker.first_rank);
  response.set_num_ranks(worker.registration.num_ranks());
  response.set_node_index(worker.node_index);
  response.set_world_size(world_size_);
  response.set_world_complete(WorldComplete());
  response.set_rendezvous_address(RendezvousAddress());
  *response.mutable_model() = ModelSpecToProto(model_);
  *response.mutable_cluster() = ClusterSpecToProto(cluster_);
  const bool complete = WorldComplete();
  const bool joined = complete && AllJoining();
  response.set_world_joined(joined);
  response.set_waiting_for(WaitingFor());
  if (complete && !joined) response.set_not_joined(NotJoining());
  return response;
}

absl::StatusOr<std::optional<int>> WorkerRegistry::StaleSlot(
    int only, const std::string& job_id) const {
  const absl::Time now = clock_.MonotonicNow();
  std::vector<bool> live(nodes_.size(), false);
  // A worker of another job in the slot (the first), if any.
  std::vector<const std::string*> other_job(nodes_.size(), nullptr);
  for (const auto& [id, worker] : workers_) {
    if (now - worker.last_seen_monotonic <= liveness_timeout_) {
      live[worker.node_index] = true;
    }
    if (worker.registration.job_id() != job_id &&
        other_job[worker.node_index] == nullptr) {
      other_job[worker.node_index] = &id;
    }
  }
  std::optional<int> refused;
  for (int slot = 0; slot < static_cast<int>(nodes_.size()); ++slot) {
    if ((only >= 0 && slot != only) || live[slot]) continue;
    if (other_job[slot] == nullptr) return slot;
    if (!refused.has_value()) refused = slot;
  }
  if (!refused.has_value()) return std::nullopt;
  const std::string& holder = *other_job[*refused];
  const std::string& holder_job = workers_.at(holder).registration.job_id();
  return absl::FailedPreconditionError(absl::StrCat(
      "node slot ", *refused, " is stale but its worker ", Quote(holder),
      " belongs to job ", ShownJob(holder_job), ", not to job ",
      ShownJob(job_id),
      "; a stale slot goes only to a worker of the same job (start the "
      "worker with --job-id=", holder_job.empty() ? """" : holder_job,
      ", or start the planner with a fresh state directory for a new job)"));
}

absl::Status WorkerRegistry::CheckJob(
    const v1::RegisterWorkerRequest& request) const {
  if (job_id_.empty() || request.job_id() == job_id_) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "worker ", Quote(request.worker_id()), " registers ",
      request.job_id().empty()
          ? std::string("with no job id")
          : absl::StrCat("for job ", Quote(request.job_id())),
      " but this planner serves job ", Quote(job_id_),
      " (dcp_planner --job-id); start the worker with --job-id=", job_id_,
      " (or $DCP_JOB_ID), or point it at its own job's planner"));
}

absl::StatusOr<WorkerRegistry::Placement> WorkerRegistry::Place(
    const v1::RegisterWorkerRequest& request) const {
  const int per_node = cluster_.gpus_per_node;
  auto node = std::find_if(nodes_.begin(), nodes_.end(), [&](const Node& n) {
    return n.name == request.node_name();
  });
  const int node_index = static_cast<int>(node - nodes_.begin());
  const bool new_node = node == nodes_.end();
  const std::string when_stale = absl::StrCat(
      "; a slot whose workers have all been silent for ",
      absl::FormatDuration(liveness_timeout_),
      " (the liveness timeout) goes to the next new worker");
  Placement placement;
  std::optional<int> take_over;
  if (new_node) {
    if (static_cast<int>(nodes_.size()) >= cluster_.num_nodes) {
      absl::StatusOr<std::optional<int>> stale =
          StaleSlot(/*only=*/-1, request.job_id());
      if (!stale.ok()) return stale.status();
      take_over = *stale;
      if (!take_over.has_value()) {
        std::vector<std::string> names;
        for (const Node& n : nodes_) names.push_back(Quote(n.name));
        return absl::ResourceExhaustedError(absl::StrCat(
            "worker ", Quote(request.worker_id()), " is on node ",
            Quote(request.node_name()), " but all ", cluster_.num_nodes,
            " node slots are taken by ", absl::StrJoin(names, ", "),
            "; run it on one of those nodes or plan for more nodes",
            when_stale));
      }
    }
  } else if (node->ranks_used + request.num_ranks() > per_node) {
    absl::StatusOr<std::optional<int>> stale =
        StaleSlot(/*only=*/node_index, request.job_id());
    if (!stale.ok()) return stale.status();
    take_over = *stale;
    if (!take_over.has_value()) {
      std::vector<std::string> holders;
      for (const auto& [id, worker] : workers_) {
        if (worker.node_index == node_index) holders.push_back(Quote(id));
      }
      return absl::ResourceExhaustedError(absl::StrCat(
          "node ", Quote(request.node_name()), " has ", node->ranks_used,
          " of its ", per_node, " ranks taken by ",
          absl::StrJoin(holders, ", "), "; worker ", Quote(request.worker_id()),
          " asks for ", request.num_ranks(), " more", when_stale));
    }
  }
  placement.worker.registration = request;
  if (take_over.has_value()) {
    for (const auto& [id, worker] : workers_) {
      if (worker.node_index == *take_over) placement.replaced.push_back(id);
    }
    placement.worker.node_index = *take_over;
    placement.worker.first_rank = *take_over * per_node;
    return placement;
  }
  placement.worker.node_index = node_index;
  placement.worker.first_rank =
      node_index * per_node + (new_node ? 0 : node->ranks_used);
  return placement;
}

absl::StatusOr<v1::RegisterWorkerResponse> WorkerRegistry::Register(
    const v1::RegisterWorkerRequest& call) {
  // `joining` is a state of the call, not of the registration.
  v1::RegisterWorkerRequest request = call;
  request.clear_joining();
  if (absl::Status status = CheckJob(request); !status.ok()) {
    Log(absl::StrCat("refused registration of worker ", request.worker_id(),
                     " from ", request.registered_by(), ": ",
                     status.message()));
    return status;
  }
  absl::MutexLock registration_lock(&registration_mu_);
  // Decided under `mu_`, written without it, applied under it again: only
  // registrations change workers and nodes, and they are serialized.
  Worker placed;
  std::vector<std::string> replaced;
  std::vector<int> replaced_first_ranks;
  bool is_new = false;
  {
    absl::MutexLock lock(&mu_);
    DCP_RETURN_IF_ERROR(CheckBackend(request));
    DCP_RETURN_IF_ERROR(CheckTrainingState(request));
    auto existing = workers_.find(request.worker_id());
    is_new = existing == workers_.end();
    if (!is_new) {
      Worker& worker = existing->second;
      const v1::RegisterWorkerRequest& registered = worker.registration;
      if (registered.job_id() != request.job_id()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "worker ", Quote(request.worker_id()), " registered for job ",
            ShownJob(registered.job_id()), " and now comes for job ",
            ShownJob(request.job_id()),
            "; a worker id belongs to one job (use a new worker id, or "
            "restart the job with a fresh state_dir)"));
      }
      if (registered.node_name() != request.node_name() ||
          registered.num_ranks() != request.num_ranks()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "worker ", Quote(request.worker_id()),
            " registered before on node ", Quote(registered.node_name()),
            " with ", registered.num_ranks(), " ranks and now comes from node ",
            Quote(request.node_name()), " with ", request.num_ranks(),
            "; a worker id keeps its node and ranks for the whole job (use a "
            "new worker id, or restart the job with a fresh state_dir)"));
      }
      // A new incarnation takes the id over (below); a replaced one may
      // not take it back.
      if (absl::Status status = CheckIncarnation(
              worker, request.incarnation(), "RegisterWorker");
          !status.ok() && Superseded(worker, request.incarnation())) {
        Log(absl::StrCat("refused registration of worker ",
                         request.worker_id(), " from ",
                         request.registered_by(), ": ", status.message()));
        return status;
      }
      MarkSeen(worker);
      if (registered.SerializeAsString() == request.SerializeAsString()) {
        worker.joining = call.joining();
        return Response(worker);
      }
      placed = worker;
      placed.registration = request;  // new address, versions...
      if (!request.incarnation().empty() &&
          !registered.incarnation().empty() &&
          request.incarnation() != registered.incarnation()) {
        placed.superseded.push_back(registered.incarnation());
        if (placed.superseded.size() > kMaxSupersededIncarnations) {
          placed.superseded.erase(placed.superseded.begin());
        }
        Log(absl::StrCat(
            "worker ", request.worker_id(), " registered by a new process ",
            "(incarnation ", request.incarnation(), ", c10d store at ",
            request.address(), "); it replaces incarnation ",
            registered.incarnation(), " (c10d store at ", registered.address(),
            "), whose calls are refused from now on: if that process still "
            "runs, a second copy of the job uses the same worker ids"));
      }
    } else {
      absl::StatusOr<Placement> placement = Place(request);
      if (!placement.ok()) return placement.status();
      placed = std::move(placement->worker);
      replaced = std::move(placement->replaced);
      for (const std::string& id : replaced) {
        replaced_first_ranks.push_back(workers_.at(id).first_rank);
      }
    }
  }
  if (store_ != nullptr) {
    // The replaced workers' records go first (the one at the slot's first
    // rank is overwritten below): a crash between leaves a stale slot,
    // never two workers on the same ranks.
    for (int first_rank : replaced_first_ranks) {
      if (first_rank == placed.first_rank) continue;
      if (absl::Status status = store_->DeleteWorker(first_rank);
          !status.ok()) {
        return PersistError("the replaced worker's record", status);
      }
    }
    if (absl::Status status = store_->WriteWorker(RecordOf(placed));
        !status.ok()) {
      return PersistError("the registration", status);
    }
  }
  absl::MutexLock lock(&mu_);
  if (!is_new) {
    Worker& worker = workers_.at(request.worker_id());
    worker.registration = request;
    worker.superseded = placed.superseded;
    worker.joining = call.joining();
    MarkSeen(worker);
    return Response(worker);
  }
  placed.joining = call.joining();
  MarkSeen(placed);
  for (const std::string& id : replaced) workers_.erase(id);
  if (!replaced.empty()) {
    nodes_[placed.node_index] = Node{request.node_name(), 0};
    Log(absl::StrCat("worker ", request.worker_id(), " on node ",
                     request.node_name(), " replaces stale worker(s) ",
                     absl::StrJoin(replaced, ", "), " in node slot ",
                     placed.node_index, " (silent for over ",
                     absl::FormatDuration(liveness_timeout_), ")"));
  }
  if (placed.node_index == static_cast<int>(nodes_.size())) {
    nodes_.push_back(Node{request.node_name(), 0});
  }
  nodes_[placed.node_index].ranks_used += request.num_ranks();
  const Worker& worker =
      workers_.emplace(request.worker_id(), std::move(placed)).first->second;
  metrics_.RegisteredWorkers(static_cast<int>(workers_.size()));
  Log(absl::StrCat(
      "worker ", request.worker_id(), " on node ", request.node_name(),
      " (slot ", worker.node_index, "): ranks ", worker.first_rank, "..",
      worker.first_rank + request.num_ranks() - 1, "; job ",
      request.job_id().empty() ? "(none)" : request.job_id(),
      ", registered by ",
      request.registered_by().empty() ? "(unknown)" : request.registered_by(),
      WorldComplete() ? "; world complete" : absl::StrCat("; ", WaitingFor())));
  if (request.gpu_memory_bytes() > 0 &&
      request.gpu_memory_bytes() < 0.98 * cluster_.gpu_memory_bytes) {
    Log(absl::StrCat("warning: worker ", request.worker_id(), " has ",
                     request.gpu_memory_bytes(),
                     " bytes of GPU memory; plans assume ",
                     cluster_.gpu_memory_bytes));
  }
  return Response(worker);
}

absl::Status WorkerRegistry::TouchLocked(const WorkerCaller& caller,
                                         bool activity, int64_t step) {
  if (caller.worker_id.empty()) return absl::OkStatus();
  auto it = workers_.find(std::string(caller.worker_id));
  if (it == workers_.end()) {
    return absl::NotFoundError(
        absl::StrCat("worker_id ", Quote(caller.worker_id),
                     " is not registered; call RegisterWorker first"));
  }
  DCP_RETURN_IF_ERROR(
      CheckIncarnation(it->second, caller.incarnation, "a call"));
  MarkSeen(it->second);
  if (activity) {
    it->second.active = true;
    it->second.last_step = std::max(it->second.last_step, step);
  }
  return absl::OkStatus();
}

absl::Status WorkerRegistry::Touch(const WorkerCaller& caller, bool activity,
                                   int64_t step) {
  absl::MutexLock lock(&mu_);
  return TouchLocked(caller, activity, step);
}

absl::Status WorkerRegistry::CheckCanServe(const WorkerCaller& caller,
                                           int64_t step) {
  absl::MutexLock lock(&mu_);
  DCP_RETURN_IF_ERROR(TouchLocked(caller, /*activity=*/true, step));
  if (!WorldComplete()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the world is incomplete (", WaitingFor(),
                     "); plans are served once every worker has registered"));
  }
  return absl::OkStatus();
}

absl::Status WorkerRegistry::CheckReport(const WorkerCaller& caller,
                                         int64_t step, int rank) {
  absl::MutexLock lock(&mu_);
  DCP_RETURN_IF_ERROR(TouchLocked(caller, /*activity=*/true, step));
  const absl::string_view worker_id = caller.worker_id;
  const Worker& worker = workers_.at(std::string(worker_id));
  const int first = worker.first_rank;
  const int last = first + worker.registration.num_ranks() - 1;
  if (rank < first || rank > last) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank = ", rank, " is not one of worker ",
                     Quote(worker_id), "'s ranks ", first, "..", last));
  }
  return absl::OkStatus();
}

v1::ListWorkersResponse WorkerRegistry::List() const {
  const absl::Time now = clock_.MonotonicNow();
  absl::MutexLock lock(&mu_);
  std::vector<const Worker*> ordered;
  for (const auto& [id, worker] : workers_) ordered.push_back(&worker);
  std::sort(ordered.begin(), ordered.end(),
            [](const Worker* a, const Worker* b) {
              return a->first_rank < b->first_rank;
            });
  v1::ListWorkersResponse response;
  for (const Worker* worker : ordered) {
    const v1::RegisterWorkerRequest& registration = worker->registration;
    v1::WorkerInfo* info = response.add_workers();
    info->set_worker_id(registration.worker_id());
    info->set_node_name(registration.node_name());
    info->set_node_index(worker->node_index);
    info->set_first_rank(worker->first_rank);
    info->set_num_ranks(registration.num_ranks());
    info->set_address(registration.address());
    info->set_gpu_kind(registration.gpu_kind());
    info->set_libtorch_version(registration.libtorch_version());
    info->set_backend(registration.backend());
    info->set_registered_by(registration.registered_by());
    info->set_job_id(registration.job_id());
    info->set_incarnation(registration.incarnation());
    if (now - worker->last_seen_monotonic > liveness_timeout_) {
      info->set_state(v1::WorkerInfo::LOST);
    } else if (worker->active) {
      info->set_state(v1::WorkerInfo::ACTIVE);
    } else {
      info->set_state(v1::WorkerInfo::REGISTERED);
    }
    info->set_last_seen_unix_millis(absl::ToUnixMillis(worker->last_seen));
    info->set_last_step(worker->last_step);
  }
  response.set_world_size(world_size_);
  response.set_world_complete(WorldComplete());
  return response;
}

}  // namespace dcp

#include "worker/rendezvous.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/free_port.h"
#include "common/host_port.h"
#include "worker/status_context.h"

namespace dcp {

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

Rendezvous::Rendezvous(PlannerClient& planner, RendezvousOptions options,
                       const Clock& clock)
    : planner_(planner), options_(std::move(options)), clock_(clock) {}

void Rendezvous::Sleep(absl::Duration duration) const {
  if (options_.sleep) {
    options_.sleep(duration);
  } else {
    absl::SleepFor(duration);
  }
}

bool Rendezvous::StopRequested() const {
  return options_.stop_requested && options_.stop_requested();
}

absl::StatusOr<Rendezvous::Outcome> Rendezvous::Register() {
  store_port_ = options_.store_port;
  if (store_port_ == 0) {
    absl::StatusOr<int> port = PickFreePort(options_.store_host);
    if (!port.ok()) {
      return WithContext(port.status(),
                         "choosing the port of this worker's c10d store");
    }
    store_port_ = *port;
  }
  request_.set_worker_id(options_.worker_id);
  request_.set_node_name(options_.node_name);
  request_.set_job_id(options_.job_id);
  request_.set_num_ranks(1);
  request_.set_gpu_kind(options_.backend == "nccl" ? "cuda" : "cpu");
  request_.set_gpu_memory_bytes(0);
  request_.set_address(JoinHostPort(options_.store_host, store_port_));
  request_.set_libtorch_version(options_.libtorch_version);
  request_.set_backend(options_.backend);
  request_.set_max_cached_groups(options_.max_cached_groups);
  request_.set_incarnation(options_.incarnation);
  request_.set_precision(options_.precision);
  request_.set_optimizer_sharding(options_.optimizer_sharding);

  deadline_ = clock_.Now() + options_.world_timeout;
  absl::Duration backoff = options_.poll_initial_backoff;
  std::string last_waiting_for;
  std::string last_not_joined;
  // Until when the other workers may take to join (set while complete).
  std::optional<absl::Time> join_deadline;
  while (true) {
    absl::StatusOr<v1::RegisterWorkerResponse> response =
        planner_.RegisterWorker(request_);
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
      // A planner that predates `joining` leaves not_joined empty (one that
      // knows it names this worker until it says it is joining).
      if (response->world_joined() || response->not_joined().empty()) {
        registration_ = *std::move(response);
        return Outcome::kWorldComplete;
      }
      if (!join_deadline.has_value()) {
        join_deadline = clock_.Now() + options_.join_timeout;
      }
      if (!request_.joining()) {
        // Say so at once: the world waits for this worker now.
        request_.set_joining(true);
        continue;
      }
      if (response->not_joined() != last_not_joined) {
        last_not_joined = response->not_joined();
        options_.log(absl::StrCat("the world is complete; waiting for every "
                                  "worker to join: ",
                                  last_not_joined));
      }
      if (clock_.Now() >= *join_deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "the world completed but not every worker joined within ",
            absl::FormatDuration(options_.join_timeout), " (",
            last_not_joined,
            "); a worker that registered and went silent holds its ranks: "
            "restart it with the same worker id, or stop it and start a "
            "replacement once the planner counts it lost (its "
            "--liveness-timeout)"));
      }
    } else {
      join_deadline.reset();
    }
    if (!response->world_complete() &&
        response->waiting_for() != last_waiting_for) {
      last_waiting_for = response->waiting_for();
      options_.log(absl::StrCat("registered as rank ", response->first_rank(),
                                " of ", response->world_size(),
                                "; waiting for the world: ", last_waiting_for));
    }
    if (StopRequested()) return Outcome::kStopRequested;
    if (clock_.Now() >= deadline_) {
      return absl::DeadlineExceededError(
          absl::StrCat("the world did not complete within ",
                       absl::FormatDuration(options_.world_timeout), " (still ",
                       last_waiting_for,
                       "); start the missing workers, or check the planner's "
                       "--nodes/--gpus-per-node (or --cluster)"));
    }
    Sleep(backoff);
    backoff = std::min(backoff * 2, options_.poll_max_backoff);
  }
}

absl::StatusOr<StoreAddress> Rendezvous::AwaitStore() {
  if (rank() == 0) return StoreAddress{options_.store_host, store_port_};
  absl::Duration backoff = options_.poll_initial_backoff;
  std::string logged_address;
  while (true) {
    const std::string& address = registration_.rendezvous_address();
    absl::StatusOr<std::pair<std::string, int>> rendezvous =
        ParseHostPort(address);
    if (!rendezvous.ok()) {
      return WithContext(rendezvous.status(), "joining the world");
    }
    if (AcceptsConnections(rendezvous->first, rendezvous->second)) {
      return StoreAddress{rendezvous->first, rendezvous->second};
    }
    if (address != logged_address) {
      logged_address = address;
      options_.log(
          absl::StrCat("waiting for rank 0's c10d store at ", address));
    }
    if (clock_.Now() >= deadline_) {
      return absl::DeadlineExceededError(
          absl::StrCat("rank 0's c10d store at ", address,
                       " did not accept connections within ",
                       absl::FormatDuration(options_.world_timeout),
                       "; is rank 0's worker running, and is its --store-host "
                       "reachable from here?"));
    }
    Sleep(backoff);
    backoff = std::min(backoff * 2, options_.poll_max_backoff);
    absl::StatusOr<v1::RegisterWorkerResponse> response =
        planner_.RegisterWorker(request_);
    if (!response.ok()) {
      return WithContext(response.status(),
                         "registering again for rank 0's store address");
    }
    if (response->first_rank() != rank()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the planner moved this worker from rank ", rank(), " to rank ",
          response->first_rank(), " while it was joining the world"));
    }
    registration_ = *std::move(response);
  }
}

}  // namespace dcp

// Communicator over PyTorch's c10d: a TCPStore for rendezvous (server on rank
// 0), ProcessGroupGloo (or ProcessGroupNCCL in a CUDA LibTorch) per group, and
// one PrefixStore namespace per group so that groups never share keys.
// Over 600 lines: the group (C10dGroup, every collective with its timeout
// and error mapping) and the communicator that creates and caches groups
// over one store are the one adapter to c10d, the only file that includes
// its headers.

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#if DCP_LIBTORCH_HAS_CUDA
// ProcessGroupNCCL.hpp is empty unless USE_C10D_NCCL is defined; a CUDA
// LibTorch is built with NCCL, so its header may be used.
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "worker/communication/collective_wait.h"
#include "worker/communication/communicator.h"
#include "worker/libtorch_cuda.h"

namespace dcp {
namespace {

static_assert(kWaitWithoutTimeout == ::kNoTimeout,
              "collective_wait.h must name c10d's no-timeout wait");

// Longest wait passed to c10d; longer finite timeouts are clamped so that
// `now + timeout` cannot overflow std::chrono's clocks.
constexpr absl::Duration kMaxTimeout = absl::Hours(24 * 30);

/// `timeout` as c10d milliseconds, or INVALID_ARGUMENT when not positive and
/// finite (c10d reads 0 as "wait forever").
absl::StatusOr<std::chrono::milliseconds> ToChrono(absl::Duration timeout,
                                                   absl::string_view what) {
  if (timeout <= absl::ZeroDuration() || timeout == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " timeout must be positive and finite, got ",
                     absl::FormatDuration(timeout)));
  }
  const int64_t ms = absl::ToInt64Milliseconds(std::min(timeout, kMaxTimeout));
  return std::chrono::milliseconds(std::max<int64_t>(ms, 1));
}

/// Whether an exception message from c10d or Gloo reports a timeout. c10d's
/// Work::wait(timeout) throws c10::Error "Operation timed out!"; Gloo throws
/// gloo::IoException "... Timed out waiting Nms for recv operation to
/// complete"; the TCPStore throws "Socket Timeout", "Wait timeout" or
/// c10d::TimeoutError "The client socket has timed out after ...".
bool IsTimeoutMessage(absl::string_view message) {
  const std::string lower = absl::AsciiStrToLower(message);
  return absl::StrContains(lower, "timed out") ||
         absl::StrContains(lower, "timeout");
}

/// Runs `fn` (returning absl::Status) and turns any exception it throws into
/// a status: DEADLINE_EXCEEDED for timeouts, `other_code` otherwise. The
/// message starts with `context`.
template <typename Fn>
absl::Status CallNoThrow(absl::string_view context, absl::StatusCode other_code,
                         Fn&& fn) {
  std::string message;
  try {
    return fn();
  } catch (const c10::Error& e) {
    message = e.what_without_backtrace();
  } catch (const std::exception& e) {
    message = e.what();
  } catch (...) {
    message = "unknown exception";
  }
  absl::StripTrailingAsciiWhitespace(&message);
  const absl::StatusCode code = IsTimeoutMessage(message)
                                    ? absl::StatusCode::kDeadlineExceeded
                                    : other_code;
  return absl::Status(code, absl::StrCat(context, ": ", message));
}

std::string RanksToString(const std::vector<int>& ranks) {
  return absl::StrJoin(ranks, ",");
}

bool IsLoopbackHost(absl::string_view host) {
  return host.empty() || host == "localhost" || host == "::1" ||
         absl::StartsWith(host, "127.");
}

/// A Gloo transport device for one process group. Loopback jobs bind to
/// 127.0.0.1; otherwise GLOO_SOCKET_IFNAME picks the interface as in
/// PyTorch, else c10d's default (the address of this machine's hostname).
std::shared_ptr<::gloo::transport::Device> CreateGlooDevice(
    const std::string& store_host) {
  const char* interface = std::getenv("GLOO_SOCKET_IFNAME");
  if (interface != nullptr && interface[0] != '\0') {
    std::string first(interface);
    first = first.substr(0, first.find(','));
    return c10d::ProcessGroupGloo::createDeviceForInterface(first);
  }
  if (IsLoopbackHost(store_host)) {
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  }
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

/// A CommGroup over one c10d backend object (ProcessGroupGloo or
/// ProcessGroupNCCL, both c10d::Backend).
/// A collective fails with DEADLINE_EXCEEDED after its call timeout, or
/// earlier when Gloo's own transport timeout (C10dOptions::timeout, per send
/// or receive) passes first. After a collective fails or times out, the members
/// no longer agree on what was exchanged, so every later call fails fast with
/// FAILED_PRECONDITION. Not thread-safe.
template <typename BackendT>
class C10dGroup final : public CommGroup {
 public:
  C10dGroup(c10::intrusive_ptr<BackendT> backend, std::vector<int> global_ranks,
            int group_rank, std::string name, absl::Duration backend_timeout)
      : backend_(std::move(backend)),
        global_ranks_(std::move(global_ranks)),
        rank_(group_rank),
        name_(std::move(name)),
        backend_timeout_(backend_timeout) {}

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(global_ranks_.size()); }
  const std::vector<int>& global_ranks() const override {
    return global_ranks_;
  }

  absl::Status AllToAll(const torch::Tensor& input, torch::Tensor& output,
                        absl::Duration timeout) override {
    if (!input.defined() || !output.defined()) {
      return absl::InvalidArgumentError(
          absl::StrCat("AllToAll on group ", name_, ": undefined tensor"));
    }
    if (input.dim() < 1 || input.size(0) % size() != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "AllToAll on group ", name_, ": input of shape ",
          c10::str(input.sizes()), " must have a dim 0 divisible by the ",
          size(), " members (one equal chunk per member)"));
    }
    if (output.sizes() != input.sizes() ||
        output.scalar_type() != input.scalar_type() ||
        output.device() != input.device()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "AllToAll on group ", name_, ": output (", c10::str(output.sizes()),
          ", ", c10::toString(output.scalar_type()), ") must match the input (",
          c10::str(input.sizes()), ", ", c10::toString(input.scalar_type()),
          ") in shape, dtype and device"));
    }
    if (!output.is_contiguous()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "AllToAll on group ", name_, ": output must be contiguous"));
    }
    torch::Tensor contiguous_input = input.contiguous();
    return Run("AllToAll", timeout, [&] {
      std::vector<int64_t> equal_splits;  // Empty: equal chunks along dim 0.
      std::vector<int64_t> equal_splits_in;
      c10d::AllToAllOptions options;
      return backend_->alltoall_base(output, contiguous_input, equal_splits,
                                     equal_splits_in, options);
    });
  }

  absl::Status AllReduceSum(torch::Tensor& tensor,
                            absl::Duration timeout) override {
    if (!tensor.defined()) {
      return absl::InvalidArgumentError(
          absl::StrCat("AllReduceSum on group ", name_, ": undefined tensor"));
    }
    // Gloo reduces the flat storage, so reduce a dense copy of a strided view.
    std::vector<torch::Tensor> tensors = {tensor.contiguous()};
    absl::Status status = Run("AllReduceSum", timeout, [&] {
      c10d::AllreduceOptions options;
      options.reduceOp = c10d::ReduceOp::SUM;
      return backend_->allreduce(tensors, options);
    });
    if (status.ok() && !tensors[0].is_same(tensor)) {
      tensor.copy_(tensors[0]);
    }
    return status;
  }

  absl::Status ReduceScatterSum(const torch::Tensor& input,
                                torch::Tensor& output,
                                absl::Duration timeout) override {
    if (absl::Status shapes = CheckChunked("ReduceScatterSum", input, output);
        !shapes.ok()) {
      return shapes;
    }
    torch::Tensor contiguous_input = input.contiguous();
    return Run("ReduceScatterSum", timeout, [&] {
      c10d::ReduceScatterOptions options;
      options.reduceOp = c10d::ReduceOp::SUM;
      return backend_->_reduce_scatter_base(output, contiguous_input, options);
    });
  }

  absl::Status AllGather(const torch::Tensor& input, torch::Tensor& output,
                         absl::Duration timeout) override {
    if (absl::Status shapes = CheckChunked("AllGather", output, input);
        !shapes.ok()) {
      return shapes;
    }
    torch::Tensor contiguous_input = input.contiguous();
    return Run("AllGather", timeout, [&] {
      c10d::AllgatherOptions options;
      return backend_->_allgather_base(output, contiguous_input, options);
    });
  }

  absl::Status Barrier(absl::Duration timeout) override {
    return Run("Barrier", timeout, [&] {
      c10d::BarrierOptions options;
      return backend_->barrier(options);
    });
  }

 private:
  /// OK when `whole` is size() chunks of `chunk`'s shape along dim 0, both
  /// defined, of one dtype and device, and the output side contiguous.
  absl::Status CheckChunked(absl::string_view op, const torch::Tensor& whole,
                            const torch::Tensor& chunk) const {
    if (!whole.defined() || !chunk.defined()) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, " on group ", name_, ": undefined tensor"));
    }
    std::vector<int64_t> expected = chunk.sizes().vec();
    if (expected.empty() || whole.dim() != chunk.dim() ||
        whole.size(0) != chunk.size(0) * size() ||
        whole.sizes().slice(1) != chunk.sizes().slice(1)) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, " on group ", name_, ": the whole tensor (",
                       c10::str(whole.sizes()), ") must be ", size(),
                       " chunks of the per-member tensor (",
                       c10::str(chunk.sizes()), ") along dim 0"));
    }
    if (whole.scalar_type() != chunk.scalar_type() ||
        whole.device() != chunk.device()) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, " on group ", name_,
                       ": input and output differ in dtype or "
                       "device (",
                       c10::toString(whole.scalar_type()), " vs ",
                       c10::toString(chunk.scalar_type()), ")"));
    }
    if (!whole.is_contiguous() || !chunk.is_contiguous()) {
      // The input side is made contiguous by the caller; only the output
      // must already be.
      const torch::Tensor& output = op == "AllGather" ? whole : chunk;
      if (!output.is_contiguous()) {
        return absl::InvalidArgumentError(absl::StrCat(
            op, " on group ", name_, ": output must be contiguous"));
      }
    }
    return absl::OkStatus();
  }

  /// Starts a collective with `start` and waits for it up to `timeout`.
  template <typename StartFn>
  absl::Status Run(absl::string_view op, absl::Duration timeout,
                   StartFn&& start) {
    const std::string context =
        absl::StrCat(op, " on group ", name_, " (member ", rank_, " of ",
                     size(), ", global rank ", global_ranks_[rank_], ")");
    if (!broken_.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          context, ": the group is unusable after an earlier failure (",
          broken_.message(),
          "); create a new communicator with a fresh store_prefix"));
    }
    absl::StatusOr<std::chrono::milliseconds> wait_timeout =
        ToChrono(timeout, context);
    if (!wait_timeout.ok()) return wait_timeout.status();

    absl::Status status =
        CallNoThrow(context, absl::StatusCode::kInternal, [&]() {
          auto work = start();
          // Throws c10::Error "Operation timed out!" when the timeout passes,
          // or rethrows the error the collective failed with.
          if (!work->wait(WorkWaitTimeout(backend_->getBackendName(),
                                          *wait_timeout))) {
            return absl::AbortedError(
                absl::StrCat(context, ": the collective was aborted"));
          }
          return absl::OkStatus();
        });
    if (status.code() == absl::StatusCode::kDeadlineExceeded) {
      status = absl::DeadlineExceededError(absl::StrCat(
          status.message(), " (timeout of the call ",
          absl::FormatDuration(timeout), ", of the group's transport ",
          absl::FormatDuration(backend_timeout_),
          "; a member did not take part in time, or is slow or dead)"));
    }
    if (!status.ok()) broken_ = status;
    return status;
  }

  c10::intrusive_ptr<BackendT> backend_;
  const std::vector<int> global_ranks_;
  const int rank_;
  /// The member list, e.g. "world" or "group/0,2,5".
  const std::string name_;
  /// C10dOptions::timeout: Gloo also fails any single transfer after it.
  const absl::Duration backend_timeout_;
  /// OK until a collective fails; then the first failure.
  absl::Status broken_;
};

/// The communicator of one process. Owns the store and every group; groups
/// are destroyed before the store. Not thread-safe.
class C10dCommunicator final : public Communicator {
 public:
  C10dCommunicator(C10dOptions options, c10::intrusive_ptr<c10d::Store> store)
      : options_(std::move(options)), job_store_(std::move(store)) {}

  /// Creates the world group; collective over all ranks.
  absl::Status Init() {
    std::vector<int> all(options_.world_size);
    for (int r = 0; r < options_.world_size; ++r) all[r] = r;
    absl::StatusOr<std::unique_ptr<CommGroup>> world =
        CreateGroup(all, "world");
    if (!world.ok()) return world.status();
    world_ = *std::move(world);
    return absl::OkStatus();
  }

  int rank() const override { return options_.rank; }
  int world_size() const override { return options_.world_size; }
  CommGroup& World() override { return *world_; }

  absl::StatusOr<CommGroup*> Group(const std::vector<int>& ranks) override {
    if (absl::Status valid = ValidateRanks(ranks); !valid.ok()) return valid;
    if (static_cast<int>(ranks.size()) == options_.world_size) {
      return world_.get();
    }
    auto it = groups_.find(ranks);
    if (it != groups_.end()) return it->second.get();
    // A group released and created again gets fresh store keys.
    const int generation = history_[ranks].generation;
    std::string name = absl::StrCat("group/", RanksToString(ranks));
    if (generation > 0) absl::StrAppend(&name, "#", generation);
    absl::StatusOr<std::unique_ptr<CommGroup>> group = CreateGroup(ranks, name);
    if (!group.ok()) return group.status();
    CommGroup* result = group->get();
    groups_.emplace(ranks, *std::move(group));
    ++sub_groups_created_;
    return result;
  }

  int groups_created() const override { return 1 + sub_groups_created_; }
  int groups_held() const override {
    return 1 + static_cast<int>(groups_.size());
  }

  absl::Status UseGroups(
      const std::vector<std::vector<int>>& groups_of_step) override {
    if (options_.max_cached_groups <= 0) return absl::OkStatus();
    ++step_;
    for (const std::vector<int>& ranks : groups_of_step) {
      if (static_cast<int>(ranks.size()) == options_.world_size) continue;
      GroupHistory& history = history_[ranks];
      history.last_used_step = step_;
      history.live = true;
    }
    // Groups created without being announced (the profiler's) are released
    // by all their members at their first UseGroups.
    for (auto it = groups_.begin(); it != groups_.end();) {
      GroupHistory& history = history_[it->first];
      if (history.live) {
        ++it;
        continue;
      }
      ++history.generation;
      it = groups_.erase(it);
    }
    // Every rank replays the same decisions for every rank: while some rank
    // is in more live groups than the bound, the least recently used of its
    // groups that this step does not use is released by all its members.
    for (int rank = 0; rank < options_.world_size; ++rank) {
      while (true) {
        int live = 0;
        GroupHistory* oldest = nullptr;
        const std::vector<int>* oldest_ranks = nullptr;
        for (auto& [ranks, history] : history_) {
          if (!history.live ||
              !std::binary_search(ranks.begin(), ranks.end(), rank)) {
            continue;
          }
          ++live;
          if (history.last_used_step < step_ &&
              (oldest == nullptr ||
               history.last_used_step < oldest->last_used_step)) {
            oldest = &history;
            oldest_ranks = &ranks;
          }
        }
        if (live <= options_.max_cached_groups || oldest == nullptr) break;
        oldest->live = false;
        ++oldest->generation;
        groups_.erase(*oldest_ranks);  // Only where this rank held it.
      }
    }
    return absl::OkStatus();
  }

 private:
  absl::Status ValidateRanks(const std::vector<int>& ranks) const {
    const std::string shown =
        absl::StrCat("Group({", RanksToString(ranks), "})");
    if (ranks.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(shown, ": a group needs at least one rank"));
    }
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (ranks[i] < 0 || ranks[i] >= options_.world_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            shown, ": rank ", ranks[i], " is outside the world [0, ",
            options_.world_size, ")"));
      }
      if (i > 0 && ranks[i] <= ranks[i - 1]) {
        return absl::InvalidArgumentError(absl::StrCat(
            shown, ": ranks must be strictly ascending (sorted, no repeats)"));
      }
    }
    if (!std::binary_search(ranks.begin(), ranks.end(), options_.rank)) {
      return absl::InvalidArgumentError(absl::StrCat(
          shown, " called on rank ", options_.rank,
          ", which is not a member; only members create or use a group"));
    }
    return absl::OkStatus();
  }

  /// Creates the backend of a group over `ranks` (validated, containing this
  /// rank) in the store namespace `name`. Blocks until every member joins.
  absl::StatusOr<std::unique_ptr<CommGroup>> CreateGroup(
      const std::vector<int>& ranks, const std::string& name) {
    const int group_rank = static_cast<int>(
        std::lower_bound(ranks.begin(), ranks.end(), options_.rank) -
        ranks.begin());
    const int group_size = static_cast<int>(ranks.size());
    const std::chrono::milliseconds timeout =
        *ToChrono(options_.timeout, "options");
    std::unique_ptr<CommGroup> group;
    const std::string context =
        absl::StrCat("creating ", options_.backend, " group ", name,
                     " on rank ", options_.rank);
    absl::Status status =
        CallNoThrow(context, absl::StatusCode::kInternal, [&]() {
          auto store = c10::make_intrusive<c10d::PrefixStore>(name, job_store_);
          if (options_.backend == "gloo") {
            auto gloo_options =
                c10d::ProcessGroupGloo::Options::create(timeout);
            gloo_options->devices.push_back(
                CreateGlooDevice(options_.store_host));
            auto backend = c10::make_intrusive<c10d::ProcessGroupGloo>(
                store, group_rank, group_size, gloo_options);
            group = std::make_unique<C10dGroup<c10d::ProcessGroupGloo>>(
                std::move(backend), ranks, group_rank, name, options_.timeout);
            return absl::OkStatus();
          }
#if DCP_LIBTORCH_HAS_CUDA
          if (options_.backend == "nccl") {
            auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
            nccl_options->timeout = timeout;
            auto backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(
                store, group_rank, group_size, nccl_options);
            // Bound to the rank's GPU and connected now, while the group is
            // made (outside any timed work): NCCL otherwise creates the
            // communicator inside the group's first collective, whose
            // measured time would then include it.
            backend->setBoundDeviceId(options_.device);
            backend->eagerConnectSingleDevice(options_.device);
            group = std::make_unique<C10dGroup<c10d::ProcessGroupNCCL>>(
                std::move(backend), ranks, group_rank, name, options_.timeout);
            return absl::OkStatus();
          }
#endif
          return absl::InternalError(
              absl::StrCat("unsupported backend ", options_.backend));
        });
    if (!status.ok()) return status;
    return group;
  }

  const C10dOptions options_;
  /// The TCPStore under the job's prefix; every group's PrefixStore sits on it.
  c10::intrusive_ptr<c10d::Store> job_store_;
  std::unique_ptr<CommGroup> world_;
  /// Sub-groups (never the world) by their ascending global ranks.
  std::map<std::vector<int>, std::unique_ptr<CommGroup>> groups_;
  int sub_groups_created_ = 0;

  /// What every rank knows alike of a sub-group (its own or not), from the
  /// UseGroups calls: identical on every rank.
  struct GroupHistory {
    /// The step (count of UseGroups calls) that last used it.
    int64_t last_used_step = 0;
    /// Held by its members (used and not released since).
    bool live = false;
    /// Times released: names a fresh store namespace when created again.
    int generation = 0;
  };
  std::map<std::vector<int>, GroupHistory> history_;
  int64_t step_ = 0;
};

absl::Status ValidateOptions(const C10dOptions& options) {
  if (options.world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "world_size must be at least 1, got ", options.world_size));
  }
  if (options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", options.rank,
                                                   " is outside the world [0, ",
                                                   options.world_size, ")"));
  }
  if (options.store_port < 0 || options.store_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("store_port ", options.store_port,
                     " is not a TCP port (0 lets rank 0 pick one)"));
  }
  if (options.store_port == 0 && options.rank != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", options.rank,
        " needs the store_port rank 0 listens on; only rank 0 may pass 0 "
        "(and publish its port through on_store_listening)"));
  }
  if (options.store_host.empty()) {
    return absl::InvalidArgumentError("store_host is empty");
  }
  if (options.max_cached_groups < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_cached_groups is ", options.max_cached_groups,
        "; use 0 (no bound) or the most sub-groups a rank may keep"));
  }
  if (absl::StatusOr<std::chrono::milliseconds> timeout =
          ToChrono(options.timeout, "options");
      !timeout.ok()) {
    return timeout.status();
  }
  if (options.backend == "nccl") {
#if !DCP_LIBTORCH_HAS_CUDA
    return absl::UnimplementedError(
        "this LibTorch has no CUDA/NCCL; use --backend=gloo");
#endif
    if (!options.device.is_cuda() || !options.device.has_index()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "backend nccl needs the rank's GPU as C10dOptions::device (got ",
          options.device.str(), "); see DeviceOfRank"));
    }
  } else if (options.backend != "gloo") {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown backend \"", options.backend, "\"; use \"gloo\" or \"nccl\""));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateC10dCommunicator(
    const C10dOptions& options) {
  if (absl::Status valid = ValidateOptions(options); !valid.ok()) return valid;
  const std::chrono::milliseconds timeout = *ToChrono(options.timeout, "");
  const std::string where = absl::StrCat(
      "rank ", options.rank, " joining the store at ", options.store_host, ":",
      options.store_port, (options.rank == 0 ? " (as its server)" : ""));

  c10::intrusive_ptr<c10d::TCPStore> tcp_store;
  absl::Status status =
      CallNoThrow(where, absl::StatusCode::kUnavailable, [&]() {
        c10d::TCPStoreOptions store_options;
        store_options.port = static_cast<std::uint16_t>(options.store_port);
        store_options.isServer = options.rank == 0;
        store_options.numWorkers = static_cast<std::size_t>(options.world_size);
        // Rank 0 waits below, after it has published the port it bound.
        store_options.waitWorkers = false;
        store_options.timeout = timeout;
        tcp_store = c10::make_intrusive<c10d::TCPStore>(options.store_host,
                                                        store_options);
        if (options.rank == 0 && options.on_store_listening) {
          absl::Status published =
              options.on_store_listening(tcp_store->getPort());
          if (!published.ok()) return published;
        }
        // Counts this rank in; on rank 0, blocks until all ranks have.
        tcp_store->waitForWorkers();
        return absl::OkStatus();
      });
  if (!status.ok()) {
    // Timeouts of the store are unavailability of the job's rendezvous.
    if (status.code() == absl::StatusCode::kDeadlineExceeded) {
      status = absl::UnavailableError(status.message());
    }
    return status;
  }

  auto job_store =
      c10::make_intrusive<c10d::PrefixStore>(options.store_prefix, tcp_store);
  auto communicator =
      std::make_unique<C10dCommunicator>(options, std::move(job_store));
  if (absl::Status world = communicator->Init(); !world.ok()) {
    return absl::UnavailableError(world.message());
  }
  return communicator;
}

}  // namespace dcp

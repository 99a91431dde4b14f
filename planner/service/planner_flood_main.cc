// `planner_flood`: the planner's memory under a flood of large batches,
// measured as the kernel counts it. Starts a real dcp_planner (a child
// process on 127.0.0.1, with --memory-budget and the deployment's planning
// flags), sends it --batches SubmitBatches of --samples samples each from
// --concurrency threads at once, then asks for every accepted step's plan,
// and prints the planner's peak resident memory (VmHWM) against its budget.
// Exits 1 when the peak is over the budget, when a call fails with anything
// but RESOURCE_EXHAUSTED (a refusal is the planner holding its budget), or
// when the planner dies; 2 on a usage error.
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/byte_format.h"
#include "common/main_prologue.h"
#include "dcp/v1/planner_service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "launcher/child_process.h"
#include "launcher/planner_port.h"
#include "planner/service/byte_quantity.h"
#include "planner/service/planner_server.h"
#include "common/process_memory.h"

namespace dcp {
namespace {

constexpr FlagSpec kFlags[] = {
    {"planner-binary", "PATH", "", "the dcp_planner to start (required)"},
    {"memory-budget", "BYTES", "768Mi",
     "the planner's --memory-budget (the deployment's, for a 1Gi pod)"},
    {"model", "PRESET|FILE", "llama3-8b", "the planner's --model"},
    {"nodes", "N", "4", "the planner's --nodes"},
    {"gpus-per-node", "G", "8", "the planner's --gpus-per-node"},
    {"planning-threads", "N", "1", "the planner's --planning-threads"},
    {"batches", "N", "7", "SubmitBatches calls, one batch each"},
    {"samples", "N", "1M", "samples per batch (K and M suffixes)"},
    {"concurrency", "N", "7", "client threads sending them at once"},
    {"get-plans", nullptr, "true",
     "then ask for every accepted step's plan (the planner plans and caches "
     "them)"},
    {"seed", "N", "1", "seeds the batches' lengths"},
};

const ProgramSpec& Program() {
  static const auto* const program = new ProgramSpec{
      "planner_flood",
      "planner_flood: starts dcp_planner with --memory-budget, floods it with "
      "large SubmitBatches from many threads at once, asks for their plans, "
      "and prints the planner's peak resident memory (VmHWM) against its "
      "budget.",
      kFlags,
      "Exit codes: 0 the peak stayed within the budget; 1 it did not, a call "
      "failed with anything but RESOURCE_EXHAUSTED, or the planner died; 2 "
      "usage error.\n"};
  return *program;
}

struct Config {
  std::string planner_binary;
  std::string memory_budget_text;
  int64_t memory_budget_bytes = 0;
  std::vector<std::string> planner_flags;
  int batches = 0;
  int64_t samples = 0;
  int concurrency = 0;
  bool get_plans = true;
  uint64_t seed = 1;
  int nodes = 0;
  int gpus_per_node = 0;
};

absl::StatusOr<Config> Configure(const ParsedFlags& flags) {
  Config config;
  config.planner_binary = flags.String("planner-binary");
  if (config.planner_binary.empty() ||
      access(config.planner_binary.c_str(), X_OK) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--planner-binary='", config.planner_binary,
        "' is not an executable; give the path of dcp_planner, e.g. "
        "bazel-bin/planner/service/dcp_planner"));
  }
  config.memory_budget_text = flags.String("memory-budget");
  absl::StatusOr<int64_t> budget =
      ParseByteQuantity("memory-budget", config.memory_budget_text);
  if (!budget.ok()) return budget.status();
  if (*budget <= 0) {
    return absl::InvalidArgumentError(
        "--memory-budget=0 has no bound to hold the planner to; give one, "
        "e.g. 768Mi");
  }
  config.memory_budget_bytes = *budget;
  absl::StatusOr<int> threads = flags.Int32("planning-threads", 0, 64);
  absl::StatusOr<int> nodes = flags.Int32("nodes", 1, 4096);
  absl::StatusOr<int> gpus_per_node = flags.Int32("gpus-per-node", 1, 64);
  absl::StatusOr<int> batches = flags.Int32("batches", 1, 1000);
  absl::StatusOr<int64_t> samples = flags.IntWithSuffix("samples", 1, 1 << 20);
  absl::StatusOr<int> concurrency = flags.Int32("concurrency", 1, 256);
  absl::StatusOr<bool> get_plans = flags.Bool("get-plans");
  absl::StatusOr<uint64_t> seed = flags.Uint64("seed");
  for (const absl::Status& status :
       {threads.status(), nodes.status(), gpus_per_node.status(),
        batches.status(), samples.status(),
        concurrency.status(), get_plans.status(), seed.status()}) {
    if (!status.ok()) return status;
  }
  config.nodes = *nodes;
  config.gpus_per_node = *gpus_per_node;
  config.batches = *batches;
  config.samples = *samples;
  config.concurrency = *concurrency;
  config.get_plans = *get_plans;
  config.seed = *seed;
  config.planner_flags = {
      absl::StrCat("--memory-budget=", config.memory_budget_text),
      absl::StrCat("--model=", flags.String("model")),
      absl::StrCat("--nodes=", *nodes),
      absl::StrCat("--gpus-per-node=", *gpus_per_node),
      absl::StrCat("--planning-threads=", *threads),
      "--max-queued-planning=5m",
  };
  return config;
}

/// One batch of `samples` lengths: most short, a long tail up to 128K.
v1::SubmitBatchesRequest MakeRequest(int64_t step, int64_t samples,
                                     uint64_t seed) {
  std::mt19937_64 random(seed * 1000003 + static_cast<uint64_t>(step));
  std::uniform_int_distribution<int64_t> short_length(128, 4096);
  std::uniform_int_distribution<int64_t> long_length(4096, 131072);
  std::bernoulli_distribution is_long(0.02);
  v1::SubmitBatchesRequest request;
  request.set_worker_id("flood-w0");  // registered before the flood
  v1::GlobalBatch* batch = request.add_batches();
  batch->set_step(step);
  batch->mutable_samples()->Reserve(static_cast<int>(samples));
  for (int64_t i = 0; i < samples; ++i) {
    v1::Sample* sample = batch->add_samples();
    sample->set_id(step * samples + i);
    sample->set_length_tokens(is_long(random) ? long_length(random)
                                              : short_length(random));
  }
  return request;
}

/// The planner child: started on 127.0.0.1:0 with a port file, a log and a
/// state directory in a temporary directory of its own; stopped (SIGTERM)
/// and the directory removed on destruction.
class PlannerProcess {
 public:
  static absl::StatusOr<std::unique_ptr<PlannerProcess>> Start(
      const Config& config) {
    auto planner = std::unique_ptr<PlannerProcess>(new PlannerProcess());
    char pattern[] = "/tmp/dcp_planner_flood.XXXXXX";
    if (mkdtemp(pattern) == nullptr) {
      return absl::InternalError("cannot make a temporary directory in /tmp");
    }
    planner->directory_ = pattern;
    const std::string port_file = planner->directory_ + "/ports";
    const std::string log = planner->directory_ + "/planner.log";
    std::vector<std::string> argv = {
        config.planner_binary, "--listen=127.0.0.1:0", "--metrics-listen=",
        "--port-file=" + port_file,
        "--state-dir=" + planner->directory_ + "/state"};
    argv.insert(argv.end(), config.planner_flags.begin(),
                config.planner_flags.end());
    absl::StatusOr<std::unique_ptr<ChildProcess>> process =
        ChildProcess::Start(argv, log, [](const std::string&) {});
    if (!process.ok()) return process.status();
    planner->process_ = *std::move(process);
    absl::StatusOr<int> port = WaitForPlannerPort(
        *planner->process_, port_file, absl::Now() + absl::Minutes(1), {});
    if (!port.ok()) {
      std::ifstream file(log);
      return absl::Status(
          port.status().code(),
          absl::StrCat(port.status().message(), "; its log:\n",
                       std::string(std::istreambuf_iterator<char>(file),
                                   std::istreambuf_iterator<char>())));
    }
    planner->address_ = absl::StrCat("127.0.0.1:", *port);
    return planner;
  }

  ~PlannerProcess() {
    if (process_ != nullptr) process_->Stop(/*grace=*/absl::Seconds(10));
    std::error_code ignored;
    std::filesystem::remove_all(directory_, ignored);
  }

  int pid() const { return process_->pid(); }
  const std::string& address() const { return address_; }

 private:
  PlannerProcess() = default;
  std::string directory_;
  std::unique_ptr<ChildProcess> process_;
  std::string address_;
};

/// Outcomes by status code, with the first message of each.
class Outcomes {
 public:
  void Add(const grpc::Status& status) {
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, inserted] = by_code_.try_emplace(status.error_code());
    ++it->second.count;
    if (inserted) it->second.message = status.error_message();
  }
  int Count(grpc::StatusCode code) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_code_.find(code);
    return it == by_code_.end() ? 0 : it->second.count;
  }
  /// Calls that ended neither OK nor RESOURCE_EXHAUSTED.
  int Failures() const {
    std::lock_guard<std::mutex> lock(mu_);
    int failures = 0;
    for (const auto& [code, outcome] : by_code_) {
      if (code != grpc::OK && code != grpc::RESOURCE_EXHAUSTED) {
        failures += outcome.count;
      }
    }
    return failures;
  }
  void Print(const char* what) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [code, outcome] : by_code_) {
      std::printf("  %s: %d %s%s%s\n", what, outcome.count,
                  code == grpc::OK ? "OK"
                                   : absl::StrCat("code ", code).c_str(),
                  outcome.message.empty() ? "" : ", e.g. ",
                  outcome.message.substr(0, 200).c_str());
    }
  }

 private:
  struct Outcome {
    int count = 0;
    std::string message;
  };
  mutable std::mutex mu_;
  std::map<grpc::StatusCode, Outcome> by_code_;
};

int Run(const Config& config) {
  absl::StatusOr<std::unique_ptr<PlannerProcess>> planner =
      PlannerProcess::Start(config);
  if (!planner.ok()) {
    std::fprintf(stderr, "planner_flood: %s\n",
                 std::string(planner.status().message()).c_str());
    return kExitFailure;
  }
  const int pid = (*planner)->pid();
  const int64_t idle_rss = ReadProcessMemory(pid).value_or(ProcessMemory())
                               .resident_bytes;
  std::printf("planner_flood: dcp_planner (pid %d) on %s with %s; idle "
              "resident %s\n",
              pid, (*planner)->address().c_str(),
              absl::StrJoin(config.planner_flags, " ").c_str(),
              FormatBytes(idle_rss).c_str());
  grpc::ChannelArguments arguments;
  arguments.SetMaxSendMessageSize(kPlannerMaxMessageBytes);
  arguments.SetMaxReceiveMessageSize(kPlannerMaxMessageBytes);
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
      (*planner)->address(), grpc::InsecureChannelCredentials(), arguments);
  std::unique_ptr<v1::Planner::Stub> stub = v1::Planner::NewStub(channel);

  // Every node registers, so that the accepted steps' plans are served.
  Outcomes registrations;
  for (int node = 0; node < config.nodes; ++node) {
    v1::RegisterWorkerRequest request;
    request.set_worker_id(absl::StrCat("flood-w", node));
    request.set_node_name(absl::StrCat("flood-node-", node));
    request.set_num_ranks(config.gpus_per_node);
    request.set_gpu_kind("H200");
    request.set_address(absl::StrCat("flood-node-", node, ":29500"));
    request.set_backend("gloo");
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(30));
    v1::RegisterWorkerResponse response;
    registrations.Add(stub->RegisterWorker(&context, request, &response));
  }
  if (registrations.Count(grpc::OK) != config.nodes) {
    registrations.Print("RegisterWorker");
    std::fprintf(stderr, "planner_flood: FAILED: not every node registered\n");
    return kExitFailure;
  }

  const absl::Time start = absl::Now();
  Outcomes submits;
  std::vector<int64_t> accepted;
  std::mutex accepted_mu;
  std::atomic<int> next{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < config.concurrency; ++t) {
    threads.emplace_back([&] {
      for (int step; (step = next.fetch_add(1)) < config.batches;) {
        const v1::SubmitBatchesRequest request =
            MakeRequest(step, config.samples, config.seed);
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() +
                             std::chrono::minutes(5));
        v1::SubmitBatchesResponse response;
        const grpc::Status status =
            stub->SubmitBatches(&context, request, &response);
        submits.Add(status);
        if (status.ok()) {
          std::lock_guard<std::mutex> lock(accepted_mu);
          accepted.push_back(step);
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const absl::Duration submit_time = absl::Now() - start;
  std::sort(accepted.begin(), accepted.end());

  Outcomes plans;
  if (config.get_plans) {
    for (int64_t step : accepted) {
      v1::GetPlanRequest request;
      request.set_step(step);
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::minutes(5));
      v1::GetPlanResponse response;
      plans.Add(stub->GetPlan(&context, request, &response));
    }
  }
  const absl::Duration total_time = absl::Now() - start;

  absl::StatusOr<ProcessMemory> memory = ReadProcessMemory(pid);
  std::printf("planner_flood: %d SubmitBatches of %lld samples from %d "
              "threads in %.1f s; %zu accepted\n",
              config.batches, static_cast<long long>(config.samples),
              config.concurrency, absl::ToDoubleSeconds(submit_time),
              accepted.size());
  submits.Print("SubmitBatches");
  if (config.get_plans) {
    std::printf("planner_flood: GetPlan of the accepted steps, all done "
                "%.1f s after the first submit\n",
                absl::ToDoubleSeconds(total_time));
    plans.Print("GetPlan");
  }
  if (!memory.ok()) {
    std::fprintf(stderr, "planner_flood: FAILED: the planner died: %s\n",
                 std::string(memory.status().message()).c_str());
    return kExitFailure;
  }
  const double share = static_cast<double>(memory->peak_resident_bytes) /
                       static_cast<double>(config.memory_budget_bytes);
  const bool within = memory->peak_resident_bytes <= config.memory_budget_bytes;
  std::printf("planner_flood: peak resident memory (VmHWM) %s, %.0f%% of "
              "--memory-budget=%s (%s); resident now %s: %s\n",
              FormatBytes(memory->peak_resident_bytes).c_str(), 100 * share,
              config.memory_budget_text.c_str(),
              FormatBytes(config.memory_budget_bytes).c_str(),
              FormatBytes(memory->resident_bytes).c_str(),
              within ? "WITHIN the budget" : "OVER the budget");
  const int failures = submits.Failures() + plans.Failures();
  if (failures > 0) {
    std::fprintf(stderr,
                 "planner_flood: FAILED: %d calls failed with a code other "
                 "than RESOURCE_EXHAUSTED (listed above)\n",
                 failures);
  }
  return within && failures == 0 ? kExitOk : kExitFailure;
}

}  // namespace
}  // namespace dcp

int main(int argc, char** argv) {
  const dcp::MainStart start = dcp::StartMain(dcp::Program(), argc, argv);
  if (!start.flags.has_value()) return start.exit_code;
  absl::StatusOr<dcp::Config> config = dcp::Configure(*start.flags);
  if (!config.ok()) {
    return dcp::PrintUsageError(std::cerr, "planner_flood",
                                config.status().message());
  }
  return dcp::Run(*config);
}

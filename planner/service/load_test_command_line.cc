// planner_load_test's command line: its flags (common/main_prologue; its
// world flags name simulated workers, --workers and --ranks-per-worker, not
// the cluster flags of the real binaries), LoadTestOptions from them, and
// RunLoadTestMain.

#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/command_line.h"
#include "common/main_prologue.h"
#include "planner/service/load_test.h"

namespace dcp {
namespace {

constexpr FlagSpec kFlags[] = {
    {"workers", "N", /*default_value=*/"",
     "simulated workers, one per node (default 512)"},
    {"ranks-per-worker", "N", /*default_value=*/"",
     "ranks of each worker = GPUs per node (default 8; 512 x 8 = 4,096 "
     "GPUs)"},
    {"steps", "N", /*default_value=*/"", "training steps (default 20)"},
    {"model", "NAME|FILE", /*default_value=*/"",
     "model preset (llama3-8b, llama3-70b, video-dit-1b, tiny) or ModelSpec "
     "JSON file (default llama3-8b)"},
    {"workload", "SPEC", /*default_value=*/"",
     "sequence-length workload, e.g. longtail, uniform:min=1024,max=8192 "
     "(default longtail)"},
    {"global-batch-samples", "B", /*default_value=*/"",
     "sequences per global batch (default 4 per GPU: 16,384 at 4,096 GPUs)"},
    {"global-batch-tokens", "T", /*default_value=*/"",
     "token budget per global batch, instead of --global-batch-samples"},
    {"seed", "S", /*default_value=*/"",
     "seed of the batch stream and the measurement noise "
     "(default 1)"},
    {"connections", "N", /*default_value=*/"",
     "gRPC connections the simulated workers share (default 16; real "
     "workers each have one)"},
    {"threads", "N", /*default_value=*/"",
     "client threads = calls in flight at most (default 64)"},
    {"ahead", nullptr, /*default_value=*/"",
     "submit step 0's batch with SubmitBatches once worker 0 has "
     "registered and step k+1's when step k starts, so that each is planned before it "
     "is fetched (default true; "
     "--ahead=false plans on the first GetPlan: worker 0's, carrying the "
     "batch, before the others ask by step)"},
    {"get-plan-with-batch", nullptr, /*default_value=*/"",
     "every GetPlan carries the step's whole batch (the old protocol) "
     "instead of only its step and fingerprint (default false)"},
    {"decode-every-plan", nullptr, /*default_value=*/"",
     "decode every GetPlan response; by default a client thread decodes a "
     "response only when it differs byte for byte from the last one it "
     "decoded (decoding is each worker's own CPU work in a real job; here "
     "512 workers' would share the planner's cores) (default false)"},
    {"profile-samples", "N", /*default_value=*/"",
     "after registering, every worker submits a profile of N synthetic "
     "micro-benchmark samples at once, as ranks do at startup (default 0: "
     "no profiles)"},
    {"noise", "F", /*default_value=*/"",
     "reported step time = predicted x (1 + F x uniform[-1, 1)) (default "
     "0.05)"},
    {"train-seconds", "S", /*default_value=*/"",
     "seconds each step trains between GetPlan and ReportStepStats "
     "(default 0)"},
    {"server-threads", "N", /*default_value=*/"",
     "the planner's handler call threads (default 16)"},
    {"planning-threads", "N", /*default_value=*/"",
     "the planner's background planning threads (default 1)"},
    {"register-while-planning", "N", /*default_value=*/"",
     "while step 0's GetPlans run, one more client thread re-registers "
     "workers N times; the calls sent before step 0 was planned are the row "
     "'RegisterWorker (while GetPlans wait)' (use with --ahead=false "
     "--get-plan-with-batch, so that every step-0 GetPlan waits) (default 0)"},
    {"format", "text|json", /*default_value=*/"",
     "output format (default text)"},
    {"verbose", nullptr, /*default_value=*/"",
     "print the planner's log lines to stderr"},
};

const ProgramSpec& LoadTestProgram() {
  static const auto* const program = new ProgramSpec{
      "planner_load_test",
      "planner_load_test: load-tests the DCP planner service.\n\n"
      "Starts a planner in this process on 127.0.0.1 (a free port) and\n"
      "simulated workers that register, then per step fetch the plan\n"
      "(GetPlan by step and batch fingerprint, the batch submitted ahead by\n"
      "worker 0 with SubmitBatches; or with the whole batch), check that\n"
      "every worker got the same plan, and report each rank's step time\n"
      "(ReportStepStats, one call per rank; measured = predicted x (1 +\n"
      "seeded noise)). Each client thread decodes a plan response only when\n"
      "it differs from the last one it decoded (--decode-every-plan: every\n"
      "one). Prints the world, the plans computed (exactly one per step is\n"
      "required), each step's planning and fetch times, and per RPC the\n"
      "calls, throughput and client-side p50/p99/max latency; GetPlan also\n"
      "split into calls that found the plan ready and calls that waited\n"
      "for planning.",
      kFlags,
      "Exit status: 0 when every call succeeded and every step was planned "
      "exactly once, 1 otherwise, 2 for a usage error.\n"};
  return *program;
}

struct LoadTestCommandLine {
  LoadTestOptions options;
  bool json = false;
  bool verbose = false;
};

/// Sets `*field` from the flag when it is given (else leaves the default).
template <typename Field, typename Getter>
absl::Status SetIfGiven(const ParsedFlags& flags, const char* name, Getter get,
                        Field* field) {
  if (!flags.Given(name)) return absl::OkStatus();
  auto value = get(name);
  if (!value.ok()) return value.status();
  *field = static_cast<Field>(*value);
  return absl::OkStatus();
}

absl::StatusOr<LoadTestCommandLine> LoadTestCommandLineOf(
    const ParsedFlags& parsed) {
  const ParsedFlags* flags = &parsed;
  LoadTestCommandLine command_line;
  LoadTestOptions& options = command_line.options;
  const auto int32 = [&](const char* name) { return flags->Int32(name); };
  const auto positive = [&](const char* name) {
    return flags->Int(name, /*min=*/1);
  };
  const auto uint64 = [&](const char* name) { return flags->Uint64(name); };
  const auto number = [&](const char* name) { return flags->Double(name); };
  const auto boolean = [&](const char* name) { return flags->Bool(name); };
  for (absl::Status status : {
           SetIfGiven(*flags, "workers", int32, &options.workers),
           SetIfGiven(*flags, "ranks-per-worker", int32,
                      &options.ranks_per_worker),
           SetIfGiven(*flags, "steps", int32, &options.steps),
           SetIfGiven(*flags, "global-batch-samples", positive,
                      &options.global_batch_samples),
           SetIfGiven(*flags, "global-batch-tokens", positive,
                      &options.global_batch_tokens),
           SetIfGiven(*flags, "seed", uint64, &options.seed),
           SetIfGiven(*flags, "connections", int32, &options.connections),
           SetIfGiven(*flags, "threads", int32, &options.threads),
           SetIfGiven(*flags, "ahead", boolean, &options.ahead),
           SetIfGiven(*flags, "get-plan-with-batch", boolean,
                      &options.get_plan_with_batch),
           SetIfGiven(*flags, "decode-every-plan", boolean,
                      &options.decode_every_plan),
           SetIfGiven(*flags, "profile-samples", int32,
                      &options.profile_samples),
           SetIfGiven(*flags, "noise", number, &options.noise),
           SetIfGiven(*flags, "train-seconds", number, &options.train_seconds),
           SetIfGiven(*flags, "server-threads", int32,
                      &options.server_call_threads),
           SetIfGiven(*flags, "planning-threads", int32,
                      &options.planning_threads),
           SetIfGiven(*flags, "register-while-planning", int32,
                      &options.register_while_planning),
           SetIfGiven(*flags, "verbose", boolean, &command_line.verbose),
       }) {
    if (!status.ok()) return status;
  }
  if (flags->Given("model")) options.model = flags->String("model");
  if (flags->Given("workload")) options.workload = flags->String("workload");
  const std::string format = flags->String("format");
  if (flags->Given("format") && format != "text" && format != "json") {
    return absl::InvalidArgumentError(
        absl::StrCat("--format=", format, ": expected text or json"));
  }
  command_line.json = format == "json";
  if (options.global_batch_samples > 0 && options.global_batch_tokens > 0) {
    return absl::InvalidArgumentError(
        "--global-batch-samples and --global-batch-tokens are exclusive; "
        "give one");
  }
  return command_line;
}

/// One stderr line. Thread-safe (one stdio call).
void LogToStderr(const std::string& line) {
  const std::string with_newline = absl::StrCat("planner: ", line, "\n");
  std::fwrite(with_newline.data(), 1, with_newline.size(), stderr);
}

}  // namespace

int RunLoadTestMain(int argc, char** argv) {
  const MainStart start = StartMain(LoadTestProgram(), argc, argv);
  if (!start.flags.has_value()) return start.exit_code;
  absl::StatusOr<LoadTestCommandLine> command_line =
      LoadTestCommandLineOf(*start.flags);
  if (!command_line.ok()) {
    return PrintUsageError(std::cerr, LoadTestProgram().name,
                           command_line.status().message());
  }
  absl::StatusOr<LoadTestResult> result =
      RunLoadTest(command_line->options,
                  command_line->verbose
                      ? std::function<void(const std::string&)>(&LogToStderr)
                      : nullptr);
  if (!result.ok()) {
    std::fprintf(stderr, "planner_load_test: %s\n",
                 std::string(result.status().message()).c_str());
    return result.status().code() == absl::StatusCode::kInvalidArgument
               ? kExitUsageError
               : kExitFailure;
  }
  const std::string output = command_line->json ? FormatLoadTestJson(*result)
                                                : FormatLoadTestText(*result);
  std::fputs(output.c_str(), stdout);
  return result->ok() ? kExitOk : kExitFailure;
}

}  // namespace dcp

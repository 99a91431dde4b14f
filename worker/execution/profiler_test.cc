// RunProfile: single-process cases over a FakeCommunicator (samples, fitting
// them, a scripted clock, option checks) and the collective protocol over 4
// Gloo ranks run as child processes (multiprocess_test_util.h). Over 600
// lines: both halves share the tiny model, the scripted clocks and the fit
// report lookup at the top.

#include "worker/execution/profiler.h"

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/status_macros.h"
#include "cost_model/cluster_spec.h"
#include "cost_model/compute_model.h"
#include "cost_model/cost_model.h"
#include "cost_model/fitting.h"
#include "cost_model/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torch/torch.h"
#include "worker/communication/c10d_test_world.h"
#include "worker/communication/communicator.h"
#include "worker/communication/fake_communicator.h"
#include "worker/communication/multiprocess_test_util.h"
#include "worker/libtorch_cuda.h"

namespace dcp {
namespace {

using Op = ProfileSample::Op;
using ::dcp::testing::RankContext;

constexpr int kWorldSize = 4;
// Ranks per node in the multi-process case: groups of 4 cross nodes.
constexpr int kGpusPerNode = 2;
constexpr absl::Duration kSetupTimeout = absl::Seconds(30);
constexpr absl::Duration kRunTimeout = absl::Seconds(120);

ModelSpec Tiny() {
  absl::StatusOr<ModelSpec> spec = ModelPreset("tiny");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

std::vector<ProfileSample> OfOp(const std::vector<ProfileSample>& samples,
                                Op op) {
  std::vector<ProfileSample> selected;
  for (const ProfileSample& sample : samples) {
    if (sample.op == op) selected.push_back(sample);
  }
  return selected;
}

const ModelFitReport* Report(const CostModelFit& fit, const std::string& name) {
  for (const ModelFitReport& report : fit.reports) {
    if (report.name == name) return &report;
  }
  return nullptr;
}

/// A clock whose time moves only when read: each Now() returns the current
/// time, then advances it by the next step of a cyclic script. Thread-safe.
class ScriptedClock final : public Clock {
 public:
  explicit ScriptedClock(std::vector<absl::Duration> steps)
      : steps_(std::move(steps)) {}

  absl::Time Now() const override {
    absl::MutexLock lock(&mutex_);
    const absl::Time now = now_;
    now_ += steps_[reads_ % steps_.size()];
    ++reads_;
    return now;
  }

  int64_t reads() const {
    absl::MutexLock lock(&mutex_);
    return reads_;
  }

 private:
  const std::vector<absl::Duration> steps_;
  mutable absl::Mutex mutex_;
  mutable absl::Time now_ ABSL_GUARDED_BY(mutex_) = absl::UnixEpoch();
  mutable int64_t reads_ ABSL_GUARDED_BY(mutex_) = 0;
};

TEST(ProfilerTest, SingleRankDefaultProfileHasComputeSamplesOnly) {
  const ModelSpec spec = Tiny();
  FakeCommunicator comm;
  const ProfileOptions options;
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<ProfileSample>> samples =
      RunProfile(spec, comm, /*gpus_per_node=*/8, options);
  std::fprintf(stderr, "default single-rank profile took %s\n",
               absl::FormatDuration(absl::Now() - start).c_str());
  ASSERT_TRUE(samples.ok()) << samples.status();

  const std::vector<ProfileSample> gemms = OfOp(*samples, Op::kGemm);
  const std::vector<ProfileSample> forward =
      OfOp(*samples, Op::kAttentionForward);
  const std::vector<ProfileSample> backward =
      OfOp(*samples, Op::kAttentionBackward);
  ASSERT_EQ(gemms.size(), options.gemm_tokens.size());
  ASSERT_EQ(forward.size(), options.attention_lengths.size());
  ASSERT_EQ(backward.size(), options.attention_lengths.size());
  // Activation memory at every token count and recompute setting (0, 1
  // and all layers), measured on the CPU through the allocation meter.
  const std::vector<ProfileSample> memory =
      OfOp(*samples, Op::kActivationMemory);
  ASSERT_EQ(memory.size(), 3 * options.memory_tokens.size());
  for (size_t i = 0; i < memory.size(); ++i) {
    EXPECT_EQ(memory[i].tokens,
              options.memory_tokens[i % options.memory_tokens.size()]);
    EXPECT_EQ(memory[i].checkpointed_layers,
              std::vector<int>(
                  {0, 1, spec.num_layers})[i / options.memory_tokens.size()]);
    EXPECT_GT(memory[i].measured_bytes, 0);
  }
  // More tokens hold more; recomputing every layer holds less.
  EXPECT_GT(memory[2].measured_bytes, memory[0].measured_bytes);
  EXPECT_LT(memory[8].measured_bytes, memory[2].measured_bytes);
  // A world of one has no collectives.
  EXPECT_EQ(samples->size(),
            gemms.size() + forward.size() + backward.size() + memory.size());
  EXPECT_EQ(comm.world().all_to_all_calls, 0);
  EXPECT_EQ(comm.world().all_reduce_calls, 0);
  EXPECT_EQ(comm.world().reduce_scatter_calls, 0);
  EXPECT_EQ(comm.world().all_gather_calls, 0);

  for (size_t i = 0; i < gemms.size(); ++i) {
    const double tokens = static_cast<double>(options.gemm_tokens[i]);
    EXPECT_EQ(gemms[i].tokens, tokens);
    EXPECT_DOUBLE_EQ(gemms[i].flops,
                     spec.LinearForwardFlopsPerToken() * tokens);
    EXPECT_GT(gemms[i].measured_seconds, 0);
  }
  // Far more work at the most tokens than at the fewest.
  EXPECT_GT(gemms.back().measured_seconds, 2 * gemms.front().measured_seconds);
  EXPECT_GT(gemms.back().measured_seconds,
            gemms[gemms.size() - 2].measured_seconds);

  for (size_t i = 0; i < forward.size(); ++i) {
    const double length = static_cast<double>(options.attention_lengths[i]);
    for (const ProfileSample& sample : {forward[i], backward[i]}) {
      EXPECT_DOUBLE_EQ(
          sample.flops,
          spec.AttentionForwardFlopsPerSquaredToken() * length * length);
      EXPECT_EQ(sample.sum_squared_lengths, length * length);
      EXPECT_EQ(sample.sum_lengths, length);
      EXPECT_GT(sample.measured_seconds, 0);
    }
  }
  EXPECT_GT(forward.back().measured_seconds, forward.front().measured_seconds);
  EXPECT_GT(backward.back().measured_seconds,
            backward.front().measured_seconds);
}

// A DiT worker profiles the DiT's own block and attention core (before, a
// spec without causal attention was refused).
TEST(ProfilerTest, DiffusionTransformerProfilesItsOwnBlock) {
  absl::StatusOr<ModelSpec> spec = ModelPreset("tiny-dit");
  ASSERT_TRUE(spec.ok()) << spec.status();
  FakeCommunicator comm;
  ProfileOptions options;
  options.repeats = 1;
  options.warmup = 0;
  options.gemm_tokens = {8, 512};
  options.attention_lengths = {32, 256};
  absl::StatusOr<std::vector<ProfileSample>> samples =
      RunProfile(*spec, comm, /*gpus_per_node=*/8, options);
  ASSERT_TRUE(samples.ok()) << samples.status();
  const std::vector<ProfileSample> gemms = OfOp(*samples, Op::kGemm);
  const std::vector<ProfileSample> forward =
      OfOp(*samples, Op::kAttentionForward);
  ASSERT_EQ(gemms.size(), 2u);
  ASSERT_EQ(forward.size(), 2u);
  ASSERT_EQ(OfOp(*samples, Op::kAttentionBackward).size(), 2u);
  EXPECT_DOUBLE_EQ(gemms[1].flops, spec->LinearForwardFlopsPerToken() * 512);
  // Bidirectional: twice the flops of a causal mask of the same width.
  ModelSpec causal = *spec;
  causal.causal = true;
  EXPECT_DOUBLE_EQ(
      forward[1].flops,
      2 * causal.AttentionForwardFlopsPerSquaredToken() * 256 * 256);
  // The DiT's own micro-batches give its activation-memory samples.
  EXPECT_EQ(OfOp(*samples, Op::kActivationMemory).size(),
            3 * options.memory_tokens.size());
  for (const ProfileSample& sample : *samples) {
    if (sample.op == Op::kActivationMemory) {
      EXPECT_GT(sample.measured_bytes, 0);
    } else {
      EXPECT_GT(sample.measured_seconds, 0);
    }
  }
}

// The profile runs in the precision the steps run in (the agent passes its
// compute dtype): a bfloat16 profile runs a bfloat16 model, whose
// activations hold fewer bytes.
TEST(ProfilerTest, Bfloat16ProfileMeasuresBfloat16Activations) {
  const ModelSpec spec = Tiny();
  FakeCommunicator comm;
  ProfileOptions options;
  options.repeats = 1;
  options.warmup = 0;
  options.gemm_tokens = {64};
  options.attention_lengths = {64};
  options.memory_tokens = {2048};
  options.memory_checkpointed_layers = std::vector<int>{0};
  absl::StatusOr<std::vector<ProfileSample>> fp32 =
      RunProfile(spec, comm, /*gpus_per_node=*/8, options);
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  options.dtype = torch::kBFloat16;
  absl::StatusOr<std::vector<ProfileSample>> bf16 =
      RunProfile(spec, comm, /*gpus_per_node=*/8, options);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  const double fp32_bytes =
      OfOp(*fp32, Op::kActivationMemory)[0].measured_bytes;
  const double bf16_bytes =
      OfOp(*bf16, Op::kActivationMemory)[0].measured_bytes;
  std::fprintf(stderr,
               "activations of 2048 tokens: fp32 %.0f, bf16 %.0f bytes\n",
               fp32_bytes, bf16_bytes);
  EXPECT_LT(bf16_bytes, 0.8 * fp32_bytes);
}

// The CPU time this process has used (all its threads): unlike the wall
// clock, it does not count the time other processes (tests run in parallel
// on a loaded machine) take the cores, so the fit below sees the work's own
// cost rather than the machine's load.
class ProcessCpuClock final : public Clock {
 public:
  absl::Time Now() const override {
    timespec now{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
    return absl::UnixEpoch() + absl::DurationFromTimespec(now);
  }
};

// Runs torch on one intra-op thread while it lives, so that no pool thread
// spins on the CPU between operations (ProcessCpuClock would count it).
class OneTorchThread {
 public:
  OneTorchThread() : threads_(torch::get_num_threads()) {
    torch::set_num_threads(1);
  }
  ~OneTorchThread() { torch::set_num_threads(threads_); }

 private:
  int threads_;
};

TEST(ProfilerTest, FittedComputeModelPredictsAFreshGemm) {
  const ModelSpec spec = Tiny();
  FakeCommunicator comm;
  ProfileOptions options;
  options.repeats = 7;
  // Long enough that the quadratic work dominates the fixed cost of a call.
  options.attention_lengths = {64, 128, 256, 512, 1024};
  const OneTorchThread one_thread;
  const ProcessCpuClock cpu_clock;
  absl::StatusOr<std::vector<ProfileSample>> samples =
      RunProfile(spec, comm, /*gpus_per_node=*/8, options, cpu_clock);
  ASSERT_TRUE(samples.ok()) << samples.status();

  const ClusterSpec cluster = H200Cluster(/*num_nodes=*/1, /*gpus_per_node=*/8);
  absl::StatusOr<CostModelFit> fit =
      FitCostModel(spec, cluster, DefaultCostParams(spec, cluster), *samples);
  ASSERT_TRUE(fit.ok()) << fit.status();
  for (const char* name : {"gemm", "attention_forward", "attention_backward"}) {
    const ModelFitReport* report = Report(*fit, name);
    ASSERT_NE(report, nullptr) << name;
    EXPECT_FALSE(report->used_defaults) << name << ": " << report->note;
    std::fprintf(stderr, "%s: %s, rms relative error %.3f\n", name,
                 report->note.c_str(), report->rms_relative_error);
  }

  for (const ProfileSample& gemm : OfOp(*samples, Op::kGemm)) {
    std::fprintf(stderr, "GEMM of %lld tokens: measured %.3g s, fitted %.3g s\n",
                 static_cast<long long>(gemm.tokens), gemm.measured_seconds,
                 ComputeModel(spec, fit->params.compute)
                     .GemmSeconds(gemm.flops, gemm.tokens));
  }

  // A token count between the profiled ones, measured afresh.
  ProfileOptions fresh = options;
  fresh.gemm_tokens = {1024};
  fresh.attention_lengths = {};
  fresh.memory_tokens = {};
  absl::StatusOr<std::vector<ProfileSample>> measured =
      RunProfile(spec, comm, /*gpus_per_node=*/8, fresh, cpu_clock);
  ASSERT_TRUE(measured.ok()) << measured.status();
  ASSERT_EQ(measured->size(), 1u);
  const ProfileSample& sample = (*measured)[0];
  const double predicted = ComputeModel(spec, fit->params.compute)
                               .GemmSeconds(sample.flops, sample.tokens);
  std::fprintf(stderr,
               "GEMM of 1024 tokens: measured %.3g s, predicted %.3g s\n",
               sample.measured_seconds, predicted);
  // Within a factor of two: a CPU's GEMM throughput is not one line over
  // token counts (cache sizes), while defaults fitted to nothing, or a fit
  // of the wrong samples, miss by orders of magnitude.
  EXPECT_GT(predicted, 0.5 * sample.measured_seconds);
  EXPECT_LT(predicted, 2.0 * sample.measured_seconds);
}

TEST(ProfilerTest, WholeMicroBatchesAndTheOptimizerStepWhenAsked) {
  const ModelSpec spec = Tiny();
  FakeCommunicator comm;
  ProfileOptions options;
  options.repeats = 1;
  options.warmup = 0;
  options.gemm_tokens = {};
  options.attention_lengths = {};
  options.memory_tokens = {};
  options.micro_batch_shapes = {{1, 64}, {3, 16}};
  options.optimizer_step = true;
  absl::StatusOr<std::vector<ProfileSample>> samples =
      RunProfile(spec, comm, /*gpus_per_node=*/8, options);
  ASSERT_TRUE(samples.ok()) << samples.status();
  const std::vector<ProfileSample> micro = OfOp(*samples, Op::kMicroBatch);
  // Each shape without recompute and with every layer recomputed.
  ASSERT_EQ(micro.size(), 4u);
  EXPECT_EQ(micro[0].num_sequences, 1);
  EXPECT_EQ(micro[0].tokens, 64);
  EXPECT_EQ(micro[0].checkpointed_layers, 0);
  EXPECT_EQ(micro[1].checkpointed_layers, spec.num_layers);
  EXPECT_EQ(micro[2].num_sequences, 3);
  EXPECT_EQ(micro[2].sum_lengths, 48);
  EXPECT_EQ(micro[2].sum_squared_lengths, 3 * 16 * 16);
  for (const ProfileSample& sample : micro) {
    EXPECT_EQ(sample.group_size, 1);
    EXPECT_GT(sample.measured_seconds, 0);
  }
  const std::vector<ProfileSample> optimizer =
      OfOp(*samples, Op::kOptimizerStep);
  ASSERT_EQ(optimizer.size(), 1u);
  EXPECT_GT(optimizer[0].measured_seconds, 0);
  options.micro_batch_shapes = {{0, 64}};
  EXPECT_EQ(RunProfile(spec, comm, 8, options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ProfilerTest, EachSampleIsTheMedianOfTheTimedRunsOnTheInjectedClock) {
  // Each timed run reads the clock twice: the step after the first read is
  // the run's duration, the step after the second the gap to the next run.
  // Runs of 3, 1 and 2 ms have a median of 2 ms; warmup runs read nothing.
  const ScriptedClock clock({absl::Milliseconds(3), absl::Milliseconds(50),
                             absl::Milliseconds(1), absl::Milliseconds(50),
                             absl::Milliseconds(2), absl::Milliseconds(50)});
  FakeCommunicator comm;
  ProfileOptions options;
  options.repeats = 3;
  options.warmup = 1;
  options.gemm_tokens = {8, 16};
  options.attention_lengths = {8};
  options.memory_tokens = {};
  absl::StatusOr<std::vector<ProfileSample>> samples =
      RunProfile(Tiny(), comm, /*gpus_per_node=*/8, options, clock);
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->size(), 4u);
  for (const ProfileSample& sample : *samples) {
    EXPECT_DOUBLE_EQ(sample.measured_seconds, 0.002);
  }
  EXPECT_EQ(clock.reads(), 4 * 2 * options.repeats);

  // An even number of runs: the mean of the middle two (1 and 3 ms here).
  const ScriptedClock even_clock(
      {absl::Milliseconds(3), absl::ZeroDuration(), absl::Milliseconds(1),
       absl::ZeroDuration(), absl::Milliseconds(9), absl::ZeroDuration(),
       absl::Milliseconds(0.5), absl::ZeroDuration()});
  options.repeats = 4;
  options.attention_lengths = {};
  samples = RunProfile(Tiny(), comm, /*gpus_per_node=*/8, options, even_clock);
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->size(), 2u);
  for (const ProfileSample& sample : *samples) {
    EXPECT_DOUBLE_EQ(sample.measured_seconds, 0.002);
  }
}

TEST(ProfilerTest, ClockThatDoesNotAdvanceIsAnError) {
  const ScriptedClock stopped({absl::ZeroDuration()});
  FakeCommunicator comm;
  ProfileOptions options;
  options.repeats = 1;
  options.warmup = 0;
  options.gemm_tokens = {8};
  options.attention_lengths = {};
  absl::Status status =
      RunProfile(Tiny(), comm, /*gpus_per_node=*/8, options, stopped).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
  EXPECT_THAT(std::string(status.message()),
              ::testing::HasSubstr("clock must advance"));
}

TEST(ProfilerTest, InvalidOptionsAreRejectedBeforeAnyWork) {
  const ModelSpec spec = Tiny();
  FakeCommunicator comm;
  auto error_of = [&](const ProfileOptions& options, int gpus_per_node = 8,
                      const ModelSpec* model = nullptr) {
    return RunProfile(model == nullptr ? spec : *model, comm, gpus_per_node,
                      options)
        .status();
  };
  auto expect_invalid = [&](const absl::Status& status,
                            const std::string& mentions) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr(mentions));
  };
  struct InvalidCase {
    // What it changes in the default options.
    std::function<void(ProfileOptions&)> change;
    // What the error names.
    std::string mentions;
  };
  const std::vector<InvalidCase> invalid_cases = {
      {[](ProfileOptions& o) { o.repeats = 0; }, "repeats"},
      {[](ProfileOptions& o) { o.warmup = -1; }, "warmup"},
      {[](ProfileOptions& o) { o.sp_micro_batch_repeats = 0; },
       "sp_micro_batch_repeats = 0"},
      {[](ProfileOptions& o) {
         o.sp_micro_batch_shapes = {{1, 32}, {2, 0}};
       },
       "sp_micro_batch_shapes[1] = {2, 0}"},
      {[](ProfileOptions& o) {
         o.gemm_tokens = {64, 0};
       },
       "gemm_tokens[1] = 0"},
      {[](ProfileOptions& o) { o.attention_lengths = {-5}; },
       "attention_lengths[0]"},
      {[](ProfileOptions& o) { o.all_reduce_bytes = {1}; }, "all_reduce_bytes"},
      {[](ProfileOptions& o) { o.group_sizes = std::vector<int>{2}; },
       "divide the world size 1"},
      {[](ProfileOptions& o) {
         o.collective_timeout = absl::InfiniteDuration();
       },
       "collective_timeout"},
      {[](ProfileOptions& o) { o.dtype = torch::kInt64; }, "dtype"},
      {[](ProfileOptions& o) { o.memory_tokens = {1000}; },
       "memory_sequence_tokens"},
      {[](ProfileOptions& o) {
         o.memory_checkpointed_layers = std::vector<int>{3};
       },
       "memory_checkpointed_layers"},
  };
  for (const InvalidCase& invalid : invalid_cases) {
    ProfileOptions options;
    invalid.change(options);
    expect_invalid(error_of(options), invalid.mentions);
  }
  expect_invalid(error_of(ProfileOptions(), /*gpus_per_node=*/0),
                 "gpus_per_node");
  ModelSpec uneven = spec;
  uneven.num_kv_heads = 3;
  EXPECT_EQ(error_of(ProfileOptions(), 8, &uneven).code(),
            absl::StatusCode::kInvalidArgument);
  ProfileOptions options;
  options.device = torch::Device(torch::kCUDA, 0);
  if (!CudaUsable()) {
    EXPECT_EQ(error_of(options).code(), absl::StatusCode::kFailedPrecondition);
  }
  // Nothing was communicated.
  EXPECT_EQ(comm.world().barrier_calls, 0);
}

TEST(ProfilerTest, GroupSizes) {
  auto sizes = [](std::optional<std::vector<int>> requested, int world) {
    ProfileOptions options;
    options.group_sizes = std::move(requested);
    return ProfileGroupSizes(options, world);
  };
  EXPECT_THAT(*sizes(std::nullopt, 1), ::testing::IsEmpty());
  EXPECT_THAT(*sizes(std::nullopt, 4), ::testing::ElementsAre(2, 4));
  EXPECT_THAT(*sizes(std::nullopt, 8), ::testing::ElementsAre(2, 4, 8));
  EXPECT_THAT(*sizes(std::nullopt, 12), ::testing::ElementsAre(2, 4));
  EXPECT_THAT(*sizes(std::vector<int>{6, 2, 2}, 12),
              ::testing::ElementsAre(2, 6));
  EXPECT_THAT(*sizes(std::vector<int>{}, 8), ::testing::IsEmpty());
  EXPECT_EQ(sizes(std::vector<int>{3}, 8).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sizes(std::vector<int>{1}, 8).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sizes(std::vector<int>{16}, 8).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// --- 4 Gloo ranks ---

absl::Status Check(bool condition, const std::string& what) {
  if (condition) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("check failed: ", what));
}

// The fit of `samples` for the test world's cluster: its ranks on two nodes
// of kGpusPerNode.
absl::StatusOr<CostModelFit> FitOnTestCluster(
    const ModelSpec& spec, const std::vector<ProfileSample>& samples) {
  const ClusterSpec cluster =
      H200Cluster(/*num_nodes=*/kWorldSize / kGpusPerNode, kGpusPerNode);
  return FitCostModel(spec, cluster, DefaultCostParams(spec, cluster), samples);
}

// The default profile, collectively: every rank gets all-to-all samples for
// groups of 2 (inside a node) and 4 (across the two nodes of 2), world
// all-reduce samples, its own compute samples, and a fit that accepts them.
DCP_RANK_MAIN(DefaultProfile) {
  absl::StatusOr<std::unique_ptr<Communicator>> comm =
      ::dcp::testing::JoinC10dTestWorld(
          context, absl::StrCat("profiler_", context.arg), kSetupTimeout);
  if (!comm.ok()) return comm.status();
  const ModelSpec spec = Tiny();
  const ProfileOptions options;
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<ProfileSample>> samples =
      RunProfile(spec, **comm, kGpusPerNode, options);
  const absl::Duration took = absl::Now() - start;
  if (!samples.ok()) return samples.status();
  std::fprintf(stderr, "[rank %d] default profile: %zu samples in %s\n",
               context.rank, samples->size(),
               absl::FormatDuration(took).c_str());

  std::map<int, std::vector<ProfileSample>> all_to_all;
  for (const ProfileSample& sample : OfOp(*samples, Op::kAllToAll)) {
    all_to_all[sample.group_size].push_back(sample);
  }
  DCP_RETURN_IF_ERROR(
      Check(all_to_all.size() == 2 && all_to_all.count(2) == 1 &&
                all_to_all.count(4) == 1,
            "all-to-all samples for exactly group sizes 2 and 4"));
  for (const auto& [group_size, group_samples] : all_to_all) {
    DCP_RETURN_IF_ERROR(
        Check(group_samples.size() == options.all_to_all_bytes.size(),
              absl::StrCat("one all-to-all sample per size at ", group_size)));
    for (size_t i = 0; i < group_samples.size(); ++i) {
      const ProfileSample& sample = group_samples[i];
      DCP_RETURN_IF_ERROR(
          Check(sample.inter_node == (group_size > kGpusPerNode) &&
                    sample.bytes ==
                        static_cast<double>(options.all_to_all_bytes[i]) &&
                    sample.measured_seconds > 0,
                absl::StrCat("all-to-all sample ", i, " of group size ",
                             group_size)));
    }
  }
  const std::vector<ProfileSample> all_reduce = OfOp(*samples, Op::kAllReduce);
  DCP_RETURN_IF_ERROR(
      Check(all_reduce.size() == options.all_reduce_bytes.size(),
            "one world all-reduce sample per size"));
  for (const ProfileSample& sample : all_reduce) {
    DCP_RETURN_IF_ERROR(Check(sample.group_size == kWorldSize &&
                                  sample.inter_node &&
                                  sample.measured_seconds > 0,
                              "all-reduce sample over the world across nodes"));
  }
  // ZeRO-1's pair over the world: float32 gradients reduce-scattered, the
  // weights (float32 here) all-gathered, each of the whole buffer's bytes.
  for (Op op : {Op::kReduceScatter, Op::kAllGather}) {
    const std::vector<ProfileSample> zero1 = OfOp(*samples, op);
    DCP_RETURN_IF_ERROR(
        Check(zero1.size() == options.zero1_collective_bytes.size(),
              "one reduce-scatter and one all-gather sample per size"));
    for (size_t i = 0; i < zero1.size(); ++i) {
      DCP_RETURN_IF_ERROR(Check(
          zero1[i].group_size == kWorldSize && zero1[i].inter_node &&
              zero1[i].bytes ==
                  static_cast<double>(options.zero1_collective_bytes[i]) &&
              zero1[i].measured_seconds > 0,
          absl::StrCat("ZeRO-1 collective sample ", i)));
    }
  }
  DCP_RETURN_IF_ERROR(
      Check(OfOp(*samples, Op::kGemm).size() == options.gemm_tokens.size(),
            "GEMM samples on every rank"));

  DCP_ASSIGN_OR_RETURN(const CostModelFit fit,
                       FitOnTestCluster(spec, *samples));
  if (context.rank == 0) {
    for (const ModelFitReport& report : fit.reports) {
      std::fprintf(stderr, "[rank 0] fit %s: %s\n", report.name.c_str(),
                   report.note.c_str());
    }
  }
  return Check(
      took < absl::Seconds(60),
      absl::StrCat("default profile took ", absl::FormatDuration(took)));
}

// Whole micro-batches over the SP groups of 2 and 4: one kSpMicroBatch
// sample per shape and checkpointed-layer count and group, the rank's
// share of the tokens, and the all-to-all part within the whole.
DCP_RANK_MAIN(SpMicroBatches) {
  absl::StatusOr<std::unique_ptr<Communicator>> comm =
      ::dcp::testing::JoinC10dTestWorld(
          context, absl::StrCat("profiler_sp_", context.arg), kSetupTimeout);
  if (!comm.ok()) return comm.status();
  const ModelSpec spec = Tiny();
  ProfileOptions options;
  options.repeats = 1;
  options.warmup = 1;
  options.gemm_tokens = {};
  options.attention_lengths = {};
  options.all_to_all_bytes = {64 << 10};
  options.all_reduce_bytes = {};
  options.zero1_collective_bytes = {};
  options.memory_tokens = {};
  options.micro_batch_checkpointed_layers = std::vector<int>{0, 2};
  options.sp_micro_batch_shapes = {{1, 30}, {3, 16}};
  options.sp_micro_batch_repeats = 2;
  absl::StatusOr<std::vector<ProfileSample>> samples =
      RunProfile(spec, **comm, kGpusPerNode, options);
  if (!samples.ok()) return samples.status();
  const std::vector<ProfileSample> sp = OfOp(*samples, Op::kSpMicroBatch);
  DCP_RETURN_IF_ERROR(
      Check(sp.size() == 2 * 2 * 2, "8 SP micro-batch samples"));
  size_t i = 0;
  for (int group_size : {2, 4}) {
    for (const auto& [sequences, length] : options.sp_micro_batch_shapes) {
      for (int layers : {0, 2}) {
        const ProfileSample& sample = sp[i++];
        const int64_t share = (length + group_size - 1) / group_size;
        DCP_RETURN_IF_ERROR(Check(
            sample.group_size == group_size &&
                sample.inter_node == (group_size > kGpusPerNode) &&
                sample.num_sequences == sequences &&
                sample.sum_lengths == static_cast<double>(sequences * length) &&
                sample.tokens == static_cast<double>(sequences * share) &&
                sample.checkpointed_layers == layers &&
                sample.communication_seconds > 0 &&
                sample.communication_seconds <= sample.measured_seconds,
            absl::StrCat("SP micro-batch sample ", i - 1)));
      }
    }
  }
  DCP_ASSIGN_OR_RETURN(const CostModelFit fit,
                       FitOnTestCluster(spec, *samples));
  const ModelFitReport* report = Report(fit, "sp_micro_batch");
  DCP_RETURN_IF_ERROR(Check(report != nullptr, "an sp_micro_batch report"));
  return Check(!report->used_defaults, "the SP micro-batches are fitted");
}

TEST(ProfilerMultiProcessTest, SpMicroBatchesOverFourRanks) {
  EXPECT_TRUE(::dcp::testing::EveryRankSucceeded(kWorldSize, kRunTimeout,
                                                 "SpMicroBatches", "sp"));
}

TEST(ProfilerMultiProcessTest, DefaultProfileOverFourRanks) {
  const absl::Time start = absl::Now();
  EXPECT_TRUE(::dcp::testing::EveryRankSucceeded(kWorldSize, kRunTimeout,
                                                 "DefaultProfile", "default"));
  std::fprintf(stderr, "4 ranks done in %s\n",
               absl::FormatDuration(absl::Now() - start).c_str());
}

}  // namespace
}  // namespace dcp

// Randomly mutated requests against every PlannerHandler method: the handler
// never crashes, and every error is one a client can act on (INVALID_ARGUMENT,
// FAILED_PRECONDITION, RESOURCE_EXHAUSTED or NOT_FOUND) with a message.
// Deterministic: each thread's generator is seeded.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/fake_clock.h"
#include "common/test_files.h"
#include "cost_model/cost_model.h"
#include "cost_model/fitting.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "gtest/gtest.h"
#include "planner/client/proto_convert.h"
#include "planner/service/planner_handler.h"
#include "planner/service/planner_metrics.h"

namespace dcp {
namespace {

class Fuzzer {
 public:
  Fuzzer(uint64_t seed, const PlannerHandlerOptions& options,
         const std::vector<v1::ProfileSample>& valid_profile)
      : rng_(seed), options_(options), valid_profile_(valid_profile) {}

  bool Chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  int Uniform(int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng_);
  }

  int64_t Int64() {
    static constexpr int64_t kValues[] = {
        0,
        1,
        -1,
        2,
        7,
        8,
        1000,
        65536,
        int64_t{1} << 31,
        int64_t{1} << 40,
        (int64_t{1} << 40) + 1,
        std::numeric_limits<int64_t>::max(),
        std::numeric_limits<int64_t>::min(),
    };
    if (Chance(0.5)) return kValues[Uniform(0, std::size(kValues) - 1)];
    return std::uniform_int_distribution<int64_t>(-100000, 100000)(rng_);
  }
  int32_t Int32() {
    static constexpr int32_t kValues[] = {0,
                                          1,
                                          -1,
                                          2,
                                          3,
                                          4,
                                          8,
                                          9,
                                          64,
                                          std::numeric_limits<int32_t>::max(),
                                          std::numeric_limits<int32_t>::min()};
    if (Chance(0.6)) return kValues[Uniform(0, std::size(kValues) - 1)];
    return Uniform(-100, 100);
  }
  double Double() {
    static const double kValues[] = {
        0,
        -0.0,
        -1,
        1e-12,
        0.5,
        1,
        2,
        1e300,
        -1e300,
        std::numeric_limits<double>::quiet_NaN(),
        std::numeric_limits<double>::infinity(),
        -std::numeric_limits<double>::infinity(),
        std::numeric_limits<double>::denorm_min(),
        std::numeric_limits<double>::max(),
    };
    if (Chance(0.5)) return kValues[Uniform(0, std::size(kValues) - 1)];
    return std::uniform_real_distribution<double>(-10, 10)(rng_);
  }
  std::string String() {
    static const char* const kValues[] = {
        "",           "w0",     "w1",      "w2",       "w3",     "w4",
        "node0",      "node1",  "node2",   "node3",    "node4",  "a b",
        "x/y",        "w:0",    "..",      "nccl",     "gloo",   "mpi",
        "host:29500", "host:0", "[::1]:1", "\xc3\xbc", "h:99999"};
    if (Chance(0.85)) return kValues[Uniform(0, std::size(kValues) - 1)];
    std::string value(Uniform(0, 300), 'x');
    for (char& c : value) c = static_cast<char>(Uniform(0, 255));
    return value;
  }

  // Mostly-valid worker ids so that deeper paths are reached.
  std::string WorkerId() {
    return Chance(0.8) ? absl::StrCat("w", Uniform(0, 4)) : String();
  }

  v1::RegisterWorkerRequest Register() {
    v1::RegisterWorkerRequest request;
    const int n = Uniform(0, 4);
    request.set_worker_id(absl::StrCat("w", n));
    request.set_node_name(
        absl::StrCat("node", Chance(0.8) ? n : Uniform(0, 5)));
    request.set_num_ranks(Chance(0.7) ? options_.cluster.gpus_per_node
                                      : Int32());
    request.set_address(absl::StrCat("host", n, ":29500"));
    request.set_backend(Chance(0.8) ? "nccl" : String());
    request.set_max_cached_groups(Chance(0.8) ? kDefaultNcclMaxCachedGroups
                                              : Int32());
    if (Chance(0.3)) request.set_worker_id(String());
    if (Chance(0.2)) request.set_node_name(String());
    if (Chance(0.2)) request.set_address(String());
    if (Chance(0.2)) request.set_gpu_memory_bytes(Int64());
    if (Chance(0.1)) request.set_gpu_kind(String());
    if (Chance(0.1)) request.set_libtorch_version(String());
    if (Chance(0.2)) MutateField(request);
    return request;
  }

  v1::GlobalBatch Batch() {
    v1::GlobalBatch batch;
    batch.set_step(Chance(0.85) ? Uniform(0, 30) : Int64());
    const int n = Chance(0.05) ? 0 : Uniform(1, 12);
    for (int i = 0; i < n; ++i) {
      v1::Sample* sample = batch.add_samples();
      sample->set_id(Chance(0.9) ? i : Int64());
      sample->set_length_tokens(Chance(0.8) ? Uniform(1, 60000) : Int64());
    }
    return batch;
  }

  // A batch that is the same every time for a step (mostly), so that cached
  // and conflicting paths are both exercised.
  v1::GlobalBatch StableBatch() {
    if (Chance(0.3)) return Batch();
    return StableBatchOf(Uniform(0, 30));
  }

  // The usual batch of `step`.
  static v1::GlobalBatch StableBatchOf(int step) {
    v1::GlobalBatch batch;
    batch.set_step(step);
    for (int i = 0; i < 2 + step % 7; ++i) {
      v1::Sample* sample = batch.add_samples();
      sample->set_id(i);
      sample->set_length_tokens(500 + 997 * ((step * 13 + i * 7) % 40));
    }
    return batch;
  }

  v1::SubmitProfileRequest Profile() {
    v1::SubmitProfileRequest request;
    request.set_worker_id(WorkerId());
    if (Chance(0.15)) {
      for (const v1::ProfileSample& sample : valid_profile_) {
        *request.add_samples() = sample;
      }
      if (Chance(0.5) && request.samples_size() > 0) {
        MutateField(
            *request.mutable_samples(Uniform(0, request.samples_size() - 1)));
      }
      return request;
    }
    const int n = Uniform(0, 20);
    for (int i = 0; i < n; ++i) {
      v1::ProfileSample* sample = request.add_samples();
      if (!valid_profile_.empty()) {
        *sample = valid_profile_[Uniform(0, valid_profile_.size() - 1)];
      }
      if (Chance(0.5)) MutateField(*sample);
    }
    return request;
  }

  // Sets one field of `message`, drawn from all its singular scalar fields
  // (so that a field added to the message is fuzzed too), to a value of its
  // type: edge values, enum numbers one past either end of the enum, or a
  // flipped bool.
  void MutateField(google::protobuf::Message& message) {
    using google::protobuf::FieldDescriptor;
    const google::protobuf::Descriptor& descriptor = *message.GetDescriptor();
    const google::protobuf::Reflection& reflection = *message.GetReflection();
    std::vector<const FieldDescriptor*> fields;
    for (int i = 0; i < descriptor.field_count(); ++i) {
      const FieldDescriptor* field = descriptor.field(i);
      if (!field->is_repeated() &&
          field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) {
        fields.push_back(field);
      }
    }
    ASSERT_FALSE(fields.empty()) << descriptor.full_name();
    const FieldDescriptor* field = fields[Uniform(0, fields.size() - 1)];
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
        reflection.SetInt32(&message, field, Int32());
        break;
      case FieldDescriptor::CPPTYPE_INT64:
        reflection.SetInt64(&message, field, Int64());
        break;
      case FieldDescriptor::CPPTYPE_DOUBLE:
        reflection.SetDouble(&message, field, Double());
        break;
      case FieldDescriptor::CPPTYPE_BOOL:
        reflection.SetBool(&message, field,
                           !reflection.GetBool(message, field));
        break;
      case FieldDescriptor::CPPTYPE_STRING:
        reflection.SetString(&message, field, String());
        break;
      case FieldDescriptor::CPPTYPE_ENUM: {
        const google::protobuf::EnumDescriptor& values = *field->enum_type();
        int lowest = 0;
        int highest = 0;
        for (int i = 0; i < values.value_count(); ++i) {
          lowest = std::min(lowest, values.value(i)->number());
          highest = std::max(highest, values.value(i)->number());
        }
        reflection.SetEnumValue(&message, field,
                                Uniform(lowest - 1, highest + 1));
        break;
      }
      default:
        FAIL() << "no fuzz values for " << field->full_name();
    }
  }

  v1::ReportStepStatsRequest Report(PlannerHandler& handler) {
    v1::ReportStepStatsRequest request;
    request.set_step(Chance(0.85) ? Uniform(0, 30) : Int64());
    request.set_rank(Chance(0.8) ? Uniform(0, options_.cluster.NumGpus() - 1)
                                 : Int32());
    // Mostly the worker that holds the rank.
    request.set_worker_id(WorkerId());
    if (Chance(0.8)) {
      const v1::ListWorkersResponse workers = handler.ListWorkers({}).value();
      for (const v1::WorkerInfo& worker : workers.workers()) {
        if (request.rank() >= worker.first_rank() &&
            request.rank() < worker.first_rank() + worker.num_ranks()) {
          request.set_worker_id(worker.worker_id());
        }
      }
    }
    request.set_step_seconds(Chance(0.9) ? Uniform(1, 1000) * 1e-3 : Double());
    const int n = Uniform(0, 2);
    for (int i = 0; i < n; ++i) {
      v1::MicroBatchStats* stats = request.add_micro_batches();
      stats->set_micro_batch_index(Chance(0.95) ? i : Int32());
      stats->set_compute_seconds(Chance(0.95) ? Uniform(1, 1000) * 1e-4
                                              : Double());
      stats->set_communication_seconds(Chance(0.95) ? 1e-4 : Double());
      stats->set_idle_seconds(Chance(0.95) ? 0 : Double());
      stats->set_peak_memory_bytes(Chance(0.95) ? 1 << 30 : Int64());
      if (Chance(0.1)) MutateField(*stats);
    }
    if (Chance(0.1)) MutateField(request);
    return request;
  }

 private:
  std::mt19937_64 rng_;
  const PlannerHandlerOptions& options_;
  const std::vector<v1::ProfileSample>& valid_profile_;
};

bool Acceptable(const absl::Status& status) {
  if (status.ok()) return true;
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kNotFound:
      return !status.message().empty();
    default:
      return false;
  }
}

// Runs `iterations` random calls from each of `threads` threads (times
// $DCP_FUZZ_SCALE, for longer runs by hand).
// Registrations the handler accepted, shared by the fuzzing threads and by
// the runs before and after a reload. Fuzzed registrations pin a worker id to
// whatever node and ranks they carried first, so after a while almost every
// fresh one is refused; re-sending an accepted one (what a restarted worker
// does) keeps the accepting path covered.
class AcceptedRegistrations {
 public:
  void Add(const v1::RegisterWorkerRequest& request) {
    absl::MutexLock lock(&mu_);
    for (const v1::RegisterWorkerRequest& known : accepted_) {
      if (known.SerializeAsString() == request.SerializeAsString()) return;
    }
    accepted_.push_back(request);
  }
  // An accepted registration picked by `pick` in [0, 1), or none yet.
  std::optional<v1::RegisterWorkerRequest> Pick(double pick) {
    absl::MutexLock lock(&mu_);
    if (accepted_.empty()) return std::nullopt;
    const size_t index = std::min(
        accepted_.size() - 1, static_cast<size_t>(pick * accepted_.size()));
    return accepted_[index];
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::RegisterWorkerRequest> accepted_ ABSL_GUARDED_BY(mu_);
};

void Fuzz(PlannerHandler& handler, const PlannerHandlerOptions& options,
          FakeClock& clock, uint64_t seed, int threads, int iterations,
          AcceptedRegistrations& accepted) {
  if (const char* scale = std::getenv("DCP_FUZZ_SCALE"); scale != nullptr) {
    iterations *= std::max(1, std::atoi(scale));
  }
  const CostModel truth =
      CostModel::CreateDefault(options.model, options.cluster).value();
  std::vector<v1::ProfileSample> valid_profile;
  for (const ProfileSample& sample :
       SyntheticProfile(truth, seed, /*relative_noise=*/0.02)) {
    valid_profile.push_back(ProfileSampleToProto(sample));
  }
  // Successful calls per method: the fuzzing must reach past validation.
  absl::Mutex ok_mu;
  std::map<std::string, int> ok_calls;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      Fuzzer fuzzer(seed * 1000 + t, options, valid_profile);
      for (int i = 0; i < iterations; ++i) {
        // Halfway, complete the world so that planning paths run.
        if (t == 0 && i == iterations / 2) {
          for (int n = 0; n < options.cluster.num_nodes; ++n) {
            v1::RegisterWorkerRequest request;
            request.set_worker_id(absl::StrCat("w", n));
            request.set_node_name(absl::StrCat("node", n));
            request.set_num_ranks(options.cluster.gpus_per_node);
            request.set_backend("nccl");
            request.set_max_cached_groups(kDefaultNcclMaxCachedGroups);
            if (handler.RegisterWorker(request).ok()) accepted.Add(request);
          }
        }
        if (t == 0 && i % 97 == 0) clock.Advance(absl::Seconds(7));
        absl::Status status;
        std::string method;
        switch (fuzzer.Uniform(0, 8)) {
          case 0: {
            method = "RegisterWorker";
            std::optional<v1::RegisterWorkerRequest> request;
            if (fuzzer.Chance(0.5)) {
              request = accepted.Pick(fuzzer.Uniform(0, 999) / 1000.0);
            }
            if (!request.has_value()) request = fuzzer.Register();
            status = handler.RegisterWorker(*request).status();
            if (status.ok()) accepted.Add(*request);
            break;
          }
          case 1:
            method = "SubmitProfile";
            status = handler.SubmitProfile(fuzzer.Profile()).status();
            break;
          case 2: {
            method = "SubmitBatches";
            v1::SubmitBatchesRequest request;
            request.set_worker_id(fuzzer.WorkerId());
            const int n = fuzzer.Uniform(0, 4);
            for (int b = 0; b < n; ++b) {
              *request.add_batches() = fuzzer.StableBatch();
            }
            status = handler.SubmitBatches(request).status();
            break;
          }
          case 3:
          case 4: {
            method = "GetPlan";
            v1::GetPlanRequest request;
            request.set_worker_id(fuzzer.Chance(0.1) ? "" : fuzzer.WorkerId());
            if (fuzzer.Chance(0.6)) {
              if (!fuzzer.Chance(0.03)) {
                *request.mutable_batch() = fuzzer.StableBatch();
              }
              if (fuzzer.Chance(0.1)) request.set_step(fuzzer.Int64());
            } else {
              // By step, mostly of a step whose batch is known.
              const int step = fuzzer.Uniform(0, 30);
              request.set_step(fuzzer.Chance(0.9) ? step : fuzzer.Int64());
              if (fuzzer.Chance(0.5)) {
                request.set_batch_fingerprint(
                    fuzzer.Chance(0.8)
                        ? BatchFingerprint(Fuzzer::StableBatchOf(step))
                        : static_cast<uint64_t>(fuzzer.Int64()));
              }
              if (fuzzer.Chance(0.1)) {
                request.mutable_batch()->set_step(
                    fuzzer.Chance(0.5) ? request.step() : fuzzer.Int64());
              }
            }
            const int64_t planned_step = request.batch().samples().empty()
                                             ? request.step()
                                             : request.batch().step();
            if (fuzzer.Chance(0.5)) {
              status = handler.GetPlan(request).status();
            } else {
              absl::StatusOr<std::shared_ptr<const std::string>> bytes =
                  handler.GetSerializedPlan(request);
              status = bytes.status();
              if (bytes.ok()) {
                v1::GetPlanResponse parsed;
                EXPECT_TRUE(parsed.ParseFromString(**bytes));
                EXPECT_EQ(parsed.plan().step(), planned_step);
              }
            }
            break;
          }
          case 5:
          case 6:
            method = "ReportStepStats";
            status = handler.ReportStepStats(fuzzer.Report(handler)).status();
            break;
          case 7:
            method = "GetClusterModel";
            status = handler.GetClusterModel({}).status();
            break;
          default:
            method = "ListWorkers";
            status = handler.ListWorkers({}).status();
            break;
        }
        if (status.ok()) {
          absl::MutexLock lock(&ok_mu);
          ++ok_calls[method];
        }
        ASSERT_TRUE(Acceptable(status))
            << method << " (thread " << t << ", iteration " << i
            << "): " << status;
      }
    });
  }
  for (std::thread& worker : workers) worker.join();
  for (const char* method :
       {"RegisterWorker", "SubmitProfile", "SubmitBatches", "GetPlan",
        "ReportStepStats", "GetClusterModel", "ListWorkers"}) {
    EXPECT_GT(ok_calls[method], 0) << method;
  }
  for (const auto& [method, count] : ok_calls) {
    std::cout << method << ": " << count << " ok\n";
  }
  EXPECT_TRUE(handler.GetClusterModel({}).ok());
  EXPECT_TRUE(handler.ListWorkers({}).ok());
}

TEST(PlannerHandlerFuzzTest, CpuWorldWithRefitAndBackgroundPlanning) {
  FakeClock clock;
  NoopPlannerMetrics metrics;
  PlannerHandlerOptions options;
  options.model = ModelPreset("tiny").value();
  options.cluster = H200Cluster(/*num_nodes=*/4, /*gpus_per_node=*/1);
  options.online_refit = true;
  options.background_planning_threads = 2;
  options.plan_cache_steps = 8;
  auto handler = PlannerHandler::Create(options, clock, &metrics, nullptr);
  ASSERT_TRUE(handler.ok()) << handler.status();
  AcceptedRegistrations accepted;
  Fuzz(**handler, options, clock, /*seed=*/1, /*threads=*/4,
       /*iterations=*/1500, accepted);
  (*handler)->Shutdown();
}

TEST(PlannerHandlerFuzzTest, GpuWorldWithStateDirectory) {
  const std::string directory = FreshTestDirectory("planner_handler_fuzz_");
  FakeClock clock;
  PlannerHandlerOptions options;
  options.model = ModelPreset("llama3-8b").value();
  options.cluster = H200Cluster(/*num_nodes=*/2, /*gpus_per_node=*/8);
  options.background_planning_threads = 0;
  options.state_dir = directory;
  AcceptedRegistrations accepted;
  {
    auto handler = PlannerHandler::Create(options, clock, nullptr, nullptr);
    ASSERT_TRUE(handler.ok()) << handler.status();
    Fuzz(**handler, options, clock, /*seed=*/2, /*threads=*/2,
         /*iterations=*/1500, accepted);
  }
  // Whatever the fuzzing left behind loads again.
  auto reloaded = PlannerHandler::Create(options, clock, nullptr, nullptr);
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  Fuzz(**reloaded, options, clock, /*seed=*/3, /*threads=*/1,
       /*iterations=*/1000, accepted);
}

}  // namespace
}  // namespace dcp

// Integration tests of the planner server: the real PlannerServer driven
// through the real GrpcPlannerClient over TCP on 127.0.0.1 (port 0), with the
// real PlannerHandler and, for the gRPC edge alone, a fake handler. Over 600
// lines: one server's behaviour over the wire (TLS, tokens, metrics,
// draining, call threads), sharing its start-up fixtures.

#include "planner/service/planner_server.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/free_port.h"
#include "common/test_files.h"
#include "cost_model/cluster_spec.h"
#include "cost_model/cost_model.h"
#include "cost_model/fitting.h"
#include "cost_model/model_spec.h"
#include "dcp/v1/planner_service.pb.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "planner/client/planner_client.h"
#include "planner/client/proto_convert.h"
#include "planner/service/metrics_scrape.h"
#include "planner/service/planner_handler.h"
#include "planner/service/prometheus_metrics.h"
#include "planner/service/step_plan.h"
#include "planner/service/test_batches.h"

namespace dcp {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kNumNodes = 4;
constexpr int kGpusPerNode = 8;

// ---------------------------------------------------------------------------
// Helpers: files, HTTP scraping, health checks.

/// An empty directory under TEST_TMPDIR unique to this call.
std::string FreshDir(absl::string_view name) {
  static int counter = 0;
  return EmptyTestDirectory(absl::StrCat(name, "-", getpid(), "-", ++counter));
}

/// A unary call of `method` ("/dcp.v1.Planner/ListWorkers") with `bytes` as
/// the request and `authorization` metadata unless empty, over a plaintext
/// channel: its status and the serialized response.
std::pair<grpc::Status, std::string> RawCallAndResponse(
    int port, const std::string& method, const std::string& bytes,
    const std::string& authorization = "") {
  std::shared_ptr<grpc::Channel> channel = grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(5));
  if (!authorization.empty()) {
    context.AddMetadata("authorization", authorization);
  }
  grpc::Slice request_slice(bytes);
  grpc::ByteBuffer request(&request_slice, /*nslices=*/1);
  grpc::ByteBuffer response;
  absl::Notification done;
  grpc::Status status;
  stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                 [&](grpc::Status call_status) {
                   status = std::move(call_status);
                   done.Notify();
                 });
  done.WaitForNotification();
  std::string response_bytes;
  std::vector<grpc::Slice> slices;
  if (status.ok() && response.Dump(&slices).ok()) {
    for (const grpc::Slice& slice : slices) {
      response_bytes.append(reinterpret_cast<const char*>(slice.begin()),
                            slice.size());
    }
  }
  return {status, response_bytes};
}

/// RawCallAndResponse's status.
grpc::Status RawCall(int port, const std::string& method,
                     const std::string& bytes,
                     const std::string& authorization = "") {
  return RawCallAndResponse(port, method, bytes, authorization).first;
}

/// grpc.health.v1.Health/Check of `service` ("" for the server) over a
/// plaintext channel: the status and the serialized response.
std::pair<grpc::Status, std::string> HealthCheck(int port,
                                                 const std::string& service) {
  // HealthCheckRequest{service = 1}: tag 0x0a, length, bytes.
  std::string request_bytes;
  if (!service.empty()) {
    request_bytes =
        absl::StrCat("\x0a", std::string(1, service.size()), service);
  }
  return RawCallAndResponse(port, "/grpc.health.v1.Health/Check",
                            request_bytes);
}

/// HealthCheckResponse{status = SERVING}.
const std::string kServing("\x08\x01", 2);

GrpcPlannerClient::Options ClientOptions(int port) {
  GrpcPlannerClient::Options options;
  options.target = absl::StrCat("127.0.0.1:", port);
  options.call_deadline = absl::Seconds(10);
  options.retry.max_attempts = 3;
  options.sleep = [](absl::Duration) {};
  return options;
}

std::unique_ptr<GrpcPlannerClient> MakeClient(
    GrpcPlannerClient::Options options) {
  absl::StatusOr<std::unique_ptr<GrpcPlannerClient>> client =
      GrpcPlannerClient::Create(std::move(options));
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

// ---------------------------------------------------------------------------
// Requests for a 4-node world.

v1::RegisterWorkerRequest RegisterRequest(int node) {
  v1::RegisterWorkerRequest request;
  request.set_worker_id(absl::StrCat("worker-", node));
  request.set_node_name(absl::StrCat("node-", node));
  request.set_num_ranks(kGpusPerNode);
  request.set_gpu_kind("H200");
  request.set_gpu_memory_bytes(141'000'000'000);
  request.set_address(absl::StrCat("10.0.0.", node + 1, ":29500"));
  request.set_libtorch_version("2.1.0");
  request.set_backend("nccl");
  request.set_max_cached_groups(kDefaultNcclMaxCachedGroups);
  return request;
}

/// Step `step`'s batch: 48 sequences of 256..8,447 tokens.
v1::GlobalBatch Batch(int64_t step) {
  std::vector<int64_t> lengths;
  for (int i = 0; i < 48; ++i) {
    lengths.push_back(256 + (i * 7919 + step * 104729) % 8192);
  }
  return BatchOfLengths(step, lengths, /*first_id=*/step * 1000);
}

// Node 0's worker, which submits the batches.
constexpr char kSubmitter[] = "worker-0";

v1::GetPlanRequest PlanRequest(int node, int64_t step) {
  v1::GetPlanRequest request;
  request.set_worker_id(absl::StrCat("worker-", node));
  *request.mutable_batch() = Batch(step);
  return request;
}

PlannerHandlerOptions HandlerOptions(const std::string& state_dir) {
  PlannerHandlerOptions options;
  absl::StatusOr<ModelSpec> model = ModelPreset("tiny");
  EXPECT_TRUE(model.ok()) << model.status();
  options.model = *model;
  options.cluster = H200Cluster(kNumNodes, kGpusPerNode);
  options.state_dir = state_dir;
  options.background_planning_threads = 1;
  return options;
}

/// A server over the real handler, plaintext, on 127.0.0.1:0. Without
/// metrics it stops faster (the exposer takes a second to stop).
absl::StatusOr<std::unique_ptr<PlannerServer>> StartRealServer(
    const std::string& state_dir, std::string token = "", bool metrics = true) {
  PlannerServer::Options options;
  options.handler = HandlerOptions(state_dir);
  options.bearer_token = std::move(token);
  if (!metrics) options.metrics_address = "";
  options.call_threads = 4;
  return PlannerServer::Start(std::move(options), RealClock::Get(),
                              /*log=*/nullptr);
}

// ---------------------------------------------------------------------------
// The real handler, end to end.

TEST(PlannerServerTest, FourWorkersGetIdenticalPlansAlsoAfterRestart) {
  const std::string state_dir = FreshDir("state");
  absl::StatusOr<std::unique_ptr<PlannerServer>> server =
      StartRealServer(state_dir);
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<GrpcPlannerClient> client =
      MakeClient(ClientOptions((*server)->port()));
  ASSERT_NE(client, nullptr);

  for (int node = 0; node < kNumNodes; ++node) {
    absl::StatusOr<v1::RegisterWorkerResponse> registered =
        client->RegisterWorker(RegisterRequest(node));
    ASSERT_TRUE(registered.ok()) << registered.status();
    EXPECT_EQ(registered->first_rank(), node * kGpusPerNode);
    EXPECT_EQ(registered->world_size(), kNumNodes * kGpusPerNode);
    EXPECT_EQ(registered->world_complete(), node == kNumNodes - 1);
  }

  // A profile of a cluster 20% slower than the defaults.
  const PlannerHandlerOptions handler_options = HandlerOptions("");
  ClusterSpec slower = handler_options.cluster;
  slower.gemm_flops_per_second *= 0.8;
  absl::StatusOr<CostModel> truth =
      CostModel::CreateDefault(handler_options.model, slower);
  ASSERT_TRUE(truth.ok()) << truth.status();
  v1::SubmitProfileRequest profile;
  profile.set_worker_id("worker-0");
  for (const ProfileSample& sample :
       SyntheticProfile(*truth, /*seed=*/7, /*relative_noise=*/0.02)) {
    *profile.add_samples() = ProfileSampleToProto(sample);
  }
  absl::StatusOr<v1::SubmitProfileResponse> fitted =
      client->SubmitProfile(profile);
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  EXPECT_GT(fitted->params_version(), 0);

  constexpr int kSteps = 3;
  std::vector<v1::GetPlanResponse> plans;
  for (int step = 0; step < kSteps; ++step) {
    absl::StatusOr<v1::GetPlanResponse> first =
        client->GetPlan(PlanRequest(/*node=*/0, step));
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_EQ(first->plan().step(), step);
    EXPECT_FALSE(first->using_default_params());
    for (int node = 1; node < kNumNodes; ++node) {
      absl::StatusOr<v1::GetPlanResponse> other =
          client->GetPlan(PlanRequest(node, step));
      ASSERT_TRUE(other.ok()) << other.status();
      EXPECT_TRUE(MessageDifferencer::Equals(*first, *other))
          << "step " << step << ", node " << node;
    }
    plans.push_back(*first);
  }

  // Metrics: one plan per step however many workers fetched it.
  const std::string metrics = HttpGet((*server)->metrics_port(), "/metrics");
  EXPECT_EQ(MetricValue(metrics, metric_names::kRegisteredWorkers), 4)
      << metrics;
  EXPECT_EQ(MetricValue(metrics, metric_names::kPlansTotal), kSteps) << metrics;
  EXPECT_EQ(MetricValue(metrics, metric_names::kRpcRequestsTotal,
                        {{"method", "GetPlan"}, {"code", "OK"}}),
            kSteps * kNumNodes)
      << metrics;
  EXPECT_EQ(MetricValue(metrics, "dcp_rpc_latency_seconds_count",
                        {{"method", "RegisterWorker"}}),
            kNumNodes)
      << metrics;
  EXPECT_GT(
      MetricValue(metrics, metric_names::kPredictedStepSeconds).value_or(0), 0)
      << metrics;
  // The shape of the last plan (step kSteps - 1, planned last).
  std::map<int, int> groups_by_sp_size;
  int micro_batches = 0;
  int checkpointed_sum = 0;
  int max_checkpointed = 0;
  for (const v1::Group& group : plans.back().plan().groups()) {
    ++groups_by_sp_size[group.sp_size()];
    for (const v1::MicroBatch& micro_batch : group.micro_batches()) {
      ++micro_batches;
      checkpointed_sum += micro_batch.checkpointed_layers();
      max_checkpointed =
          std::max(max_checkpointed, micro_batch.checkpointed_layers());
    }
  }
  ASSERT_GT(micro_batches, 0);
  for (const auto& [size, count] : groups_by_sp_size) {
    EXPECT_EQ(MetricValue(metrics, metric_names::kPlanSpGroups,
                          {{"sp_size", absl::StrCat(size)}}),
              count)
        << "SP size " << size << "\n"
        << metrics;
  }
  EXPECT_EQ(MetricValue(metrics, metric_names::kPlanMicroBatches),
            micro_batches)
      << metrics;
  EXPECT_NEAR(
      MetricValue(metrics, metric_names::kPlanRecomputedLayers).value_or(-1),
      static_cast<double>(checkpointed_sum) / micro_batches, 1e-9)
      << metrics;
  EXPECT_EQ(MetricValue(metrics, metric_names::kPlanMaxCheckpointedLayers),
            max_checkpointed)
      << metrics;

  // A bad request is answered once, not retried.
  const int64_t attempts_before = client->attempts();
  v1::RegisterWorkerRequest bad = RegisterRequest(0);
  bad.set_num_ranks(0);
  absl::StatusOr<v1::RegisterWorkerResponse> refused =
      client->RegisterWorker(bad);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument)
      << refused.status();
  EXPECT_EQ(client->attempts(), attempts_before + 1);

  // Restart over the same state directory: the same plans.
  (*server)->Shutdown(absl::Seconds(1));
  server->reset();
  absl::StatusOr<std::unique_ptr<PlannerServer>> restarted =
      StartRealServer(state_dir, /*token=*/"", /*metrics=*/false);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  std::unique_ptr<GrpcPlannerClient> restarted_client =
      MakeClient(ClientOptions((*restarted)->port()));
  ASSERT_NE(restarted_client, nullptr);
  for (int step = 0; step < kSteps; ++step) {
    for (int node = 0; node < kNumNodes; ++node) {
      absl::StatusOr<v1::GetPlanResponse> again =
          restarted_client->GetPlan(PlanRequest(node, step));
      ASSERT_TRUE(again.ok()) << again.status();
      EXPECT_TRUE(MessageDifferencer::Equals(plans[step], *again))
          << "step " << step << ", node " << node << " after restart";
    }
  }
  (*restarted)->Shutdown(absl::Seconds(1));
}

TEST(PlannerServerTest, HealthServiceServes) {
  absl::StatusOr<std::unique_ptr<PlannerServer>> server =
      StartRealServer("", /*token=*/"", /*metrics=*/false);
  ASSERT_TRUE(server.ok()) << server.status();
  for (const std::string service : {"", "dcp.v1.Planner"}) {
    const auto [status, response] = HealthCheck((*server)->port(), service);
    ASSERT_TRUE(status.ok())
        << "'" << service << "': " << status.error_message();
    EXPECT_EQ(response, kServing) << "'" << service << "'";
  }
}

TEST(PlannerServerTest, BearerTokenIsRequired) {
  absl::StatusOr<std::unique_ptr<PlannerServer>> server =
      StartRealServer("", /*token=*/"s3cret-token");
  ASSERT_TRUE(server.ok()) << server.status();

  std::unique_ptr<GrpcPlannerClient> anonymous =
      MakeClient(ClientOptions((*server)->port()));
  absl::StatusOr<v1::ListWorkersResponse> refused =
      anonymous->ListWorkers(v1::ListWorkersRequest());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnauthenticated)
      << refused.status();
  EXPECT_EQ(anonymous->attempts(), 1);

  GrpcPlannerClient::Options wrong_options = ClientOptions((*server)->port());
  wrong_options.bearer_token = "s3cret-tokem";
  std::unique_ptr<GrpcPlannerClient> wrong = MakeClient(wrong_options);
  EXPECT_EQ(wrong->ListWorkers(v1::ListWorkersRequest()).status().code(),
            absl::StatusCode::kUnauthenticated);
  wrong_options.bearer_token = "s3cret-token-and-more";
  wrong = MakeClient(wrong_options);
  EXPECT_EQ(wrong->ListWorkers(v1::ListWorkersRequest()).status().code(),
            absl::StatusCode::kUnauthenticated);

  GrpcPlannerClient::Options right_options = ClientOptions((*server)->port());
  right_options.bearer_token = "s3cret-token";
  std::unique_ptr<GrpcPlannerClient> right = MakeClient(right_options);
  absl::StatusOr<v1::ListWorkersResponse> listed =
      right->ListWorkers(v1::ListWorkersRequest());
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->world_size(), kNumNodes * kGpusPerNode);

  // The health service needs no token (Kubernetes probes carry none).
  EXPECT_EQ(HealthCheck((*server)->port(), "").second, kServing);

  const std::string metrics = HttpGet((*server)->metrics_port(), "/metrics");
  EXPECT_EQ(
      MetricValue(metrics, metric_names::kRpcRequestsTotal,
                  {{"method", "ListWorkers"}, {"code", "UNAUTHENTICATED"}}),
      3)
      << metrics;
}

TEST(PlannerServerTest,
     MalformedRequestBytesAreInvalidArgumentNamingTheMethod) {
  absl::StatusOr<std::unique_ptr<PlannerServer>> server =
      StartRealServer("", /*token=*/"", /*metrics=*/false);
  ASSERT_TRUE(server.ok()) << server.status();
  // A field 1 of wire type 7 (no such type): no message parses from it.
  const std::string malformed("\x0f\xff\xff", 3);
  for (const std::string method :
       {"RegisterWorker", "SubmitProfile", "SubmitBatches", "GetPlan",
        "ReportStepStats", "GetClusterModel", "ListWorkers"}) {
    const grpc::Status status = RawCall(
        (*server)->port(), absl::StrCat("/dcp.v1.Planner/", method), malformed);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << method << ": " << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(method)) << method;
    EXPECT_THAT(status.error_message(), HasSubstr("Request")) << method;
  }
  // Well-formed bytes still work (an empty message parses).
  EXPECT_TRUE(
      RawCall((*server)->port(), "/dcp.v1.Planner/ListWorkers", "").ok());
}

TEST(PlannerServerTest, BearerSchemeIsCaseInsensitive) {
  absl::StatusOr<std::unique_ptr<PlannerServer>> server =
      StartRealServer("", /*token=*/"s3cret-token", /*metrics=*/false);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string method = "/dcp.v1.Planner/ListWorkers";
  for (const std::string authorization :
       {"Bearer s3cret-token", "bearer s3cret-token", "BEARER s3cret-token",
        "bEaReR s3cret-token"}) {
    const grpc::Status status =
        RawCall((*server)->port(), method, "", authorization);
    EXPECT_TRUE(status.ok()) << authorization << ": " << status.error_message();
  }
  // The token itself is compared exactly.
  for (const std::string authorization :
       {"Bearer S3CRET-TOKEN", "Basic s3cret-token", "Bearers3cret-token",
        "s3cret-token", "Bearer"}) {
    EXPECT_EQ(
        RawCall((*server)->port(), method, "", authorization).error_code(),
        grpc::StatusCode::UNAUTHENTICATED)
        << authorization;
  }
}

TEST(PlannerServerTest, ShutdownDoesNotWaitForTheBackgroundPlanInFlight) {
  // The planner core blocks until released (shared: the abandoned planning
  // thread may outlive the test's locals).
  auto entered = std::make_shared<absl::Notification>();
  auto release = std::make_shared<absl::Notification>();
  PlannerServer::Options options;
  options.handler = HandlerOptions("");
  options.handler.make_step_plan =
      [entered, release](
          const v1::GlobalBatch& batch, const ParamsVersion& params,
          const PlannerOptions& planner_options, int world_size, const Clock&) {
        if (!entered->HasBeenNotified()) entered->Notify();
        release->WaitForNotification();
        return MakeStepPlan(batch, params, planner_options, world_size,
                            RealClock::Get());
      };
  options.metrics_address = "";
  absl::StatusOr<std::unique_ptr<PlannerServer>> server = PlannerServer::Start(
      std::move(options), RealClock::Get(), /*log=*/nullptr);
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<GrpcPlannerClient> client =
      MakeClient(ClientOptions((*server)->port()));
  for (int node = 0; node < kNumNodes; ++node) {
    ASSERT_TRUE(client->RegisterWorker(RegisterRequest(node)).ok());
  }
  v1::SubmitBatchesRequest submit;
  submit.set_worker_id(kSubmitter);
  *submit.add_batches() = Batch(0);
  ASSERT_TRUE(client->SubmitBatches(submit).ok());
  entered->WaitForNotification();
  // A GetPlan that waits for the step's plan as the drain begins.
  std::unique_ptr<GrpcPlannerClient> waiting =
      MakeClient(ClientOptions((*server)->port()));
  absl::StatusOr<v1::GetPlanResponse> plan;
  std::thread caller([&] {
    v1::GetPlanRequest by_step;
    by_step.set_worker_id("worker-0");
    by_step.set_step(0);
    plan = waiting->GetPlan(by_step);
  });

  absl::Notification shut_down;
  std::thread stopper([&] {
    (*server)->Shutdown(absl::Milliseconds(200));
    shut_down.Notify();
  });
  // (A bound only to fail instead of hanging; nothing is timed.)
  EXPECT_TRUE(shut_down.WaitForNotificationWithTimeout(absl::Seconds(30)))
      << "Shutdown waited for the plan in flight";
  EXPECT_FALSE(release->HasBeenNotified());
  release->Notify();
  stopper.join();
  caller.join();
  EXPECT_FALSE(plan.ok());
}

TEST(PlannerServerTest, RegistrationsRecordWhoMadeThem) {
  const std::string state_dir = FreshDir("registered_by");
  {
    absl::StatusOr<std::unique_ptr<PlannerServer>> server =
        StartRealServer(state_dir, /*token=*/"", /*metrics=*/false);
    ASSERT_TRUE(server.ok()) << server.status();
    std::unique_ptr<GrpcPlannerClient> client =
        MakeClient(ClientOptions((*server)->port()));
    v1::RegisterWorkerRequest request = RegisterRequest(0);
    request.set_registered_by("someone else");  // replaced by the planner
    ASSERT_TRUE(client->RegisterWorker(request).ok());
    absl::StatusOr<v1::ListWorkersResponse> workers =
        client->ListWorkers(v1::ListWorkersRequest());
    ASSERT_TRUE(workers.ok()) << workers.status();
    ASSERT_EQ(workers->workers_size(), 1);
    EXPECT_EQ(workers->workers(0).registered_by(), "ipv4:127.0.0.1");
  }
  // Kept across a restart.
  absl::StatusOr<std::unique_ptr<PlannerServer>> restarted =
      StartRealServer(state_dir, /*token=*/"", /*metrics=*/false);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  absl::StatusOr<v1::ListWorkersResponse> workers =
      MakeClient(ClientOptions((*restarted)->port()))
          ->ListWorkers(v1::ListWorkersRequest());
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_EQ(workers->workers_size(), 1);
  EXPECT_EQ(workers->workers(0).registered_by(), "ipv4:127.0.0.1");
}

TEST(PlannerServerTest, AddressesInUseAreRefused) {
  absl::StatusOr<std::unique_ptr<PlannerServer>> first = StartRealServer("");
  ASSERT_TRUE(first.ok()) << first.status();

  PlannerServer::Options same_port;
  same_port.handler = HandlerOptions("");
  same_port.listen_address = absl::StrCat("127.0.0.1:", (*first)->port());
  absl::StatusOr<std::unique_ptr<PlannerServer>> second = PlannerServer::Start(
      std::move(same_port), RealClock::Get(), /*log=*/nullptr);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(),
              HasSubstr(absl::StrCat("127.0.0.1:", (*first)->port())));

  PlannerServer::Options same_metrics_port;
  same_metrics_port.handler = HandlerOptions("");
  same_metrics_port.metrics_address =
      absl::StrCat("127.0.0.1:", (*first)->metrics_port());
  second = PlannerServer::Start(std::move(same_metrics_port), RealClock::Get(),
                                /*log=*/nullptr);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(),
              HasSubstr(absl::StrCat("127.0.0.1:", (*first)->metrics_port())));
}

// ---------------------------------------------------------------------------
// TLS, with certificates made by the openssl command line.

class PlannerServerTlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::system("command -v openssl > /dev/null 2>&1") != 0) return;
    dir_ = new std::string(FreshDir("tls"));
    const std::string script = absl::StrCat(
        "set -e; cd '", *dir_, "'\n",
        "key() { openssl genpkey -algorithm EC -pkeyopt "
        "ec_paramgen_curve:P-256 -out \"$1\"; }\n",
        "key ca.key; key server.key; key client.key\n",
        "openssl req -x509 -new -key ca.key -out ca.pem -days 2 "
        "-subj /CN=dcp-test-ca\n",
        "key other-ca.key\n",
        "openssl req -x509 -new -key other-ca.key -out other-ca.pem -days 2 "
        "-subj /CN=another-ca\n",
        "openssl req -new -key server.key -out server.csr -subj "
        "/CN=localhost\n",
        "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n"
        "extendedKeyUsage=serverAuth\\n' > server.ext\n",
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key "
        "-CAcreateserial -out server.pem -days 2 -extfile server.ext\n",
        // Expired a day before it was made (OpenSSL 3 takes -days -1).
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key "
        "-CAcreateserial -out expired.pem -days -1 -extfile server.ext\n",
        "openssl req -new -key client.key -out client.csr -subj /CN=worker-0\n",
        "printf 'extendedKeyUsage=clientAuth\\n' > client.ext\n",
        "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key "
        "-CAcreateserial -out client.pem -days 2 -extfile client.ext\n");
    const std::string script_path = *dir_ + "/make_certs.sh";
    WriteTestFile(script_path, script);
    certificates_made_ =
        std::system(absl::StrCat("bash '", script_path, "' > '", *dir_,
                                 "/openssl.log' 2>&1")
                        .c_str()) == 0;
  }

  void SetUp() override {
    if (dir_ == nullptr) {
      GTEST_SKIP() << "no openssl command line to make test certificates";
    }
    ASSERT_TRUE(certificates_made_)
        << "openssl failed; see " << *dir_ << "/openssl.log";
  }

  static std::string File(absl::string_view name) {
    return absl::StrCat(*dir_, "/", name);
  }

  static absl::StatusOr<std::unique_ptr<PlannerServer>> StartTlsServer(
      bool mutual) {
    PlannerServer::Options options;
    options.handler = HandlerOptions("");
    options.metrics_address = "";
    options.tls.cert_file = File("server.pem");
    options.tls.key_file = File("server.key");
    if (mutual) options.tls.client_ca_file = File("ca.pem");
    options.call_threads = 2;
    return PlannerServer::Start(std::move(options), RealClock::Get(),
                                /*log=*/nullptr);
  }

  static GrpcPlannerClient::Options TlsClientOptions(int port,
                                                     bool client_cert) {
    GrpcPlannerClient::Options options = ClientOptions(port);
    options.retry.max_attempts = 1;
    options.call_deadline = absl::Seconds(5);
    options.tls.root_ca_file = File("ca.pem");
    if (client_cert) {
      options.tls.cert_file = File("client.pem");
      options.tls.key_file = File("client.key");
    }
    return options;
  }

  static std::string* dir_;
  static bool certificates_made_;
};

std::string* PlannerServerTlsTest::dir_ = nullptr;
bool PlannerServerTlsTest::certificates_made_ = false;

TEST_F(PlannerServerTlsTest, ServerTls) {
  absl::StatusOr<std::unique_ptr<PlannerServer>> server =
      StartTlsServer(/*mutual=*/false);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ((*server)->metrics_port(), 0);

  GrpcPlannerClient::Options plaintext = ClientOptions((*server)->port());
  plaintext.retry.max_attempts = 1;
  plaintext.call_deadline = absl::Seconds(5);
  EXPECT_FALSE(
      MakeClient(plaintext)->ListWorkers(v1::ListWorkersRequest()).ok());

  absl::StatusOr<v1::ListWorkersResponse> listed =
      MakeClient(TlsClientOptions((*server)->port(), /*client_cert=*/false))
          ->ListWorkers(v1::ListWorkersRequest());
  EXPECT_TRUE(listed.ok()) << listed.status();

  // By name, with the certificate's DNS name.
  GrpcPlannerClient::Options by_name =
      TlsClientOptions((*server)->port(), /*client_cert=*/false);
  by_name.target = absl::StrCat("localhost:", (*server)->port());
  listed = MakeClient(by_name)->ListWorkers(v1::ListWorkersRequest());
  EXPECT_TRUE(listed.ok()) << listed.status();
}

TEST_F(PlannerServerTlsTest, MutualTls) {
  absl::StatusOr<std::unique_ptr<PlannerServer>> server =
      StartTlsServer(/*mutual=*/true);
  ASSERT_TRUE(server.ok()) << server.status();

  absl::StatusOr<v1::ListWorkersResponse> refused =
      MakeClient(TlsClientOptions((*server)->port(), /*client_cert=*/false))
          ->ListWorkers(v1::ListWorkersRequest());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable)
      << refused.status();

  absl::StatusOr<v1::ListWorkersResponse> listed =
      MakeClient(TlsClientOptions((*server)->port(), /*client_cert=*/true))
          ->ListWorkers(v1::ListWorkersRequest());
  EXPECT_TRUE(listed.ok()) << listed.status();
}

// TLS misconfigurations are configuration errors, not outages: the client
// says so after one attempt (FAILED_PRECONDITION naming TLS and the fix)
// instead of retrying them as an unavailable planner for its tolerance.
TEST_F(PlannerServerTlsTest, TlsMisconfigurationsAreNotRetriedAsAnOutage) {
  absl::StatusOr<std::unique_ptr<PlannerServer>> server =
      StartTlsServer(/*mutual=*/false);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  const auto call = [](GrpcPlannerClient::Options options) {
    options.retry.max_attempts = 3;
    options.retry.outage_tolerance = absl::Hours(1);
    std::unique_ptr<GrpcPlannerClient> client = MakeClient(std::move(options));
    const absl::Status status =
        client->ListWorkers(v1::ListWorkersRequest()).status();
    return std::make_pair(status, client->attempts());
  };

  PlannerServer::Options expired_options;
  expired_options.handler = HandlerOptions("");
  expired_options.metrics_address = "";
  expired_options.tls.cert_file = File("expired.pem");
  expired_options.tls.key_file = File("server.key");
  expired_options.call_threads = 2;
  absl::StatusOr<std::unique_ptr<PlannerServer>> expired_server =
      PlannerServer::Start(std::move(expired_options), RealClock::Get(),
                           /*log=*/nullptr);
  ASSERT_TRUE(expired_server.ok()) << expired_server.status();
  GrpcPlannerClient::Options expired =
      TlsClientOptions((*expired_server)->port(), false);

  GrpcPlannerClient::Options wrong_ca = TlsClientOptions(port, false);
  wrong_ca.tls.root_ca_file = File("other-ca.pem");
  GrpcPlannerClient::Options wrong_name = TlsClientOptions(port, false);
  wrong_name.tls.server_name_override = "planner.wrong.example";
  for (const auto& [what, options] : {std::make_pair("wrong CA", wrong_ca),
                                      std::make_pair("wrong name", wrong_name),
                                      std::make_pair("expired", expired)}) {
    const auto [status, attempts] = call(options);
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition)
        << what << ": " << status;
    EXPECT_THAT(status.message(),
                HasSubstr("TLS handshake with the planner at 127.0.0.1:"))
        << what;
    EXPECT_EQ(attempts, 1) << what;
  }
}

TEST_F(PlannerServerTlsTest, ATlsClientOfAPlaintextPlannerIsToldSo) {
  PlannerServer::Options options;
  options.handler = HandlerOptions("");
  options.metrics_address = "";
  options.call_threads = 2;
  absl::StatusOr<std::unique_ptr<PlannerServer>> server = PlannerServer::Start(
      std::move(options), RealClock::Get(), /*log=*/nullptr);
  ASSERT_TRUE(server.ok()) << server.status();
  GrpcPlannerClient::Options tls = TlsClientOptions((*server)->port(), false);
  tls.retry.max_attempts = 3;
  tls.retry.outage_tolerance = absl::Hours(1);
  std::unique_ptr<GrpcPlannerClient> client = MakeClient(tls);
  const absl::Status status =
      client->ListWorkers(v1::ListWorkersRequest()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_EQ(client->attempts(), 1);
}

TEST_F(PlannerServerTlsTest, AGarbageCertificateIsNamedNotAPortInUse) {
  const std::string garbage = File("garbage.pem");
  WriteTestFile(garbage, "this is not a certificate\n");
  PlannerServer::Options options;
  options.handler = HandlerOptions("");
  options.tls.cert_file = garbage;
  options.tls.key_file = File("server.key");
  absl::StatusOr<std::unique_ptr<PlannerServer>> server = PlannerServer::Start(
      std::move(options), RealClock::Get(), /*log=*/nullptr);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(server.status().message(),
              AllOf(HasSubstr("garbage.pem' holds no PEM certificate"),
                    Not(HasSubstr("port is in use"))));
  // Another certificate's key.
  PlannerServer::Options mismatched;
  mismatched.handler = HandlerOptions("");
  mismatched.tls.cert_file = File("server.pem");
  mismatched.tls.key_file = File("client.key");
  server = PlannerServer::Start(std::move(mismatched), RealClock::Get(),
                                /*log=*/nullptr);
  EXPECT_THAT(server.status().message(),
              HasSubstr("client.key' does not belong to the certificate"));
}

TEST_F(PlannerServerTlsTest, MissingCertificateFileIsNamed) {
  PlannerServer::Options options;
  options.handler = HandlerOptions("");
  options.tls.cert_file = File("absent.pem");
  options.tls.key_file = File("server.key");
  absl::StatusOr<std::unique_ptr<PlannerServer>> server = PlannerServer::Start(
      std::move(options), RealClock::Get(), /*log=*/nullptr);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(server.status().message(), HasSubstr("absent.pem"));
}

// ---------------------------------------------------------------------------
// The gRPC edge alone, over a fake handler.

/// Answers every method at once except GetPlan, which waits for `gate` when
/// set. Counts plans per step like the real handler. Thread-safe.
class FakePlannerHandler final : public PlannerHandler {
 public:
  explicit FakePlannerHandler(PlannerMetrics* metrics) : metrics_(metrics) {}

  absl::StatusOr<v1::RegisterWorkerResponse> RegisterWorker(
      const v1::RegisterWorkerRequest& request) override {
    if (request.worker_id().empty()) {
      return absl::InvalidArgumentError(
          "worker_id is empty; give each worker a stable id");
    }
    v1::RegisterWorkerResponse response;
    response.set_num_ranks(request.num_ranks());
    return response;
  }
  absl::StatusOr<v1::SubmitProfileResponse> SubmitProfile(
      const v1::SubmitProfileRequest&) override {
    return v1::SubmitProfileResponse();
  }
  absl::StatusOr<v1::SubmitBatchesResponse> SubmitBatches(
      const v1::SubmitBatchesRequest& request) override {
    v1::SubmitBatchesResponse response;
    response.set_accepted(request.batches_size());
    return response;
  }
  absl::StatusOr<v1::GetPlanResponse> GetPlan(
      const v1::GetPlanRequest& request) override {
    absl::StatusOr<std::shared_ptr<const std::string>> bytes =
        GetSerializedPlan(request);
    if (!bytes.ok()) return bytes.status();
    v1::GetPlanResponse response;
    response.ParseFromString(**bytes);
    return response;
  }
  absl::StatusOr<std::shared_ptr<const std::string>> GetSerializedPlan(
      const v1::GetPlanRequest& request) override {
    if (gate != nullptr) {
      if (calls_gated.fetch_add(1) == 0) entered.Notify();
      gate->WaitForNotification();
    }
    absl::MutexLock lock(&mutex_);
    std::shared_ptr<const std::string>& cached = plans_[request.batch().step()];
    if (cached == nullptr) {
      v1::GetPlanResponse response;
      response.mutable_plan()->set_step(request.batch().step());
      response.mutable_plan()->set_strategy("fake");
      response.set_params_version(request.batch().samples_size());
      cached =
          std::make_shared<const std::string>(response.SerializeAsString());
      metrics_->PlanComputed(/*latency_seconds=*/0.001,
                             /*predicted_step_seconds=*/1.5);
      // Even steps: two SP-1 groups and one SP-2 group, 4 micro-batches
      // checkpointing 0, 0, 0 and 2 layers; odd steps: one SP-4 group.
      if (request.batch().step() % 2 == 0) {
        metrics_->PlanShape({{1, 2}, {2, 1}}, /*micro_batches=*/4,
                            /*mean_checkpointed_layers=*/0.5,
                            /*max_checkpointed_layers=*/2);
      } else {
        metrics_->PlanShape({{4, 1}}, /*micro_batches=*/1,
                            /*mean_checkpointed_layers=*/0,
                            /*max_checkpointed_layers=*/0);
      }
    }
    return cached;
  }
  absl::StatusOr<v1::ReportStepStatsResponse> ReportStepStats(
      const v1::ReportStepStatsRequest&) override {
    return v1::ReportStepStatsResponse();
  }
  absl::StatusOr<v1::GetClusterModelResponse> GetClusterModel(
      const v1::GetClusterModelRequest&) override {
    return absl::FailedPreconditionError("no model in the fake");
  }
  absl::StatusOr<v1::ListWorkersResponse> ListWorkers(
      const v1::ListWorkersRequest&) override {
    return v1::ListWorkersResponse();
  }
  void Shutdown() override { shut_down.Notify(); }

  /// Set before calls start.
  absl::Notification* gate = nullptr;
  absl::Notification entered;
  /// GetPlan calls that reached `gate`.
  std::atomic<int> calls_gated{0};
  absl::Notification shut_down;

 private:
  PlannerMetrics* const metrics_;
  absl::Mutex mutex_;
  absl::flat_hash_map<int64_t, std::shared_ptr<const std::string>> plans_
      ABSL_GUARDED_BY(mutex_);
};

/// A real server over a FakePlannerHandler on a free loopback port, and a
/// client of it.
class GrpcPlannerServiceTest : public ::testing::Test {
 protected:
  /// Starts the server, with a metrics endpoint if `metrics` and GetPlan
  /// calls held until `gate` is notified if one is given, and the client.
  void Start(bool metrics, absl::Notification* gate = nullptr) {
    PlannerServer::Options options;
    options.call_threads = 2;
    options.plan_call_threads = 2;
    if (!metrics) options.metrics_address = "";
    absl::StatusOr<std::unique_ptr<PlannerServer>> started =
        PlannerServer::Start(
            std::move(options), RealClock::Get(), /*log=*/nullptr,
            [this, gate](PlannerHandlerOptions, const Clock&,
                         PlannerMetrics* metrics,
                         std::function<void(const std::string&)>)
                -> absl::StatusOr<std::unique_ptr<PlannerHandler>> {
              auto handler = std::make_unique<FakePlannerHandler>(metrics);
              handler->gate = gate;
              fake = handler.get();
              return handler;
            });
    ASSERT_TRUE(started.ok()) << started.status();
    server = *std::move(started);
    client = MakeClient(ClientOptions(server->port()));
  }

  FakePlannerHandler* fake = nullptr;
  std::unique_ptr<PlannerServer> server;
  std::unique_ptr<GrpcPlannerClient> client;
};

TEST_F(GrpcPlannerServiceTest, ServesSharedPlanBytesAndCountsRpcs) {
  ASSERT_NO_FATAL_FAILURE(Start(/*metrics=*/true));

  const auto scrape = [&] {
    return HttpGet(server->metrics_port(), "/metrics");
  };
  const auto get_plan_ok = [&](const std::string& metrics) {
    return MetricValue(metrics, metric_names::kRpcRequestsTotal,
                       {{"method", "GetPlan"}, {"code", "OK"}})
        .value_or(0);
  };
  EXPECT_EQ(get_plan_ok(scrape()), 0);
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<v1::GetPlanResponse> plan =
        client->GetPlan(PlanRequest(/*node=*/i, /*step=*/5));
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->plan().step(), 5);
    EXPECT_EQ(plan->plan().strategy(), "fake");
    EXPECT_EQ(plan->params_version(), 48);
  }
  std::string metrics = scrape();
  EXPECT_EQ(get_plan_ok(metrics), 3) << metrics;
  EXPECT_EQ(MetricValue(metrics, metric_names::kPlansTotal), 1) << metrics;
  EXPECT_EQ(MetricValue(metrics, "dcp_rpc_latency_seconds_count",
                        {{"method", "GetPlan"}}),
            3)
      << metrics;

  // Handler errors keep their code and message, and are counted by code.
  absl::StatusOr<v1::GetClusterModelResponse> model =
      client->GetClusterModel(v1::GetClusterModelRequest());
  EXPECT_EQ(model.status(),
            absl::FailedPreconditionError("no model in the fake"));
  metrics = scrape();
  EXPECT_EQ(MetricValue(metrics, metric_names::kRpcRequestsTotal,
                        {{"method", "GetClusterModel"},
                         {"code", "FAILED_PRECONDITION"}}),
            1)
      << metrics;
}

TEST_F(GrpcPlannerServiceTest, ClientGetsThePlanAsTheServedBytes) {
  ASSERT_NO_FATAL_FAILURE(Start(/*metrics=*/false));

  const v1::GetPlanRequest request = PlanRequest(/*node=*/0, /*step=*/3);
  absl::StatusOr<std::string> bytes = client->GetSerializedPlan(request);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<std::shared_ptr<const std::string>> served =
      fake->GetSerializedPlan(request);
  ASSERT_TRUE(served.ok());
  EXPECT_EQ(*bytes, **served);
  v1::GetPlanResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(*bytes));
  absl::StatusOr<v1::GetPlanResponse> decoded = client->GetPlan(request);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(parsed.SerializeAsString(), decoded->SerializeAsString());
  EXPECT_EQ(parsed.plan().step(), 3);
  EXPECT_EQ(parsed.plan().strategy(), "fake");

  // No planner there: retried, then UNAVAILABLE naming it, as for GetPlan.
  const int port = *PickFreePort("127.0.0.1");  // Nothing listens there.
  std::unique_ptr<GrpcPlannerClient> nowhere = MakeClient(ClientOptions(port));
  absl::StatusOr<std::string> unreachable = nowhere->GetSerializedPlan(request);
  EXPECT_EQ(unreachable.status().code(), absl::StatusCode::kUnavailable)
      << unreachable.status();
  EXPECT_THAT(std::string(unreachable.status().message()),
              HasSubstr(absl::StrCat("planner at 127.0.0.1:", port,
                                     " unavailable after 3 attempts")));
}

TEST_F(GrpcPlannerServiceTest, ExportsTheShapeOfTheLastPlan) {
  ASSERT_NO_FATAL_FAILURE(Start(/*metrics=*/true));
  const auto sp_groups = [](const std::string& metrics, int size) {
    return MetricValue(metrics, metric_names::kPlanSpGroups,
                       {{"sp_size", absl::StrCat(size)}});
  };
  // The plan's micro-batches, mean and most checkpointed layers.
  const auto expect_micro_batches = [](const std::string& metrics,
                                       double micro_batches,
                                       double recomputed_layers,
                                       double max_checkpointed_layers) {
    EXPECT_EQ(MetricValue(metrics, metric_names::kPlanMicroBatches),
              micro_batches)
        << metrics;
    EXPECT_EQ(MetricValue(metrics, metric_names::kPlanRecomputedLayers),
              recomputed_layers)
        << metrics;
    EXPECT_EQ(MetricValue(metrics, metric_names::kPlanMaxCheckpointedLayers),
              max_checkpointed_layers)
        << metrics;
  };

  ASSERT_TRUE(client->GetPlan(PlanRequest(/*node=*/0, /*step=*/0)).ok());
  std::string metrics = HttpGet(server->metrics_port(), "/metrics");
  EXPECT_EQ(sp_groups(metrics, 1), 2) << metrics;
  EXPECT_EQ(sp_groups(metrics, 2), 1) << metrics;
  EXPECT_FALSE(sp_groups(metrics, 4).has_value()) << metrics;
  expect_micro_batches(metrics, /*micro_batches=*/4, /*recomputed_layers=*/0.5,
                       /*max_checkpointed_layers=*/2);

  // SP sizes the last plan does not use drop to 0.
  ASSERT_TRUE(client->GetPlan(PlanRequest(/*node=*/0, /*step=*/1)).ok());
  metrics = HttpGet(server->metrics_port(), "/metrics");
  EXPECT_EQ(sp_groups(metrics, 1), 0) << metrics;
  EXPECT_EQ(sp_groups(metrics, 2), 0) << metrics;
  EXPECT_EQ(sp_groups(metrics, 4), 1) << metrics;
  expect_micro_batches(metrics, /*micro_batches=*/1, /*recomputed_layers=*/0,
                       /*max_checkpointed_layers=*/0);
}

TEST_F(GrpcPlannerServiceTest, InvalidArgumentIsNotRetried) {
  ASSERT_NO_FATAL_FAILURE(Start(/*metrics=*/false));
  absl::StatusOr<v1::RegisterWorkerResponse> refused =
      client->RegisterWorker(v1::RegisterWorkerRequest());
  EXPECT_EQ(refused.status(),
            absl::InvalidArgumentError(
                "worker_id is empty; give each worker a stable id"));
  EXPECT_EQ(client->attempts(), 1);
}

TEST_F(GrpcPlannerServiceTest, ShutdownDrainsCallsInFlight) {
  absl::Notification gate;
  ASSERT_NO_FATAL_FAILURE(Start(/*metrics=*/false, &gate));

  absl::StatusOr<v1::GetPlanResponse> plan;
  std::thread caller([&] { plan = client->GetPlan(PlanRequest(0, 1)); });
  fake->entered.WaitForNotification();
  std::thread stopper([&] { server->Shutdown(absl::Seconds(10)); });
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(fake->shut_down.HasBeenNotified());
  gate.Notify();
  caller.join();
  stopper.join();
  EXPECT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(fake->shut_down.HasBeenNotified());
  server->Wait();  // Returns: shut down.
}

TEST_F(GrpcPlannerServiceTest, WaitingGetPlansDoNotHoldRegistrationThreads) {
  absl::Notification gate;
  ASSERT_NO_FATAL_FAILURE(Start(/*metrics=*/false, &gate));
  // More waiting GetPlans than there are threads of either pool (2 + 2):
  // with one shared pool they would take every thread.
  constexpr int kWaiting = 6;
  std::vector<absl::StatusOr<v1::GetPlanResponse>> plans(kWaiting);
  std::vector<std::thread> callers;
  for (int i = 0; i < kWaiting; ++i) {
    callers.emplace_back(
        [&, i] { plans[i] = client->GetPlan(PlanRequest(i, /*step=*/0)); });
  }
  fake->entered.WaitForNotification();
  // Both GetPlan threads are held; the rest of the GetPlans queue behind
  // them, and registrations and reports still complete.
  for (int i = 0; i < 4; ++i) {
    v1::RegisterWorkerRequest request;
    request.set_worker_id(absl::StrCat("w", i));
    request.set_num_ranks(1);
    absl::StatusOr<v1::RegisterWorkerResponse> registered =
        client->RegisterWorker(request);
    EXPECT_TRUE(registered.ok()) << registered.status();
  }
  EXPECT_TRUE(client->ReportStepStats(v1::ReportStepStatsRequest()).ok());
  gate.Notify();
  for (std::thread& caller : callers) caller.join();
  for (const auto& plan : plans) EXPECT_TRUE(plan.ok()) << plan.status();
}

// ---------------------------------------------------------------------------
// Client retries.

TEST(GrpcPlannerClientTest, RetriesUnavailableThenNamesThePlanner) {
  const int port = *PickFreePort("127.0.0.1");  // Nothing listens there.
  GrpcPlannerClient::Options options = ClientOptions(port);
  options.retry.max_attempts = 4;
  options.retry.initial_backoff = absl::Milliseconds(100);
  options.retry.max_backoff = absl::Milliseconds(300);
  options.retry.multiplier = 2;
  options.retry.jitter = 0.2;
  std::vector<absl::Duration> sleeps;
  options.sleep = [&](absl::Duration wait) { sleeps.push_back(wait); };
  std::unique_ptr<GrpcPlannerClient> client = MakeClient(options);

  absl::StatusOr<v1::ListWorkersResponse> result =
      client->ListWorkers(v1::ListWorkersRequest());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(result.status().message(),
              HasSubstr(absl::StrCat("planner at 127.0.0.1:", port,
                                     " unavailable after 4 attempts over ")));
  EXPECT_EQ(client->attempts(), 4);
  ASSERT_EQ(sleeps.size(), 3u);
  const double base_ms[] = {100, 200, 300};
  for (int i = 0; i < 3; ++i) {
    EXPECT_GE(absl::ToDoubleMilliseconds(sleeps[i]), base_ms[i] * 0.8) << i;
    EXPECT_LE(absl::ToDoubleMilliseconds(sleeps[i]), base_ms[i] * 1.2) << i;
  }

  // The jitter is reproducible from the seed.
  std::vector<absl::Duration> again;
  options.sleep = [&](absl::Duration wait) { again.push_back(wait); };
  (void)MakeClient(options)->ListWorkers(v1::ListWorkersRequest());
  EXPECT_EQ(again, sleeps);
}

TEST(GrpcPlannerClientTest, BadOptionsAreRefused) {
  GrpcPlannerClient::Options options;
  EXPECT_EQ(GrpcPlannerClient::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options = ClientOptions(1);
  options.retry.max_attempts = 0;
  EXPECT_EQ(GrpcPlannerClient::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options = ClientOptions(1);
  options.tls.root_ca_file = "/nonexistent/ca.pem";
  absl::StatusOr<std::unique_ptr<GrpcPlannerClient>> client =
      GrpcPlannerClient::Create(options);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(client.status().message(), HasSubstr("/nonexistent/ca.pem"));
}

}  // namespace
}  // namespace dcp

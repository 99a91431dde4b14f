// Checks that the @system libraries (Debian packages) compile, link and work:
// Abseil (status, strings, containers, synchronization, flags), nlohmann/json,
// prometheus-cpp and gRPC with the protobuf runtime.

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

ABSL_FLAG(int, dcp_test_num_gpus, 8, "Flag parsed by FlagsParseCommandLine.");

namespace dcp {
namespace {

absl::StatusOr<int> GpusForTokens(int64_t tokens) {
  if (tokens <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tokens must be positive, got %d", tokens));
  }
  return static_cast<int>((tokens + 65535) / 65536);
}

TEST(SystemLibrariesTest, AbslStatusAndStrings) {
  absl::StatusOr<int> gpus = GpusForTokens(131073);
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  EXPECT_EQ(*gpus, 3);

  absl::StatusOr<int> bad = GpusForTokens(-1);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "tokens must be positive, got -1");
  EXPECT_EQ(absl::StrCat("sp", 4), "sp4");
}

TEST(SystemLibrariesTest, AbslFlatHashMapAndMutex) {
  absl::flat_hash_map<std::string, int> ranks_by_host = {{"node0", 0}};
  ranks_by_host["node1"] = 8;
  EXPECT_EQ(ranks_by_host.size(), 2u);
  EXPECT_EQ(ranks_by_host.at("node1"), 8);

  absl::Mutex mutex;
  int count = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        absl::MutexLock lock(&mutex);
        ++count;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(count, 2000);
  EXPECT_GT(absl::ToUnixSeconds(absl::Now()), 0);
}

TEST(SystemLibrariesTest, AbslFlagsParseCommandLine) {
  std::vector<char*> argv = {const_cast<char*>("test"),
                             const_cast<char*>("--dcp_test_num_gpus=32")};
  absl::ParseCommandLine(static_cast<int>(argv.size()), argv.data());
  EXPECT_EQ(absl::GetFlag(FLAGS_dcp_test_num_gpus), 32);
}

TEST(SystemLibrariesTest, NlohmannJsonRoundTrip) {
  const nlohmann::json config = nlohmann::json::parse(
      R"({"num_nodes": 4, "gpus_per_node": 8, "usable_memory_fraction": 0.9})");
  EXPECT_EQ(config.at("num_nodes").get<int>() *
                config.at("gpus_per_node").get<int>(),
            32);
  EXPECT_EQ(nlohmann::json::parse(config.dump()), config);
}

TEST(SystemLibrariesTest, PrometheusCounterSerializes) {
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::Counter& plans = prometheus::BuildCounter()
                                   .Name("dcp_test_plans_total")
                                   .Help("Plans made.")
                                   .Register(*registry)
                                   .Add({{"strategy", "dcp"}});
  plans.Increment();
  plans.Increment();
  const std::string text =
      prometheus::TextSerializer().Serialize(registry->Collect());
  EXPECT_NE(text.find("dcp_test_plans_total{strategy=\"dcp\"} 2"),
            std::string::npos)
      << text;
}

TEST(SystemLibrariesTest, GrpcServerOnPortZeroServesHealthCheck) {
  grpc::EnableDefaultHealthCheckService(true);
  // A server needs at least one service; a callback generic service (which
  // answers UNIMPLEMENTED to everything) stands in for a generated one.
  grpc::CallbackGenericService generic_service;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.RegisterCallbackGenericService(&generic_service);
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ASSERT_GT(port, 0);
  ASSERT_NE(server->GetHealthCheckService(), nullptr);

  std::shared_ptr<grpc::Channel> channel = grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
  EXPECT_TRUE(channel->WaitForConnected(std::chrono::system_clock::now() +
                                        std::chrono::seconds(10)));

  // grpc.health.v1.Health/Check without generated stubs: an empty
  // HealthCheckRequest is zero bytes; SERVING is field 1 = 1, bytes {0x08, 0x01}.
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  grpc::Slice empty_request_slice(std::string{});
  grpc::ByteBuffer request(&empty_request_slice, /*nslices=*/1);
  grpc::ByteBuffer response;
  absl::Mutex mutex;
  bool done = false;
  grpc::Status status;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                 &request, &response, [&](grpc::Status call_status) {
                   absl::MutexLock lock(&mutex);
                   status = std::move(call_status);
                   done = true;
                 });
  {
    absl::MutexLock lock(&mutex);
    mutex.Await(absl::Condition(&done));
  }
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string response_bytes;
  for (const grpc::Slice& slice : slices) {
    response_bytes.append(reinterpret_cast<const char*>(slice.begin()),
                          slice.size());
  }
  EXPECT_EQ(response_bytes, std::string("\x08\x01", 2));
  server->Shutdown();
}

}  // namespace
}  // namespace dcp

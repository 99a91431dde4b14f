#include "planner/service/wire_sample_count.h"

#include <string>

#include "dcp/v1/planner_service.pb.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

std::optional<int64_t> Count(const std::string& bytes, int field) {
  google::protobuf::io::ArrayInputStream input(bytes.data(),
                                               static_cast<int>(bytes.size()));
  return CountWireSamples(input, field);
}

void AddBatch(v1::GlobalBatch* batch, int64_t step, int samples) {
  batch->set_step(step);
  for (int i = 0; i < samples; ++i) {
    v1::Sample* sample = batch->add_samples();
    sample->set_id(step * 1000 + i);
    sample->set_length_tokens(100 + i);
  }
}

TEST(WireSampleCountTest, CountsEverySubmittedBatchsSamples) {
  v1::SubmitBatchesRequest request;
  AddBatch(request.add_batches(), 1, 7);
  AddBatch(request.add_batches(), 2, 0);
  AddBatch(request.add_batches(), 3, 1000);
  EXPECT_EQ(Count(request.SerializeAsString(), kSubmitBatchesBatchField), 1007);
}

TEST(WireSampleCountTest, CountsEmptySamplesTooTheCheapestToSend) {
  // A sample with no fields is 2 wire bytes but a whole message parsed.
  v1::SubmitBatchesRequest request;
  v1::GlobalBatch* batch = request.add_batches();
  for (int i = 0; i < 5000; ++i) batch->add_samples();
  const std::string bytes = request.SerializeAsString();
  EXPECT_LT(bytes.size(), 11000u);
  EXPECT_EQ(Count(bytes, kSubmitBatchesBatchField), 5000);
}

TEST(WireSampleCountTest, CountsAGetPlanBatchAndSkipsOtherFields) {
  v1::GetPlanRequest request;
  request.set_worker_id("w0");
  request.set_step(4);
  AddBatch(request.mutable_batch(), 4, 33);
  request.set_batch_fingerprint(99);
  EXPECT_EQ(Count(request.SerializeAsString(), kGetPlanBatchField), 33);
  v1::GetPlanRequest by_step;
  by_step.set_step(4);
  EXPECT_EQ(Count(by_step.SerializeAsString(), kGetPlanBatchField), 0);
}

TEST(WireSampleCountTest, MalformedBytesAreNotCounted) {
  v1::SubmitBatchesRequest request;
  AddBatch(request.add_batches(), 1, 10);
  const std::string bytes = request.SerializeAsString();
  EXPECT_EQ(Count(bytes.substr(0, bytes.size() - 3), kSubmitBatchesBatchField),
            std::nullopt);
  EXPECT_EQ(Count(std::string("\xff\xff\xff\xff\xff\xff", 6),
                  kSubmitBatchesBatchField),
            std::nullopt);
}

}  // namespace
}  // namespace dcp

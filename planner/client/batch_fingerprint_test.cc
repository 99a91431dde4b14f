#include "planner/client/batch_fingerprint.h"

#include <cstdint>
#include <vector>

#include "dcp/v1/batch.pb.h"
#include "gtest/gtest.h"
#include "planner/client/proto_convert.h"
#include "planner/workload/workload.h"

namespace dcp {
namespace {

v1::GlobalBatch ToProto(const std::vector<Sample>& samples, int64_t step) {
  v1::GlobalBatch batch;
  batch.set_step(step);
  for (const Sample& sample : samples) {
    v1::Sample* added = batch.add_samples();
    added->set_id(sample.id);
    added->set_length_tokens(sample.length_tokens);
  }
  return batch;
}

// Pinned values: clients and state directories depend on them. They were
// computed by an independent implementation of the algorithm documented in
// batch_fingerprint.h; a change here needs a new kBatchFingerprintVersion.
TEST(BatchFingerprintTest, ValuesArePinned) {
  EXPECT_EQ(kBatchFingerprintVersion, 2);
  const std::vector<Sample> samples = {{0, 1024}, {1, 2048}, {2, 4096}};
  EXPECT_EQ(BatchFingerprint(samples), 0xb23c21daff86f26dull);
  EXPECT_EQ(BatchFingerprint(std::vector<Sample>{}), 0xde9cda4cc3d69aceull);
  EXPECT_EQ(BatchFingerprint(std::vector<Sample>{{-1, 7}}),
            0x80df05e64a690565ull);
}

TEST(BatchFingerprintTest, ProtoAndStructsAgreeAndStepIsIgnored) {
  const std::vector<Sample> samples = {{0, 1024}, {1, 2048}, {2, 4096}};
  EXPECT_EQ(BatchFingerprint(ToProto(samples, /*step=*/0)),
            BatchFingerprint(samples));
  EXPECT_EQ(BatchFingerprint(ToProto(samples, /*step=*/9)),
            BatchFingerprint(samples));
}

TEST(BatchFingerprintTest, OrderIdsAndLengthsAllMatter) {
  const std::vector<Sample> base = {{0, 1024}, {1, 2048}, {2, 4096}};
  const uint64_t fingerprint = BatchFingerprint(base);
  std::vector<Sample> swapped = {{1, 2048}, {0, 1024}, {2, 4096}};
  EXPECT_EQ(BatchFingerprint(swapped), 0x3434cb28c2e3e3ffull);
  std::vector<Sample> other_id = base;
  other_id[2].id = 3;
  std::vector<Sample> other_length = base;
  other_length[0].length_tokens = 1025;
  // An id and a length exchanged between fields.
  std::vector<Sample> transposed = {{1024, 0}, {1, 2048}, {2, 4096}};
  std::vector<Sample> longer = base;
  longer.push_back({3, 0});
  for (const std::vector<Sample>* changed :
       {&swapped, &other_id, &other_length, &transposed, &longer}) {
    EXPECT_NE(BatchFingerprint(*changed), fingerprint);
    EXPECT_NE(BatchFingerprint(*changed), 0u);
  }
}

TEST(BatchFingerprintTest, StreamingEqualsOneCall) {
  std::vector<Sample> samples;
  for (int64_t i = 0; i < 1000; ++i) samples.push_back({i, 1 + i * 37 % 5000});
  BatchFingerprinter fingerprinter(samples.size());
  for (const Sample& sample : samples) {
    fingerprinter.Add(sample.id, sample.length_tokens);
  }
  EXPECT_EQ(fingerprinter.Finish(), BatchFingerprint(samples));
}

}  // namespace
}  // namespace dcp

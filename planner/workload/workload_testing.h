#ifndef DCP_PLANNER_WORKLOAD_TESTING_H_
#define DCP_PLANNER_WORKLOAD_TESTING_H_

// Batch streams for the planner's tests. testonly.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "planner/workload/workload.h"

namespace dcp {

/// The stream of `spec`'s lengths (ParseWorkloadSpec) in batches of at most
/// `global_batch_tokens` tokens, drawn from `seed`; a test failure (and a
/// crash on use) if the spec or the budget is invalid.
inline BatchStream MakeSpecStream(const std::string& spec,
                                  int64_t global_batch_tokens, uint64_t seed) {
  absl::StatusOr<std::unique_ptr<LengthSource>> source =
      ParseWorkloadSpec(spec);
  EXPECT_TRUE(source.ok()) << spec << ": " << source.status();
  BatchOptions options;
  options.global_batch_tokens = global_batch_tokens;
  absl::StatusOr<BatchStream> stream =
      BatchStream::Create(*std::move(source), options, seed);
  EXPECT_TRUE(stream.ok()) << stream.status();
  return *std::move(stream);
}

}  // namespace dcp

#endif  // DCP_PLANNER_WORKLOAD_TESTING_H_

#ifndef DCP_PLANNER_SERVICE_TEST_BATCHES_H_
#define DCP_PLANNER_SERVICE_TEST_BATCHES_H_

// Global batches for the planner service's tests. testonly.

#include <cstdint>
#include <vector>

#include "dcp/v1/batch.pb.h"

namespace dcp {

/// Step `step`'s batch of sequences of `lengths` tokens, with ids
/// `first_id`, `first_id` + 1, ...
inline v1::GlobalBatch BatchOfLengths(int64_t step,
                                      const std::vector<int64_t>& lengths,
                                      int64_t first_id) {
  v1::GlobalBatch batch;
  batch.set_step(step);
  for (int64_t length : lengths) {
    v1::Sample* sample = batch.add_samples();
    sample->set_id(first_id + batch.samples_size() - 1);
    sample->set_length_tokens(length);
  }
  return batch;
}

/// Step `step`'s batch of one 200,000-token sequence among 500 short ones
/// (1,200..1,838 tokens): one the planner re-groups into phases on 2 x 8
/// GPUs.
inline v1::GlobalBatch OneLongAmongShortBatch(int64_t step) {
  std::vector<int64_t> lengths = {200000};
  for (int i = 0; i < 500; ++i) lengths.push_back(1200 + 29 * (i % 23));
  return BatchOfLengths(step, lengths, /*first_id=*/1);
}

}  // namespace dcp

#endif  // DCP_PLANNER_SERVICE_TEST_BATCHES_H_

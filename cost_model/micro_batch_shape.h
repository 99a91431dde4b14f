#ifndef DCP_COST_MODEL_MICRO_BATCH_SHAPE_H_
#define DCP_COST_MODEL_MICRO_BATCH_SHAPE_H_

#include <cstdint>

#include "absl/types/span.h"
#include "cost_model/saturating_math.h"

namespace dcp {

/// What the cost model needs to know about a packed micro-batch run by one
/// sequence-parallel group: enough to price it without the lengths.
/// Plain value; thread-compatible.
struct MicroBatchShape {
  /// SP size of the group that runs it.
  int sp_size = 1;
  /// Tokens each rank holds: sum over sequences of ceil(length / sp_size)
  /// (a length that does not divide is padded, and padding is masked out).
  int64_t tokens_per_rank = 0;
  /// Sum of sequence lengths (real tokens, no padding).
  int64_t sum_lengths = 0;
  /// Sum of squared sequence lengths: attention work.
  double sum_squared_lengths = 0;
  int num_sequences = 0;

  // Token counts saturate at the int64 maximum rather than wrap.
  void AddSequence(int64_t length_tokens) {
    tokens_per_rank =
        SaturatingAdd(tokens_per_rank, CeilDivide(length_tokens, sp_size));
    sum_lengths = SaturatingAdd(sum_lengths, length_tokens);
    sum_squared_lengths +=
        static_cast<double>(length_tokens) * static_cast<double>(length_tokens);
    ++num_sequences;
  }
  void Merge(const MicroBatchShape& other) {
    tokens_per_rank = SaturatingAdd(tokens_per_rank, other.tokens_per_rank);
    sum_lengths = SaturatingAdd(sum_lengths, other.sum_lengths);
    sum_squared_lengths += other.sum_squared_lengths;
    num_sequences += other.num_sequences;
  }
};

/// The shape of a micro-batch of these lengths on an SP group of `sp_size`.
inline MicroBatchShape ShapeOf(absl::Span<const int64_t> lengths_tokens,
                               int sp_size) {
  MicroBatchShape shape;
  shape.sp_size = sp_size;
  for (int64_t length : lengths_tokens) shape.AddSequence(length);
  return shape;
}

}  // namespace dcp

#endif  // DCP_COST_MODEL_MICRO_BATCH_SHAPE_H_

// Sequence-length workloads and global-batch formation for the DCP planner.
//
// Every generator here is deterministic: the same spec and seed produce the
// same lengths on every platform. Randomness comes only from the raw output
// of std::mt19937_64 (whose sequence is fixed by the C++ standard); the
// normal, lognormal and Pareto variates are computed here rather than with
// the implementation-defined <random> distributions.

#ifndef DCP_PLANNER_WORKLOAD_H_
#define DCP_PLANNER_WORKLOAD_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dcp {

/// One training sequence: a stream-unique id and its length in tokens.
struct Sample {
  int64_t id = 0;
  int64_t length_tokens = 0;
};

/// A source of sequence lengths. Not thread-safe.
class LengthSource {
 public:
  virtual ~LengthSource() = default;
  /// Returns the next sequence length (> 0 tokens), drawing randomness only
  /// from `rng`.
  virtual int64_t NextLengthTokens(std::mt19937_64& rng) = 0;
  /// One-line human-readable description with the effective parameters.
  virtual std::string Describe() const = 0;
  /// Upper bound on any length this source returns (the cap; for a file or
  /// list, the largest entry; for video, the largest bucket). 0 for an empty
  /// list.
  virtual int64_t MaxLengthTokens() const = 0;
};

/// Parses a workload spec: `KIND` or `KIND:key=value,key=value,...`.
///
/// Kinds and keys (all keys optional; lengths are in tokens):
///  * `longtail`: lognormal body plus Pareto tail (chat/pretraining-like).
///    median=1024, sigma=1.0, tail_fraction=0.02, tail_min=16384, alpha=1.2,
///    max=131072, min=32. Body samples are clamped to [min, max]; tail
///    samples are Pareto(tail_min, alpha) capped at max.
///  * `uniform`: uniform integers in [min, max] (long-context SFT).
///    min=8192, max=65536.
///  * `bimodal`: mixture of two lognormals. short_median=1024,
///    long_median=32768, long_fraction=0.1, sigma=0.5, min=32, max=131072.
///  * `video`: Open-Sora-style resolution/duration buckets; a clip of
///    height H, width W and F frames has ceil(H/16)*ceil(W/16)*ceil(F/4)
///    tokens. `buckets=HxWxF@weight;HxWxF@weight;...` replaces the default
///    table (F=1 for images; `@weight` may be omitted for weight 1);
///    `max=N` drops buckets longer than N tokens (error if none remain).
///  * `file:PATH`: lengths read by ReadLengthsFile, cycled in order.
///
/// Errors (InvalidArgument): unknown kind, unknown or repeated key (the
/// message lists the valid keys), unparsable or non-positive number, a
/// fraction outside [0, 1], min > max, a median outside [min, max]; for
/// `file:`, whatever ReadLengthsFile returns.
absl::StatusOr<std::unique_ptr<LengthSource>> ParseWorkloadSpec(
    absl::string_view spec);

/// Reads one positive integer length per line (surrounding whitespace,
/// blank lines and lines starting with '#' are ignored). Errors name the
/// file, the 1-based line number and the offending text: NotFound if the file
/// cannot be opened, InvalidArgument for a bad line or a file with no lengths.
absl::StatusOr<std::vector<int64_t>> ReadLengthsFile(const std::string& path);

/// A source that cycles through a fixed list in order (used for
/// --lengths=FILE). Entries should be > 0; an empty list yields
/// MaxLengthTokens() == 0, which BatchStream::Create rejects.
std::unique_ptr<LengthSource> MakeListSource(std::vector<int64_t> lengths);

/// How BatchStream groups samples into global batches. Exactly one field must
/// be > 0 (the other 0).
struct BatchOptions {
  /// Token budget per global batch.
  int64_t global_batch_tokens = 0;
  /// Fixed number of samples per global batch.
  int64_t global_batch_samples = 0;
};

/// Deterministic stream of global batches. Samples get consecutive ids from
/// 0 in the order they are drawn; batches never drop or reorder samples.
///  * Token budget: samples are appended while the batch total stays
///    <= global_batch_tokens, and the batch has fewer than
///    kMaxBatchSequences (planner/plan/limits.h) samples. A batch always has at
///    least one sample: a sample longer than the budget forms a batch alone,
///    and the sample that did not fit starts the next batch.
///  * Sample count: every batch has exactly global_batch_samples samples.
class BatchStream {
 public:
  /// Creates a stream drawing lengths from `source` with an RNG seeded by
  /// `seed`. InvalidArgument if `source` is null or has no positive lengths,
  /// or unless exactly one of the options is > 0 (and neither is negative).
  static absl::StatusOr<BatchStream> Create(
      std::unique_ptr<LengthSource> source, BatchOptions options,
      uint64_t seed);

  BatchStream(BatchStream&&) = default;
  BatchStream& operator=(BatchStream&&) = default;

  /// Returns the next global batch (never empty).
  std::vector<Sample> Next();

  /// The options this stream was created with.
  const BatchOptions& options() const { return options_; }
  /// The underlying length source.
  const LengthSource& source() const { return *source_; }

 private:
  BatchStream(std::unique_ptr<LengthSource> source, BatchOptions options,
              uint64_t seed);
  Sample Draw();

  std::unique_ptr<LengthSource> source_;
  BatchOptions options_;
  std::mt19937_64 rng_;
  int64_t next_id_ = 0;
  // A sample drawn for the previous batch that did not fit its token budget.
  std::optional<Sample> pending_;
};

}  // namespace dcp

#endif  // DCP_PLANNER_WORKLOAD_H_

// Token datasets for the worker: where the token ids of a planned sample come
// from.
//
// The planner only sees sample ids and lengths (planner/workload/workload.h); a worker
// turns a `Sample{id, length_tokens}` into token ids with a `Dataset`. Every
// rank must get the same tokens for the same id, so datasets are pure
// functions of their construction arguments (synthetic) or of files on disk
// (token files), never of the order in which samples are read.
//
// Two implementations:
//  * `SyntheticDataset`: tokens computed from (seed, sample id, position) with
//    a stable integer hash. No I/O; lengths come from the caller.
//  * `TokenFileDataset`: the pre-tokenized layout large training frameworks
//    use (Megatron-style .bin/.idx): a flat file of token ids plus an index of
//    per-sample offsets. Reads pread only the requested sample's bytes.
//
// File format (all integers little-endian), for a prefix P:
//  * `P.bin`: the token ids of all samples concatenated, one uint32 each.
//  * `P.idx`: a 32-byte header, then count + 1 int64 offsets.
//      bytes  0..7   magic "DCPIDX1\0"
//      bytes  8..15  uint64 format version (kTokenFileVersion = 1)
//      bytes 16..23  int64  count: number of samples
//      bytes 24..31  int64  vocab_size: every token id is in [0, vocab_size)
//      bytes 32..    int64  offsets[count + 1], in tokens into P.bin:
//                           offsets[0] == 0, non-decreasing, and
//                           offsets[count] * 4 == size of P.bin.
//    Sample i (its id) holds tokens [offsets[i], offsets[i + 1]).

#ifndef DCP_WORKER_EXECUTION_DATASET_H_
#define DCP_WORKER_EXECUTION_DATASET_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace dcp {

/// Source of the token ids of training samples, addressed by sample id.
/// Implementations are thread-safe for concurrent reads.
class Dataset {
 public:
  virtual ~Dataset() = default;

  /// Returns the token ids of sample `sample_id`, each in [0, vocab_size()).
  /// `expected_length_tokens` is the length the planner used for this
  /// sample; a dataset whose stored length differs returns InvalidArgument
  /// naming the id and both lengths (the plan was made for other data).
  /// NotFound if the sample does not exist.
  virtual absl::StatusOr<std::vector<int32_t>> Tokens(
      int64_t sample_id, int64_t expected_length_tokens) const = 0;

  /// Number of distinct token ids (the model's embedding rows).
  virtual int64_t vocab_size() const = 0;
};

/// Largest vocabulary a dataset may have: token ids must fit in int32_t.
inline constexpr int64_t kMaxVocabSize = int64_t{1} << 31;

/// Deterministic synthetic tokens: any rank can produce any sample without
/// I/O, and all ranks agree. Sample ids are any non-negative integer, and a
/// sample has whatever length the caller asks for (the workload generator
/// decides lengths), so Tokens() never reports a length mismatch.
///
/// The tokens follow a learnable pattern so that a tiny model's loss visibly
/// falls within a few steps. With V = vocab_size and
/// h(p) = Hash(seed, sample_id, p) (splitmix64-based, identical on every
/// platform):
///  * token 0 is uniform: Uniform(h(0), V);
///  * token p > 0 is, with probability 1/kSyntheticNoiseOneIn (decided by the
///    low bits of h(p)), uniform noise Uniform(h(p), V); otherwise it follows
///    the previous token:
///      next = (prev * kSyntheticMultiplier + kSyntheticIncrement) mod V.
/// A model that learns this bigram rule reaches a loss of about
/// (1/8) ln V + 0.38 nats per token, from ln V at initialization (e.g. 1.1 vs
/// 5.5 nats for V = 256).
///
/// Thread model: immutable after construction; safe for concurrent use.
class SyntheticDataset : public Dataset {
 public:
  /// One token in this many (on average) is uniform noise.
  static constexpr uint64_t kSyntheticNoiseOneIn = 8;
  /// The bigram rule: next = (prev * kSyntheticMultiplier +
  /// kSyntheticIncrement) mod vocab_size (a full-period LCG when vocab_size
  /// is a power of two).
  static constexpr uint64_t kSyntheticMultiplier = 5;
  static constexpr uint64_t kSyntheticIncrement = 3;

  /// InvalidArgument unless 1 <= vocab_size <= kMaxVocabSize.
  static absl::StatusOr<SyntheticDataset> Create(uint64_t seed,
                                                 int64_t vocab_size);

  /// Precondition (crashes otherwise): 1 <= vocab_size <= kMaxVocabSize. Use
  /// Create() for values that come from user input.
  SyntheticDataset(uint64_t seed, int64_t vocab_size);

  /// InvalidArgument for a negative id or length; otherwise the
  /// `expected_length_tokens` tokens of the sample (a prefix of the same
  /// sample asked for with a longer length).
  absl::StatusOr<std::vector<int32_t>> Tokens(
      int64_t sample_id, int64_t expected_length_tokens) const override;

  int64_t vocab_size() const override { return vocab_size_; }
  uint64_t seed() const { return seed_; }

 private:
  uint64_t seed_;
  // In [1, kMaxVocabSize].
  int64_t vocab_size_;
};

/// Version number written in, and accepted from, the index header.
inline constexpr uint64_t kTokenFileVersion = 1;

/// Path of the tokens file for `prefix` ("<prefix>.bin").
std::string TokenFileTokensPath(const std::string& prefix);
/// Path of the index file for `prefix` ("<prefix>.idx").
std::string TokenFileIndexPath(const std::string& prefix);

/// Writes a token-file dataset (format in the file comment). Both files are
/// written under temporary names and renamed into place by Finish() (tokens
/// first, then the index), so readers never see a partially written index;
/// a writer destroyed before Finish() removes its temporary files and leaves
/// existing files at `prefix` untouched.
///
/// Thread model: not thread-safe.
class TokenFileWriter {
 public:
  /// Starts writing `<prefix>.bin` and `<prefix>.idx` for token ids in
  /// [0, vocab_size). InvalidArgument for a vocab_size outside
  /// [1, kMaxVocabSize]; the OS error (naming the file) if the temporary
  /// tokens file cannot be created.
  static absl::StatusOr<std::unique_ptr<TokenFileWriter>> Open(
      const std::string& prefix, int64_t vocab_size);

  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;
  ~TokenFileWriter();

  /// Appends one sample and returns its id (0, 1, 2, ... in append order).
  /// InvalidArgument (naming the position and value) if a token is outside
  /// [0, vocab_size), and nothing is appended; FailedPrecondition after
  /// Finish() or a failed write.
  absl::StatusOr<int64_t> Append(absl::Span<const int32_t> tokens);

  /// Flushes and syncs the tokens, writes the index, and renames both files
  /// into place. FailedPrecondition if called twice or after a failed write.
  absl::Status Finish();

  /// Samples appended so far.
  int64_t num_samples() const {
    return static_cast<int64_t>(offsets_tokens_.size()) - 1;
  }

 private:
  TokenFileWriter(std::string prefix, int64_t vocab_size, std::FILE* tokens);
  void Abandon();

  std::string prefix_;
  int64_t vocab_size_;
  // The temporary tokens file; null once finished or abandoned.
  std::FILE* tokens_file_ = nullptr;
  // offsets_tokens_[i] is where sample i starts; the last entry is the total.
  std::vector<int64_t> offsets_tokens_ = {0};
  // Set by the first failed write or by Finish(); no further appends.
  bool closed_ = false;
};

/// A token-file dataset opened for reading. Open() reads and validates the
/// index; Tokens() preads only the requested sample's bytes from the tokens
/// file, which is never loaded whole.
///
/// Thread model: immutable after Open() (pread does not move a shared file
/// position); safe for concurrent reads.
class TokenFileDataset : public Dataset {
 public:
  /// Opens `<prefix>.idx` and `<prefix>.bin`. NotFound if either is missing;
  /// DataLoss, naming the file and the bad entry, for a bad magic, an
  /// unsupported version, a negative count or bad vocab_size, an index size
  /// that does not match its count, offsets that do not start at 0 or that
  /// decrease, or a tokens file whose size is not offsets[count] * 4 bytes
  /// (truncated or padded).
  static absl::StatusOr<std::unique_ptr<TokenFileDataset>> Open(
      const std::string& prefix);

  TokenFileDataset(const TokenFileDataset&) = delete;
  TokenFileDataset& operator=(const TokenFileDataset&) = delete;
  ~TokenFileDataset() override;

  /// NotFound for an id outside [0, num_samples()); InvalidArgument if the
  /// stored length differs from `expected_length_tokens`; DataLoss if a
  /// stored token is outside [0, vocab_size()) or the file cannot be read.
  absl::StatusOr<std::vector<int32_t>> Tokens(
      int64_t sample_id, int64_t expected_length_tokens) const override;

  int64_t vocab_size() const override { return vocab_size_; }
  int64_t num_samples() const {
    return static_cast<int64_t>(offsets_tokens_.size()) - 1;
  }

  /// The length of every sample in id order (e.g. to write a --lengths file
  /// so the planner plans for exactly this data).
  absl::StatusOr<std::vector<int64_t>> Lengths() const;

 private:
  TokenFileDataset(std::string tokens_path, int fd, int64_t vocab_size,
                   std::vector<int64_t> offsets_tokens);

  std::string tokens_path_;
  // Read-only descriptor of the tokens file, owned; only used with pread.
  int fd_;
  int64_t vocab_size_;
  // count + 1 validated offsets: starts at 0, non-decreasing, and the last
  // one times 4 is the tokens file size.
  std::vector<int64_t> offsets_tokens_;
};

/// Writes a token-file dataset at `prefix` whose sample i holds
/// SyntheticDataset(seed, vocab_size).Tokens(i, lengths[i]), so both datasets
/// return identical tokens. InvalidArgument for a negative length or a bad
/// vocab_size; otherwise whatever TokenFileWriter returns.
absl::Status WriteSyntheticTokenFiles(const std::string& prefix,
                                      absl::Span<const int64_t> lengths,
                                      uint64_t seed, int64_t vocab_size);

/// Whether the data spec `spec` names synthetic data: "synthetic" or
/// "synthetic:SEED".
bool IsSyntheticDataSpec(const std::string& spec);

/// The seed of a synthetic data spec: 0 for "synthetic", SEED for
/// "synthetic:SEED"; INVALID_ARGUMENT naming the spec unless SEED is a
/// non-negative integer. Precondition: IsSyntheticDataSpec(spec).
absl::StatusOr<uint64_t> SyntheticDataSeed(const std::string& spec);

/// The dataset named by `spec` ("synthetic", "synthetic:SEED",
/// "tokens:PREFIX") for a model with `vocab_size` token ids.
/// INVALID_ARGUMENT for an unknown spec or a token file whose vocabulary is
/// larger than the model's.
absl::StatusOr<std::unique_ptr<Dataset>> OpenDataset(const std::string& spec,
                                                     int64_t vocab_size);

}  // namespace dcp

#endif  // DCP_WORKER_EXECUTION_DATASET_H_

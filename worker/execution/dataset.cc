#include "worker/execution/dataset.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/split_mix64.h"
#include "common/status_macros.h"

namespace dcp {
namespace {

// ---------------------------------------------------------------------------
// Synthetic tokens.

// The hash of one token position.
uint64_t SyntheticHash(uint64_t seed, uint64_t sample_id, uint64_t position) {
  return SplitMix64Chain(seed, {sample_id, position});
}

// Maps the high 32 bits of `hash` onto [0, vocab_size) (multiply-shift; exact
// in 64 bits because vocab_size <= 2^31).
uint64_t UniformToken(uint64_t hash, uint64_t vocab_size) {
  return ((hash >> 32) * vocab_size) >> 32;
}

absl::Status CheckVocabSize(int64_t vocab_size) {
  if (vocab_size < 1 || vocab_size > kMaxVocabSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocab_size ", vocab_size, " is outside [1, ",
                     kMaxVocabSize, "]: token ids must fit in int32"));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Little-endian encoding and POSIX file helpers.

constexpr char kIndexMagic[8] = {'D', 'C', 'P', 'I', 'D', 'X', '1', '\0'};
constexpr int64_t kIndexHeaderBytes = 32;
constexpr int64_t kTokenBytes = 4;

void PutLittleEndian64(uint64_t value, unsigned char* out) {
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<unsigned char>(value >> (8 * i));
}

uint64_t GetLittleEndian64(const unsigned char* in) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | in[i];
  return value;
}

void PutLittleEndian32(uint32_t value, unsigned char* out) {
  for (int i = 0; i < 4; ++i)
    out[i] = static_cast<unsigned char>(value >> (8 * i));
}

uint32_t GetLittleEndian32(const unsigned char* in) {
  return static_cast<uint32_t>(in[0]) | static_cast<uint32_t>(in[1]) << 8 |
         static_cast<uint32_t>(in[2]) << 16 |
         static_cast<uint32_t>(in[3]) << 24;
}

absl::Status OsError(int error_number, absl::string_view what,
                     absl::string_view path) {
  return absl::ErrnoToStatus(error_number,
                             absl::StrCat("cannot ", what, " '", path, "'"));
}

// Reads exactly `size` bytes at `offset`; DataLoss if the file ends first.
absl::Status PreadFully(int fd, const std::string& path, int64_t offset,
                        int64_t size, unsigned char* out) {
  int64_t done = 0;
  while (done < size) {
    const ssize_t got =
        ::pread(fd, out + done, static_cast<size_t>(size - done),
                static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      return OsError(errno, "read", path);
    }
    if (got == 0) {
      return absl::DataLossError(
          absl::StrCat("'", path, "' ended at byte ", offset + done,
                       " while reading ", size, " bytes at offset ", offset,
                       "; the file shrank after it was opened"));
    }
    done += got;
  }
  return absl::OkStatus();
}

absl::Status WriteFully(int fd, const std::string& path,
                        const unsigned char* data, int64_t size) {
  int64_t done = 0;
  while (done < size) {
    const ssize_t wrote =
        ::write(fd, data + done, static_cast<size_t>(size - done));
    if (wrote < 0) {
      if (errno == EINTR) continue;
      return OsError(errno, "write", path);
    }
    done += wrote;
  }
  return absl::OkStatus();
}

// Opens `path` read-only and returns the descriptor and the file size.
absl::StatusOr<std::pair<int, int64_t>> OpenForReading(
    const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return OsError(errno, "open", path);
  struct stat info;
  if (::fstat(fd, &info) != 0) {
    const int error_number = errno;
    ::close(fd);
    return OsError(error_number, "stat", path);
  }
  return std::make_pair(fd, static_cast<int64_t>(info.st_size));
}

// Makes completed renames in the directory of `path` durable.
absl::Status SyncParentDirectory(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string directory =
      slash == std::string::npos ? "."
                                 : (slash == 0 ? "/" : path.substr(0, slash));
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return OsError(errno, "open directory", directory);
  const int result = ::fsync(fd);
  const int error_number = errno;
  ::close(fd);
  if (result != 0) return OsError(error_number, "sync directory", directory);
  return absl::OkStatus();
}

std::string TemporaryPath(const std::string& path) {
  return absl::StrCat(path, ".tmp");
}

}  // namespace

// ---------------------------------------------------------------------------
// SyntheticDataset

absl::StatusOr<SyntheticDataset> SyntheticDataset::Create(uint64_t seed,
                                                          int64_t vocab_size) {
  if (absl::Status status = CheckVocabSize(vocab_size); !status.ok()) {
    return status;
  }
  return SyntheticDataset(seed, vocab_size);
}

SyntheticDataset::SyntheticDataset(uint64_t seed, int64_t vocab_size)
    : seed_(seed), vocab_size_(vocab_size) {
  if (absl::Status status = CheckVocabSize(vocab_size); !status.ok()) {
    std::fprintf(stderr, "SyntheticDataset: %s\n",
                 std::string(status.message()).c_str());
    std::abort();
  }
}

absl::StatusOr<std::vector<int32_t>> SyntheticDataset::Tokens(
    int64_t sample_id, int64_t expected_length_tokens) const {
  if (sample_id < 0) {
    return absl::NotFoundError(
        absl::StrCat("sample ", sample_id,
                     " does not exist: synthetic sample ids are non-negative"));
  }
  if (expected_length_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sample ", sample_id, " was asked for with length ",
                     expected_length_tokens, " tokens; lengths must be >= 0"));
  }
  const uint64_t vocab = static_cast<uint64_t>(vocab_size_);
  const uint64_t id = static_cast<uint64_t>(sample_id);
  std::vector<int32_t> tokens(static_cast<size_t>(expected_length_tokens));
  uint64_t previous = 0;
  for (int64_t position = 0; position < expected_length_tokens; ++position) {
    const uint64_t hash =
        SyntheticHash(seed_, id, static_cast<uint64_t>(position));
    uint64_t token;
    if (position == 0 || (hash & 0xffffffffULL) % kSyntheticNoiseOneIn == 0) {
      token = UniformToken(hash, vocab);
    } else {
      token = (previous * kSyntheticMultiplier + kSyntheticIncrement) % vocab;
    }
    tokens[static_cast<size_t>(position)] = static_cast<int32_t>(token);
    previous = token;
  }
  return tokens;
}

// ---------------------------------------------------------------------------
// TokenFileWriter

std::string TokenFileTokensPath(const std::string& prefix) {
  return absl::StrCat(prefix, ".bin");
}

std::string TokenFileIndexPath(const std::string& prefix) {
  return absl::StrCat(prefix, ".idx");
}

absl::StatusOr<std::unique_ptr<TokenFileWriter>> TokenFileWriter::Open(
    const std::string& prefix, int64_t vocab_size) {
  if (absl::Status status = CheckVocabSize(vocab_size); !status.ok()) {
    return status;
  }
  const std::string path = TemporaryPath(TokenFileTokensPath(prefix));
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) return OsError(errno, "create", path);
  return std::unique_ptr<TokenFileWriter>(
      new TokenFileWriter(prefix, vocab_size, file));
}

TokenFileWriter::TokenFileWriter(std::string prefix, int64_t vocab_size,
                                 std::FILE* tokens)
    : prefix_(std::move(prefix)),
      vocab_size_(vocab_size),
      tokens_file_(tokens) {}

TokenFileWriter::~TokenFileWriter() {
  if (!closed_) Abandon();
}

void TokenFileWriter::Abandon() {
  closed_ = true;
  if (tokens_file_ != nullptr) {
    std::fclose(tokens_file_);
    tokens_file_ = nullptr;
  }
  std::remove(TemporaryPath(TokenFileTokensPath(prefix_)).c_str());
  std::remove(TemporaryPath(TokenFileIndexPath(prefix_)).c_str());
}

absl::StatusOr<int64_t> TokenFileWriter::Append(
    absl::Span<const int32_t> tokens) {
  if (closed_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "token file writer for '", prefix_,
        "' is finished or failed; open a new writer to write more samples"));
  }
  const int64_t sample_id = num_samples();
  std::vector<unsigned char> bytes(tokens.size() * kTokenBytes);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab_size_) {
      return absl::InvalidArgumentError(
          absl::StrCat("token ", i, " of sample ", sample_id, " is ", tokens[i],
                       ", outside the vocabulary [0, ", vocab_size_, ")"));
    }
    PutLittleEndian32(static_cast<uint32_t>(tokens[i]),
                      bytes.data() + i * kTokenBytes);
  }
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(),
                                    tokens_file_) != bytes.size()) {
    const absl::Status status =
        OsError(errno, "write", TemporaryPath(TokenFileTokensPath(prefix_)));
    Abandon();
    return status;
  }
  offsets_tokens_.push_back(offsets_tokens_.back() +
                            static_cast<int64_t>(tokens.size()));
  return sample_id;
}

absl::Status TokenFileWriter::Finish() {
  if (closed_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "token file writer for '", prefix_, "' is already finished or failed"));
  }
  const std::string tokens_path = TokenFileTokensPath(prefix_);
  const std::string index_path = TokenFileIndexPath(prefix_);
  const std::string tokens_temporary = TemporaryPath(tokens_path);
  const std::string index_temporary = TemporaryPath(index_path);

  // Tokens: flush, sync, close, rename.
  if (std::fflush(tokens_file_) != 0 || ::fsync(fileno(tokens_file_)) != 0) {
    const absl::Status status = OsError(errno, "flush", tokens_temporary);
    Abandon();
    return status;
  }
  const int close_result = std::fclose(tokens_file_);
  tokens_file_ = nullptr;
  if (close_result != 0) {
    const absl::Status status = OsError(errno, "close", tokens_temporary);
    Abandon();
    return status;
  }

  // Index: header plus offsets, written whole to a temporary file.
  std::vector<unsigned char> index(static_cast<size_t>(kIndexHeaderBytes) +
                                   offsets_tokens_.size() * 8);
  std::memcpy(index.data(), kIndexMagic, sizeof(kIndexMagic));
  PutLittleEndian64(kTokenFileVersion, index.data() + 8);
  PutLittleEndian64(static_cast<uint64_t>(num_samples()), index.data() + 16);
  PutLittleEndian64(static_cast<uint64_t>(vocab_size_), index.data() + 24);
  for (size_t i = 0; i < offsets_tokens_.size(); ++i) {
    PutLittleEndian64(static_cast<uint64_t>(offsets_tokens_[i]),
                      index.data() + kIndexHeaderBytes + 8 * i);
  }
  const int fd = ::open(index_temporary.c_str(),
                        O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const absl::Status status = OsError(errno, "create", index_temporary);
    Abandon();
    return status;
  }
  absl::Status status = WriteFully(fd, index_temporary, index.data(),
                                   static_cast<int64_t>(index.size()));
  if (status.ok() && ::fsync(fd) != 0) {
    status = OsError(errno, "sync", index_temporary);
  }
  if (::close(fd) != 0 && status.ok()) {
    status = OsError(errno, "close", index_temporary);
  }
  // Tokens before index: a reader that sees the new index sees its tokens.
  if (status.ok() &&
      std::rename(tokens_temporary.c_str(), tokens_path.c_str()) != 0) {
    status = OsError(errno, "rename into place", tokens_path);
  }
  if (status.ok() &&
      std::rename(index_temporary.c_str(), index_path.c_str()) != 0) {
    status = OsError(errno, "rename into place", index_path);
  }
  if (!status.ok()) {
    Abandon();
    return status;
  }
  closed_ = true;
  return SyncParentDirectory(index_path);
}

// ---------------------------------------------------------------------------
// TokenFileDataset

absl::StatusOr<std::unique_ptr<TokenFileDataset>> TokenFileDataset::Open(
    const std::string& prefix) {
  const std::string index_path = TokenFileIndexPath(prefix);
  const std::string tokens_path = TokenFileTokensPath(prefix);

  // The index is small (8 bytes per sample) and read whole.
  absl::StatusOr<std::pair<int, int64_t>> index_file =
      OpenForReading(index_path);
  if (!index_file.ok()) return index_file.status();
  const int64_t index_bytes = index_file->second;
  std::vector<unsigned char> index(static_cast<size_t>(index_bytes));
  absl::Status read = PreadFully(index_file->first, index_path, /*offset=*/0,
                                 index_bytes, index.data());
  ::close(index_file->first);
  if (!read.ok()) return read;

  if (index_bytes < kIndexHeaderBytes) {
    return absl::DataLossError(
        absl::StrCat("index '", index_path, "' is ", index_bytes,
                     " bytes, shorter than its ", kIndexHeaderBytes,
                     "-byte header; rewrite it with TokenFileWriter"));
  }
  if (std::memcmp(index.data(), kIndexMagic, sizeof(kIndexMagic)) != 0) {
    return absl::DataLossError(absl::StrCat(
        "index '", index_path,
        "' does not start with the magic \"DCPIDX1\\0\"; it is not a DCP "
        "token index (or its header is corrupt)"));
  }
  const uint64_t version = GetLittleEndian64(index.data() + 8);
  if (version != kTokenFileVersion) {
    return absl::DataLossError(
        absl::StrCat("index '", index_path, "' has format version ", version,
                     "; this reader supports version ", kTokenFileVersion));
  }
  const int64_t count =
      static_cast<int64_t>(GetLittleEndian64(index.data() + 16));
  const int64_t vocab_size =
      static_cast<int64_t>(GetLittleEndian64(index.data() + 24));
  const int64_t offset_slots = (index_bytes - kIndexHeaderBytes) / 8;
  if (count < 0) {
    return absl::DataLossError(absl::StrCat("index '", index_path,
                                            "' header has a negative count ",
                                            count, "; the header is corrupt"));
  }
  if (count > offset_slots - 1 ||
      kIndexHeaderBytes + 8 * (count + 1) != index_bytes) {
    return absl::DataLossError(absl::StrCat(
        "index '", index_path, "' header says ", count,
        " samples, which needs count + 1 offsets of 8 bytes after the ",
        kIndexHeaderBytes, "-byte header, but the file has ", index_bytes,
        " bytes; the index is truncated or corrupt"));
  }
  if (absl::Status status = CheckVocabSize(vocab_size); !status.ok()) {
    return absl::DataLossError(
        absl::StrCat("index '", index_path, "' header: ", status.message()));
  }
  std::vector<int64_t> offsets(static_cast<size_t>(count + 1));
  for (int64_t i = 0; i <= count; ++i) {
    offsets[static_cast<size_t>(i)] = static_cast<int64_t>(
        GetLittleEndian64(index.data() + kIndexHeaderBytes + 8 * i));
  }
  if (offsets[0] != 0) {
    return absl::DataLossError(absl::StrCat(
        "index '", index_path, "': offset 0 (start of sample 0) is ",
        offsets[0], "; it must be 0"));
  }
  for (int64_t i = 0; i < count; ++i) {
    if (offsets[i + 1] < offsets[i]) {
      return absl::DataLossError(absl::StrCat(
          "index '", index_path, "': offset ", i + 1, " (end of sample ", i,
          ") is ", offsets[i + 1], ", less than offset ", i, " (its start) ",
          offsets[i], "; offsets must not decrease"));
    }
  }

  absl::StatusOr<std::pair<int, int64_t>> tokens_file =
      OpenForReading(tokens_path);
  if (!tokens_file.ok()) return tokens_file.status();
  const int64_t tokens_bytes = tokens_file->second;
  const int64_t total_tokens = offsets[static_cast<size_t>(count)];
  if (total_tokens > tokens_bytes / kTokenBytes ||
      total_tokens * kTokenBytes != tokens_bytes) {
    ::close(tokens_file->first);
    return absl::DataLossError(absl::StrCat(
        "tokens file '", tokens_path, "' has ", tokens_bytes,
        " bytes but index '", index_path, "' ends at token ", total_tokens,
        " (offset ", count, "), which needs ", total_tokens, " * ", kTokenBytes,
        " bytes; the tokens file is ",
        total_tokens > tokens_bytes / kTokenBytes ? "truncated"
                                                  : "longer than indexed",
        " or the files do not belong together"));
  }
  return std::unique_ptr<TokenFileDataset>(new TokenFileDataset(
      tokens_path, tokens_file->first, vocab_size, std::move(offsets)));
}

TokenFileDataset::TokenFileDataset(std::string tokens_path, int fd,
                                   int64_t vocab_size,
                                   std::vector<int64_t> offsets_tokens)
    : tokens_path_(std::move(tokens_path)),
      fd_(fd),
      vocab_size_(vocab_size),
      offsets_tokens_(std::move(offsets_tokens)) {}

TokenFileDataset::~TokenFileDataset() { ::close(fd_); }

absl::StatusOr<std::vector<int32_t>> TokenFileDataset::Tokens(
    int64_t sample_id, int64_t expected_length_tokens) const {
  if (sample_id < 0 || sample_id >= num_samples()) {
    return absl::NotFoundError(absl::StrCat(
        "sample ", sample_id, " does not exist in '", tokens_path_,
        "', which has ", num_samples(), " samples",
        num_samples() > 0 ? absl::StrCat(" (ids 0..", num_samples() - 1, ")")
                          : std::string()));
  }
  const int64_t start = offsets_tokens_[static_cast<size_t>(sample_id)];
  const int64_t length =
      offsets_tokens_[static_cast<size_t>(sample_id) + 1] - start;
  if (length != expected_length_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("sample ", sample_id, " in '", tokens_path_, "' has ",
                     length, " tokens but ", expected_length_tokens,
                     " were expected; plan with this dataset's lengths "
                     "(TokenFileDataset::Lengths)"));
  }
  std::vector<unsigned char> bytes(static_cast<size_t>(length * kTokenBytes));
  if (absl::Status status = PreadFully(fd_, tokens_path_, start * kTokenBytes,
                                       length * kTokenBytes, bytes.data());
      !status.ok()) {
    return status;
  }
  std::vector<int32_t> tokens(static_cast<size_t>(length));
  for (int64_t i = 0; i < length; ++i) {
    const uint32_t token = GetLittleEndian32(bytes.data() + i * kTokenBytes);
    if (token >= static_cast<uint64_t>(vocab_size_)) {
      return absl::DataLossError(
          absl::StrCat("token ", i, " of sample ", sample_id, " in '",
                       tokens_path_, "' (byte ", (start + i) * kTokenBytes,
                       ") is ", token, ", outside the vocabulary [0, ",
                       vocab_size_, "); the tokens file is corrupt"));
    }
    tokens[static_cast<size_t>(i)] = static_cast<int32_t>(token);
  }
  return tokens;
}

absl::StatusOr<std::vector<int64_t>> TokenFileDataset::Lengths() const {
  std::vector<int64_t> lengths(static_cast<size_t>(num_samples()));
  for (size_t i = 0; i < lengths.size(); ++i) {
    lengths[i] = offsets_tokens_[i + 1] - offsets_tokens_[i];
  }
  return lengths;
}

// ---------------------------------------------------------------------------

absl::Status WriteSyntheticTokenFiles(const std::string& prefix,
                                      absl::Span<const int64_t> lengths,
                                      uint64_t seed, int64_t vocab_size) {
  absl::StatusOr<SyntheticDataset> synthetic =
      SyntheticDataset::Create(seed, vocab_size);
  if (!synthetic.ok()) return synthetic.status();
  absl::StatusOr<std::unique_ptr<TokenFileWriter>> writer =
      TokenFileWriter::Open(prefix, vocab_size);
  if (!writer.ok()) return writer.status();
  for (size_t i = 0; i < lengths.size(); ++i) {
    absl::StatusOr<std::vector<int32_t>> tokens =
        synthetic->Tokens(static_cast<int64_t>(i), lengths[i]);
    if (!tokens.ok()) return tokens.status();
    absl::StatusOr<int64_t> id = (*writer)->Append(*tokens);
    if (!id.ok()) return id.status();
  }
  return (*writer)->Finish();
}

bool IsSyntheticDataSpec(const std::string& spec) {
  return spec == "synthetic" || absl::StartsWith(spec, "synthetic:");
}

absl::StatusOr<uint64_t> SyntheticDataSeed(const std::string& spec) {
  uint64_t seed = 0;
  if (spec != "synthetic" &&
      !absl::SimpleAtoi(absl::string_view(spec).substr(10), &seed)) {
    return absl::InvalidArgumentError(
        absl::StrCat("data \"", spec,
                     "\": the synthetic seed must be a non-negative "
                     "integer, e.g. synthetic:7"));
  }
  return seed;
}

absl::StatusOr<std::unique_ptr<Dataset>> OpenDataset(const std::string& spec,
                                                     int64_t vocab_size) {
  if (IsSyntheticDataSpec(spec)) {
    DCP_ASSIGN_OR_RETURN(const uint64_t seed, SyntheticDataSeed(spec));
    DCP_ASSIGN_OR_RETURN(SyntheticDataset dataset,
                         SyntheticDataset::Create(seed, vocab_size));
    return std::make_unique<SyntheticDataset>(std::move(dataset));
  }
  if (absl::StartsWith(spec, "tokens:") && spec.size() > 7) {
    const std::string prefix = spec.substr(7);
    absl::StatusOr<std::unique_ptr<TokenFileDataset>> dataset =
        TokenFileDataset::Open(prefix);
    if (!dataset.ok()) {
      return absl::Status(
          dataset.status().code(),
          absl::StrCat("data \"", spec, "\": ", dataset.status().message()));
    }
    if ((*dataset)->vocab_size() > vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data \"", spec, "\" has token ids up to ",
          (*dataset)->vocab_size() - 1, " but the model's vocabulary has ",
          vocab_size, "; tokenize for this model or train a larger one"));
    }
    return std::unique_ptr<Dataset>(*std::move(dataset));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "data \"", spec, "\" is not synthetic, synthetic:SEED or tokens:PREFIX"));
}

}  // namespace dcp

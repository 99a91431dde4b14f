#include "worker/execution/dataset.h"

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// A fresh path prefix under TEST_TMPDIR, unique per test.
std::string TestPrefix(const std::string& name) {
  return TestTempPath(absl::StrCat(
      ::testing::UnitTest::GetInstance()->current_test_info()->name(), "_",
      name));
}

void PutInt64(std::string& bytes, size_t at, int64_t value) {
  for (int i = 0; i < 8; ++i) {
    bytes[at + i] = static_cast<char>(static_cast<uint64_t>(value) >> (8 * i));
  }
}

bool FileExists(const std::string& path) { return std::ifstream(path).good(); }

// Writes `samples` as a token-file dataset at `prefix`.
void WriteSamples(const std::string& prefix,
                  const std::vector<std::vector<int32_t>>& samples,
                  int64_t vocab_size) {
  absl::StatusOr<std::unique_ptr<TokenFileWriter>> writer =
      TokenFileWriter::Open(prefix, vocab_size);
  ASSERT_TRUE(writer.ok()) << writer.status();
  for (size_t i = 0; i < samples.size(); ++i) {
    absl::StatusOr<int64_t> id = (*writer)->Append(samples[i]);
    ASSERT_TRUE(id.ok()) << id.status();
    EXPECT_EQ(*id, static_cast<int64_t>(i));
  }
  ASSERT_TRUE((*writer)->Finish().ok());
}

std::vector<std::vector<int32_t>> RandomSamples(int count, int max_length,
                                                int64_t vocab_size,
                                                uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int32_t>> samples(count);
  for (auto& sample : samples) {
    sample.resize(rng() % (max_length + 1));  // Includes empty samples.
    for (int32_t& token : sample) {
      token = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab_size));
    }
  }
  return samples;
}

std::unique_ptr<TokenFileDataset> MustOpen(const std::string& prefix) {
  absl::StatusOr<std::unique_ptr<TokenFileDataset>> dataset =
      TokenFileDataset::Open(prefix);
  EXPECT_TRUE(dataset.ok()) << dataset.status();
  return dataset.ok() ? *std::move(dataset) : nullptr;
}

// --- SyntheticDataset -------------------------------------------------------

TEST(SyntheticDatasetTest, DeterministicAndInVocabulary) {
  const SyntheticDataset a(/*seed=*/42, /*vocab_size=*/1000);
  const SyntheticDataset b(/*seed=*/42, /*vocab_size=*/1000);
  EXPECT_EQ(a.vocab_size(), 1000);
  for (int64_t id : {0, 1, 7, 123456789}) {
    absl::StatusOr<std::vector<int32_t>> first = a.Tokens(id, 2000);
    absl::StatusOr<std::vector<int32_t>> second = b.Tokens(id, 2000);
    ASSERT_TRUE(first.ok()) << first.status();
    ASSERT_TRUE(second.ok()) << second.status();
    ASSERT_EQ(first->size(), 2000u);
    EXPECT_EQ(*first, *second);
    for (int32_t token : *first) {
      EXPECT_GE(token, 0);
      EXPECT_LT(token, 1000);
    }
    // A shorter request is a prefix of a longer one.
    absl::StatusOr<std::vector<int32_t>> prefix = a.Tokens(id, 17);
    ASSERT_TRUE(prefix.ok());
    EXPECT_EQ(*prefix,
              std::vector<int32_t>(first->begin(), first->begin() + 17));
  }
}

TEST(SyntheticDatasetTest, PinnedValuesAreStableAcrossPlatforms) {
  // The hash must never change: ranks built on different machines, and
  // token files written by older builds, must agree with this one.
  const SyntheticDataset dataset(/*seed=*/1, /*vocab_size=*/256);
  absl::StatusOr<std::vector<int32_t>> tokens = dataset.Tokens(3, 12);
  ASSERT_TRUE(tokens.ok());
  const SyntheticDataset again(/*seed=*/1, /*vocab_size=*/256);
  EXPECT_EQ(*tokens, *again.Tokens(3, 12));
  // Golden values from an independent (Python) implementation of the
  // documented rule.
  EXPECT_THAT(*tokens,
              ElementsAreArray(std::vector<int32_t>{
                  213, 103, 6, 33, 168, 75, 122, 101, 252, 239, 174, 105}));
}

TEST(SyntheticDatasetTest, DifferentIdsAndSeedsDiffer) {
  const SyntheticDataset dataset(/*seed=*/7, /*vocab_size=*/50000);
  std::set<std::vector<int32_t>> distinct;
  for (int64_t id = 0; id < 100; ++id) {
    distinct.insert(*dataset.Tokens(id, 64));
  }
  EXPECT_EQ(distinct.size(), 100u);
  const SyntheticDataset other_seed(/*seed=*/8, /*vocab_size=*/50000);
  EXPECT_NE(*dataset.Tokens(5, 64), *other_seed.Tokens(5, 64));
}

TEST(SyntheticDatasetTest, MostTokensFollowTheBigramRule) {
  const int64_t vocab = 256;
  const SyntheticDataset dataset(/*seed=*/3, vocab);
  int64_t transitions = 0;
  int64_t following = 0;
  std::set<int32_t> seen;
  for (int64_t id = 0; id < 20; ++id) {
    const std::vector<int32_t> tokens = *dataset.Tokens(id, 1000);
    for (size_t p = 1; p < tokens.size(); ++p) {
      ++transitions;
      const int64_t rule =
          (tokens[p - 1] *
               static_cast<int64_t>(SyntheticDataset::kSyntheticMultiplier) +
           static_cast<int64_t>(SyntheticDataset::kSyntheticIncrement)) %
          vocab;
      following += tokens[p] == rule;
    }
    seen.insert(tokens.begin(), tokens.end());
  }
  // 7/8 follow the rule, plus noise that happens to hit it (1/8 * 1/256).
  const double fraction = static_cast<double>(following) / transitions;
  EXPECT_GT(fraction, 0.85);
  EXPECT_LT(fraction, 0.90);
  // The data is not degenerate: every token id shows up.
  EXPECT_EQ(seen.size(), static_cast<size_t>(vocab));
}

TEST(SyntheticDatasetTest, RejectsBadArguments) {
  EXPECT_EQ(SyntheticDataset::Create(1, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SyntheticDataset::Create(1, kMaxVocabSize + 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<SyntheticDataset> largest =
      SyntheticDataset::Create(1, kMaxVocabSize);
  ASSERT_TRUE(largest.ok());
  absl::StatusOr<std::vector<int32_t>> large_tokens = largest->Tokens(0, 100);
  ASSERT_TRUE(large_tokens.ok());
  for (int32_t token : *large_tokens) EXPECT_GE(token, 0);

  const SyntheticDataset dataset(/*seed=*/1, /*vocab_size=*/10);
  EXPECT_EQ(dataset.Tokens(-1, 5).status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(dataset.Tokens(4, -2).status().message(),
              AllOf(HasSubstr("sample 4"), HasSubstr("-2")));
  EXPECT_TRUE(dataset.Tokens(4, 0)->empty());
}

// --- Token files -------------------------------------------------------------

TEST(TokenFileTest, RoundTripsRandomSamples) {
  const std::string prefix = TestPrefix("data");
  const std::vector<std::vector<int32_t>> samples =
      RandomSamples(/*count=*/300, /*max_length=*/200, /*vocab_size=*/32000,
                    /*seed=*/11);
  WriteSamples(prefix, samples, /*vocab_size=*/32000);
  EXPECT_FALSE(FileExists(prefix + ".bin.tmp"));
  EXPECT_FALSE(FileExists(prefix + ".idx.tmp"));

  std::unique_ptr<TokenFileDataset> dataset = MustOpen(prefix);
  ASSERT_NE(dataset, nullptr);
  EXPECT_EQ(dataset->num_samples(), 300);
  EXPECT_EQ(dataset->vocab_size(), 32000);
  std::vector<int64_t> expected_lengths;
  for (const auto& sample : samples) {
    expected_lengths.push_back(static_cast<int64_t>(sample.size()));
  }
  EXPECT_EQ(*dataset->Lengths(), expected_lengths);
  // Read in a scrambled order.
  for (int64_t i = 0; i < 300; ++i) {
    const int64_t id = (i * 7) % 300;
    absl::StatusOr<std::vector<int32_t>> tokens =
        dataset->Tokens(id, expected_lengths[id]);
    ASSERT_TRUE(tokens.ok()) << tokens.status();
    EXPECT_EQ(*tokens, samples[id]) << "sample " << id;
  }
}

TEST(TokenFileTest, FormatIsLittleEndianUint32PlusIndex) {
  const std::string prefix = TestPrefix("data");
  WriteSamples(prefix, {{1, 258}, {}, {70000}}, /*vocab_size=*/100000);
  const std::string tokens = ReadTestFile(prefix + ".bin");
  EXPECT_EQ(tokens, std::string("\x01\0\0\0\x02\x01\0\0\x70\x11\x01\0", 12));
  const std::string index = ReadTestFile(prefix + ".idx");
  ASSERT_EQ(index.size(), 32u + 4 * 8);
  EXPECT_EQ(index.substr(0, 8), std::string("DCPIDX1\0", 8));
  std::string expected(32 + 4 * 8, '\0');
  expected.replace(0, 8, std::string("DCPIDX1\0", 8));
  PutInt64(expected, 8, 1);        // Version.
  PutInt64(expected, 16, 3);       // Count.
  PutInt64(expected, 24, 100000);  // Vocabulary size.
  PutInt64(expected, 32, 0);
  PutInt64(expected, 40, 2);
  PutInt64(expected, 48, 2);
  PutInt64(expected, 56, 3);
  EXPECT_EQ(index, expected);
}

TEST(TokenFileTest, SyntheticFilesMatchSyntheticDataset) {
  const std::string prefix = TestPrefix("synthetic");
  const std::vector<int64_t> lengths = {5, 1, 300, 0, 64};
  ASSERT_TRUE(WriteSyntheticTokenFiles(prefix, lengths, /*seed=*/9,
                                       /*vocab_size=*/512)
                  .ok());
  std::unique_ptr<TokenFileDataset> files = MustOpen(prefix);
  ASSERT_NE(files, nullptr);
  const SyntheticDataset synthetic(/*seed=*/9, /*vocab_size=*/512);
  EXPECT_EQ(files->vocab_size(), 512);
  EXPECT_EQ(*files->Lengths(), lengths);
  for (int64_t id = 0; id < 5; ++id) {
    EXPECT_EQ(*files->Tokens(id, lengths[id]),
              *synthetic.Tokens(id, lengths[id]));
  }
  EXPECT_EQ(
      WriteSyntheticTokenFiles(prefix, {3, -1}, /*seed=*/9, /*vocab_size=*/512)
          .code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(TokenFileTest, ReadsOnlyTheRequestedSamplesBytes) {
  const std::string prefix = TestPrefix("data");
  const std::vector<std::vector<int32_t>> samples =
      RandomSamples(/*count=*/50, /*max_length=*/100, /*vocab_size=*/1000,
                    /*seed=*/5);
  WriteSamples(prefix, samples, /*vocab_size=*/1000);
  std::unique_ptr<TokenFileDataset> clean = MustOpen(prefix);
  ASSERT_NE(clean, nullptr);
  const std::vector<int64_t> lengths = *clean->Lengths();
  // Overwrite every byte after sample 0 with 0xff: out-of-vocabulary ids.
  int64_t first_nonempty_after_0 = 1;
  while (lengths[first_nonempty_after_0] == 0) ++first_nonempty_after_0;
  std::string tokens = ReadTestFile(prefix + ".bin");
  const size_t sample_0_bytes = samples[0].size() * 4;
  ASSERT_GT(tokens.size(), sample_0_bytes);
  tokens.replace(sample_0_bytes, std::string::npos,
                 std::string(tokens.size() - sample_0_bytes, '\xff'));
  WriteTestFile(prefix + ".bin", tokens);

  std::unique_ptr<TokenFileDataset> corrupt = MustOpen(prefix);
  ASSERT_NE(corrupt, nullptr);
  absl::StatusOr<std::vector<int32_t>> first = corrupt->Tokens(0, lengths[0]);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(*first, samples[0]);
  const absl::Status bad =
      corrupt->Tokens(first_nonempty_after_0, lengths[first_nonempty_after_0])
          .status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(bad.message(),
              AllOf(HasSubstr(absl::StrCat("sample ", first_nonempty_after_0)),
                    HasSubstr("4294967295"), HasSubstr(".bin")));
}

TEST(TokenFileTest, LengthMismatchNamesIdAndBothLengths) {
  const std::string prefix = TestPrefix("data");
  WriteSamples(prefix, {{1, 2, 3}, {4, 5, 6, 7, 8}}, /*vocab_size=*/10);
  std::unique_ptr<TokenFileDataset> dataset = MustOpen(prefix);
  ASSERT_NE(dataset, nullptr);
  const absl::Status status = dataset->Tokens(1, 7).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("sample 1"), HasSubstr("has 5 tokens"),
                    HasSubstr("7 were expected")));
}

TEST(TokenFileTest, MissingSampleIsNotFound) {
  const std::string prefix = TestPrefix("data");
  WriteSamples(prefix, {{1}, {2}}, /*vocab_size=*/10);
  std::unique_ptr<TokenFileDataset> dataset = MustOpen(prefix);
  ASSERT_NE(dataset, nullptr);
  for (int64_t id : {-1, 2, 1000}) {
    const absl::Status status = dataset->Tokens(id, 1).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
    EXPECT_THAT(status.message(), AllOf(HasSubstr(absl::StrCat("sample ", id)),
                                        HasSubstr("2 samples")));
  }
}

TEST(TokenFileTest, EmptyDatasetRoundTrips) {
  const std::string prefix = TestPrefix("data");
  WriteSamples(prefix, {}, /*vocab_size=*/10);
  std::unique_ptr<TokenFileDataset> dataset = MustOpen(prefix);
  ASSERT_NE(dataset, nullptr);
  EXPECT_EQ(dataset->num_samples(), 0);
  EXPECT_TRUE(dataset->Lengths()->empty());
  EXPECT_EQ(dataset->Tokens(0, 0).status().code(), absl::StatusCode::kNotFound);
}

TEST(TokenFileTest, MissingFilesAreNotFound) {
  const std::string prefix = TestPrefix("absent");
  const absl::Status status = TokenFileDataset::Open(prefix).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr(prefix + ".idx"));

  WriteSamples(prefix, {{1}}, /*vocab_size=*/10);
  ASSERT_EQ(std::remove((prefix + ".bin").c_str()), 0);
  const absl::Status no_tokens = TokenFileDataset::Open(prefix).status();
  EXPECT_EQ(no_tokens.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(no_tokens.message(), HasSubstr(prefix + ".bin"));
}

// Writes a valid 3-sample dataset, applies `corrupt` to its index bytes, and
// returns what Open says.
template <typename Corrupt>
absl::Status OpenWithCorruptIndex(const std::string& prefix, Corrupt corrupt) {
  WriteSamples(prefix, {{1, 2}, {3, 4, 5}, {6}}, /*vocab_size=*/10);
  std::string index = ReadTestFile(prefix + ".idx");
  corrupt(index);
  WriteTestFile(prefix + ".idx", index);
  return TokenFileDataset::Open(prefix).status();
}

TEST(TokenFileTest, CorruptIndexIsDataLossNamingTheProblem) {
  const std::string prefix = TestPrefix("data");
  const std::string index_path = prefix + ".idx";
  struct Case {
    std::string name;
    std::function<void(std::string&)> corrupt;
    std::vector<std::string> message_parts;
  };
  const std::vector<Case> cases = {
      {"bad magic", [](std::string& s) { s[3] = 'X'; }, {"magic"}},
      {"short header", [](std::string& s) { s.resize(20); }, {"20 bytes"}},
      {"version",
       [](std::string& s) { PutInt64(s, 8, 7); },
       {"version 7", "supports version 1"}},
      {"negative count",
       [](std::string& s) { PutInt64(s, 16, -3); },
       {"negative count -3"}},
      {"count beyond file",
       [](std::string& s) { PutInt64(s, 16, 4); },
       {"says 4 samples", "64 bytes"}},
      {"truncated offsets",
       [](std::string& s) { s.resize(s.size() - 3); },
       {"says 3 samples", "61 bytes"}},
      {"vocab", [](std::string& s) { PutInt64(s, 24, 0); }, {"vocab_size 0"}},
      {"first offset",
       [](std::string& s) { PutInt64(s, 32, 1); },
       {"offset 0", "is 1"}},
      {"non-monotone",
       [](std::string& s) { PutInt64(s, 48, 1); },
       {"offset 2 (end of sample 1) is 1", "less than offset 1",
        "must not decrease"}},
      {"last offset past tokens",
       [](std::string& s) { PutInt64(s, 56, 9); },
       {"truncated", "ends at token 9", "24 bytes"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const absl::Status status = OpenWithCorruptIndex(prefix, c.corrupt);
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
    EXPECT_THAT(status.message(),
                HasSubstr(c.name == "last offset past tokens" ? prefix + ".bin"
                                                              : index_path));
    for (const std::string& part : c.message_parts) {
      EXPECT_THAT(status.message(), HasSubstr(part));
    }
  }
}

TEST(TokenFileTest, TruncatedOrPaddedTokensFileIsDataLoss) {
  const std::string prefix = TestPrefix("data");
  WriteSamples(prefix, {{1, 2}, {3, 4, 5}, {6}}, /*vocab_size=*/10);
  const std::string tokens = ReadTestFile(prefix + ".bin");
  ASSERT_EQ(tokens.size(), 24u);

  WriteTestFile(prefix + ".bin", tokens.substr(0, 22));
  absl::Status status = TokenFileDataset::Open(prefix).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr(prefix + ".bin"), HasSubstr("has 22 bytes"),
                    HasSubstr("ends at token 6"), HasSubstr("truncated")));

  WriteTestFile(prefix + ".bin", tokens + "\x01");
  status = TokenFileDataset::Open(prefix).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("has 25 bytes"), HasSubstr("longer than")));
}

TEST(TokenFileTest, WriterRejectsOutOfVocabularyTokensAndLateAppends) {
  const std::string prefix = TestPrefix("data");
  EXPECT_EQ(TokenFileWriter::Open(prefix, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::unique_ptr<TokenFileWriter>> writer =
      TokenFileWriter::Open(prefix, /*vocab_size=*/10);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->Append({1, 2}).ok());
  const absl::Status bad = (*writer)->Append({3, 10}).status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), AllOf(HasSubstr("token 1 of sample 1 is 10"),
                                   HasSubstr("[0, 10)")));
  EXPECT_EQ((*writer)->Append({-1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*writer)->num_samples(), 1);  // Rejected samples are not added.
  ASSERT_EQ(*(*writer)->Append({9}), 1);
  ASSERT_TRUE((*writer)->Finish().ok());
  EXPECT_EQ((*writer)->Append({1}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*writer)->Finish().code(), absl::StatusCode::kFailedPrecondition);
  std::unique_ptr<TokenFileDataset> dataset = MustOpen(prefix);
  ASSERT_NE(dataset, nullptr);
  EXPECT_EQ(*dataset->Lengths(), (std::vector<int64_t>{2, 1}));
}

TEST(TokenFileTest, AbandonedWriterLeavesExistingFilesUntouched) {
  const std::string prefix = TestPrefix("data");
  WriteSamples(prefix, {{1, 2, 3}}, /*vocab_size=*/10);
  {
    absl::StatusOr<std::unique_ptr<TokenFileWriter>> writer =
        TokenFileWriter::Open(prefix, /*vocab_size=*/10);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Append({4, 5}).ok());
    // Destroyed without Finish().
  }
  EXPECT_FALSE(FileExists(prefix + ".bin.tmp"));
  EXPECT_FALSE(FileExists(prefix + ".idx.tmp"));
  std::unique_ptr<TokenFileDataset> dataset = MustOpen(prefix);
  ASSERT_NE(dataset, nullptr);
  EXPECT_EQ(*dataset->Tokens(0, 3), (std::vector<int32_t>{1, 2, 3}));
}

// --- Concurrency
// ---------------------------------------------------------------

TEST(DatasetConcurrencyTest, FourThreadsReadTheSameTokens) {
  const std::string prefix = TestPrefix("data");
  const std::vector<std::vector<int32_t>> samples =
      RandomSamples(/*count=*/200, /*max_length=*/300, /*vocab_size=*/5000,
                    /*seed=*/21);
  WriteSamples(prefix, samples, /*vocab_size=*/5000);
  std::unique_ptr<TokenFileDataset> files = MustOpen(prefix);
  ASSERT_NE(files, nullptr);
  const SyntheticDataset synthetic(/*seed=*/4, /*vocab_size=*/5000);
  std::vector<std::vector<int32_t>> synthetic_expected;
  for (int64_t id = 0; id < 200; ++id) {
    synthetic_expected.push_back(*synthetic.Tokens(id, 100));
  }

  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round) {
        for (int64_t i = 0; i < 200; ++i) {
          // Each thread walks the ids in its own order.
          const int64_t id = (i * (2 * t + 3) + round) % 200;
          absl::StatusOr<std::vector<int32_t>> from_files =
              files->Tokens(id, static_cast<int64_t>(samples[id].size()));
          if (!from_files.ok() || *from_files != samples[id]) ++mismatches[t];
          absl::StatusOr<std::vector<int32_t>> from_synthetic =
              synthetic.Tokens(id, 100);
          if (!from_synthetic.ok() ||
              *from_synthetic != synthetic_expected[id]) {
            ++mismatches[t];
          }
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

TEST(OpenDatasetTest, NamesWhatIsWrong) {
  EXPECT_TRUE(OpenDataset("synthetic", 256).ok());
  EXPECT_TRUE(OpenDataset("synthetic:7", 256).ok());
  EXPECT_EQ(OpenDataset("synthetic:x", 256).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenDataset("tokens:/nonexistent/prefix", 256).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(OpenDataset("files", 256).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dcp

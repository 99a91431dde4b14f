#include "planner/workload/workload.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/plan/limits.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<LengthSource> MustParse(const std::string& spec) {
  absl::StatusOr<std::unique_ptr<LengthSource>> source =
      ParseWorkloadSpec(spec);
  EXPECT_TRUE(source.ok()) << spec << ": " << source.status();
  if (!source.ok()) return nullptr;
  return *std::move(source);
}

std::vector<int64_t> Draw(LengthSource& source, uint64_t seed, int n) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> out;
  out.reserve(n);
  for (int i = 0; i < n; ++i) out.push_back(source.NextLengthTokens(rng));
  return out;
}

std::vector<int64_t> DrawSpec(const std::string& spec, uint64_t seed, int n) {
  std::unique_ptr<LengthSource> source = MustParse(spec);
  if (source == nullptr) return {};
  return Draw(*source, seed, n);
}

int64_t Median(std::vector<int64_t> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

std::string WriteTempFile(const std::string& name, const std::string& text) {
  const std::string path = TestTempPath(name);
  WriteTestFile(path, text);
  return path;
}

absl::Status ParseError(const std::string& spec) {
  return ParseWorkloadSpec(spec).status();
}

// A spec and a part of the error it must give.
struct SpecError {
  std::string spec;
  std::string expected;
};

// Each spec fails as INVALID_ARGUMENT with its expected part in the message,
// and `in_every` too where given.
void ExpectSpecErrors(const std::vector<SpecError>& cases,
                      const std::string& in_every = "") {
  for (const SpecError& c : cases) {
    SCOPED_TRACE(c.spec);
    const absl::Status s = ParseError(c.spec);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr(c.expected));
    if (!in_every.empty()) {
      EXPECT_THAT(s.message(), HasSubstr(in_every));
    }
  }
}

// --- Determinism -----------------------------------------------------------

TEST(WorkloadTest, SameSeedSameLengthsDifferentSeedDifferent) {
  for (const std::string spec :
       {"longtail", "uniform", "bimodal", "video", "longtail:sigma=0.3"}) {
    SCOPED_TRACE(spec);
    const std::vector<int64_t> a = DrawSpec(spec, 42, 10000);
    const std::vector<int64_t> b = DrawSpec(spec, 42, 10000);
    const std::vector<int64_t> c = DrawSpec(spec, 43, 10000);
    ASSERT_EQ(a.size(), 10000u);
    EXPECT_EQ(a, b);
    EXPECT_NE(a, c);
  }
}

// Pins the exact stream so that an accidental change to the sampling
// algorithms (or a platform dependence) is noticed. The uniform and video
// values involve only integer arithmetic on mt19937_64 output (fixed by the
// C++ standard).
TEST(WorkloadTest, GoldenValues) {
  EXPECT_EQ(DrawSpec("uniform:min=1,max=1000", 1, 6),
            (std::vector<int64_t>{529, 463, 931, 247, 385, 410}));
  EXPECT_EQ(DrawSpec("video", 1, 6),
            (std::vector<int64_t>{256, 256, 1024, 256, 1024, 42120}));
  EXPECT_EQ(DrawSpec("longtail", 1, 6),
            (std::vector<int64_t>{153, 3498, 130, 130, 225, 1714}));
}

// --- Ranges and distributions ----------------------------------------------

TEST(WorkloadTest, LengthsStayWithinMinMax) {
  struct Case {
    std::string spec;
    int64_t min, max;
  };
  for (const Case& c : std::vector<Case>{
           {"longtail", 32, 131072},
           {"longtail:median=2000,sigma=3,min=100,max=5000,tail_min=4000", 100,
            5000},
           {"uniform", 8192, 65536},
           {"uniform:min=5,max=7", 5, 7},
           {"bimodal", 32, 131072},
           {"bimodal:sigma=2,min=500,max=40000", 500, 40000},
       }) {
    SCOPED_TRACE(c.spec);
    std::unique_ptr<LengthSource> source = MustParse(c.spec);
    ASSERT_NE(source, nullptr);
    EXPECT_EQ(source->MaxLengthTokens(), c.max);
    const std::vector<int64_t> v = Draw(*source, 7, 20000);
    EXPECT_EQ(*std::min_element(v.begin(), v.end()) >= c.min, true);
    EXPECT_EQ(*std::max_element(v.begin(), v.end()) <= c.max, true);
  }
}

TEST(WorkloadTest, ClampedSpecHitsBothBounds) {
  // With a huge sigma most body samples are clamped to min or max.
  const std::vector<int64_t> v =
      DrawSpec("longtail:sigma=5,min=100,max=10000,tail_min=5000", 3, 5000);
  EXPECT_GT(std::count(v.begin(), v.end(), 100), 100);
  EXPECT_GT(std::count(v.begin(), v.end(), 10000), 100);
}

TEST(WorkloadTest, LongtailMedianNearMedianKey) {
  for (int64_t median : {1024, 4000}) {
    const std::vector<int64_t> v =
        DrawSpec("longtail:median=" + std::to_string(median), 11, 20000);
    EXPECT_NEAR(static_cast<double>(Median(v)), median, 0.1 * median);
  }
}

TEST(WorkloadTest, LongtailTailFractionNearKey) {
  // sigma=0.5 keeps the body far below tail_min (z > 5.5), so every sample
  // >= tail_min comes from the Pareto tail.
  const std::vector<int64_t> v =
      DrawSpec("longtail:sigma=0.5,tail_fraction=0.05", 5, 20000);
  std::vector<int64_t> tail;
  for (int64_t x : v) {
    if (x >= 16384) tail.push_back(x);
  }
  const double fraction = static_cast<double>(tail.size()) / v.size();
  EXPECT_NEAR(fraction, 0.05, 0.008);
  // Median of Pareto(16384, 1.2) is 16384 * 2^(1/1.2) ~= 29193.
  EXPECT_NEAR(static_cast<double>(Median(tail)), 29193, 0.15 * 29193);

  const std::vector<int64_t> none =
      DrawSpec("longtail:sigma=0.5,tail_fraction=0", 5, 20000);
  EXPECT_LT(*std::max_element(none.begin(), none.end()), 16384);
}

TEST(WorkloadTest, UniformMeanAndSupport) {
  const std::vector<int64_t> v = DrawSpec("uniform", 9, 20000);
  double sum = 0;
  for (int64_t x : v) sum += x;
  EXPECT_NEAR(sum / v.size(), (8192 + 65536) / 2.0, 0.02 * 36864);

  const std::vector<int64_t> small = DrawSpec("uniform:min=1,max=4", 9, 4000);
  std::map<int64_t, int> counts;
  for (int64_t x : small) ++counts[x];
  ASSERT_EQ(counts.size(), 4u);
  for (const auto& [value, count] : counts) {
    EXPECT_NEAR(count, 1000, 120) << value;
  }
  EXPECT_EQ(DrawSpec("uniform:min=77,max=77", 1, 3),
            (std::vector<int64_t>{77, 77, 77}));
}

TEST(WorkloadTest, BimodalLongFraction) {
  const std::vector<int64_t> v =
      DrawSpec("bimodal:long_fraction=0.25", 13, 20000);
  // The geometric mean of the medians (~5793) separates the modes.
  const double long_fraction =
      static_cast<double>(std::count_if(v.begin(), v.end(),
                                        [](int64_t x) { return x > 5793; })) /
      v.size();
  EXPECT_NEAR(long_fraction, 0.25, 0.015);
}

TEST(WorkloadTest, VideoBucketTokensExact) {
  // 720x1280x204 -> ceil(720/16)*ceil(1280/16)*ceil(204/4) = 45*80*51.
  EXPECT_EQ(DrawSpec("video:buckets=720x1280x204@1", 1, 3),
            (std::vector<int64_t>{183600, 183600, 183600}));
  // 240x426x51 -> 15 * 27 * 13 (426/16 = 26.6 rounds up, 51/4 up to 13).
  EXPECT_EQ(DrawSpec("video:buckets=240x426x51", 1, 1),
            (std::vector<int64_t>{5265}));
  // Images: one latent frame.
  EXPECT_EQ(DrawSpec("video:buckets=256x256x1", 1, 1),
            (std::vector<int64_t>{256}));
}

TEST(WorkloadTest, VideoDefaultMixIsSkewed) {
  std::unique_ptr<LengthSource> source = MustParse("video");
  ASSERT_NE(source, nullptr);
  EXPECT_EQ(source->MaxLengthTokens(), 183600);
  const std::vector<int64_t> v = Draw(*source, 17, 20000);
  std::map<int64_t, int> counts;
  for (int64_t x : v) ++counts[x];
  const std::set<int64_t> expected = {256,   1024,  5265,  11960,
                                      42120, 46800, 183600};
  for (const auto& [tokens, count] : counts) {
    EXPECT_TRUE(expected.count(tokens)) << tokens;
  }
  // Images dominate; long 720p clips are a few percent.
  EXPECT_NEAR(counts[256] / 20000.0, 0.30, 0.015);
  EXPECT_NEAR(counts[183600] / 20000.0, 0.02, 0.005);
}

TEST(WorkloadTest, VideoWeightsAndMaxDropsBuckets) {
  const std::vector<int64_t> v = DrawSpec(
      "video:buckets=256x256x1@3; 512x512x1@1 ;720x1280x204@1,max=5000", 2,
      20000);
  const double images256 = std::count(v.begin(), v.end(), 256) / 20000.0;
  EXPECT_NEAR(images256, 0.75, 0.015);
  EXPECT_EQ(*std::max_element(v.begin(), v.end()), 1024);

  std::unique_ptr<LengthSource> capped = MustParse("video:max=50000");
  ASSERT_NE(capped, nullptr);
  EXPECT_EQ(capped->MaxLengthTokens(), 46800);
  EXPECT_THAT(capped->Describe(), HasSubstr("dropped 1"));
}

TEST(WorkloadTest, DescribeNamesEffectiveParameters) {
  EXPECT_THAT(MustParse("longtail:median=2048")->Describe(),
              HasSubstr("median=2048"));
  EXPECT_THAT(MustParse("longtail")->Describe(), HasSubstr("alpha=1.2"));
  EXPECT_THAT(MustParse("uniform:max=9000")->Describe(),
              HasSubstr("[min=8192, max=9000]"));
  EXPECT_THAT(MustParse("bimodal")->Describe(), HasSubstr("long_median=32768"));
  EXPECT_THAT(MustParse("video")->Describe(),
              HasSubstr("720x1280x204=183600tok"));
  for (const std::string spec : {"longtail", "uniform", "bimodal", "video"}) {
    EXPECT_EQ(MustParse(spec)->Describe().find('\n'), std::string::npos);
  }
}

TEST(WorkloadTest, WhitespaceIsTolerated) {
  EXPECT_EQ(DrawSpec(" uniform : min = 3 , max = 3 ", 1, 2),
            (std::vector<int64_t>{3, 3}));
}

// --- Spec errors ------------------------------------------------------------

TEST(WorkloadSpecErrorTest, UnknownKind) {
  const absl::Status s = ParseError("zipf:alpha=2");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("unknown workload kind 'zipf'"));
  EXPECT_THAT(s.message(), HasSubstr("longtail, uniform, bimodal, video"));
  EXPECT_EQ(ParseError("").code(), absl::StatusCode::kInvalidArgument);
}

TEST(WorkloadSpecErrorTest, UnknownKeyIsNamedWithValidKeys) {
  const absl::Status s = ParseError("longtail:median=100,mean=7");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("unknown key 'mean'"));
  EXPECT_THAT(s.message(),
              HasSubstr("median, sigma, tail_fraction, tail_min, alpha, max, "
                        "min"));
  EXPECT_THAT(ParseError("uniform:median=5").message(),
              HasSubstr("valid keys for 'uniform': min, max"));
}

TEST(WorkloadSpecErrorTest, MalformedEntries) {
  ExpectSpecErrors({
      {"uniform:min", "'min' is not of the form key=value"},
      {"uniform:min=10,,max=20", "stray comma"},
      {"uniform:min=", "key 'min' has an empty value"},
      {"uniform:min=1,min=2", "more than once"},
  });
}

TEST(WorkloadSpecErrorTest, BadNumbers) {
  const std::vector<SpecError> cases = {
      {"longtail:median=abc", "key 'median' has value 'abc'"},
      {"longtail:median=0", "key 'median' has value '0'"},
      {"longtail:median=-5", "key 'median' has value '-5'"},
      {"longtail:median=1.5", "key 'median' has value '1.5'"},
      {"longtail:sigma=0", "key 'sigma' has value '0'"},
      {"longtail:sigma=-1", "key 'sigma' has value '-1'"},
      {"longtail:alpha=nan", "key 'alpha' has value 'nan'"},
      {"longtail:alpha=inf", "key 'alpha' has value 'inf'"},
      {"longtail:tail_fraction=1.5", "key 'tail_fraction' has value"},
      {"bimodal:long_fraction=-0.1", "key 'long_fraction' has value"},
      {"uniform:max=99999999999999999999", "key 'max' has value"},
      {"video:max=0", "key 'max' has value '0'"},
  };
  ExpectSpecErrors(cases, /*in_every=*/"valid keys");
}

TEST(WorkloadSpecErrorTest, MinGreaterThanMax) {
  ExpectSpecErrors({
      {"uniform:min=100,max=10", "min=100 is greater than max=10"},
      {"bimodal:min=100,max=10", "min=100 is greater than max=10"},
      {"longtail:min=100,max=10", "min=100 is greater than max=10"},
      // Default median (1024) above an explicit max.
      {"longtail:max=1000,tail_min=500",
       "median=1024 is greater than max=1000"},
      {"longtail:max=20000,tail_min=30000",
       "tail_min=30000 is greater than max=20000"},
      {"bimodal:max=20000", "long_median=32768 is greater than max=20000"},
  });
}

TEST(WorkloadSpecErrorTest, VideoBucketErrors) {
  ExpectSpecErrors({
      {"video:buckets=720x1280@1",
       "entry '720x1280@1': need exactly three dimensions"},
      {"video:buckets=720x0x1", "'0' is not an integer"},
      {"video:buckets=720x1280x1@-2", "weight '-2'"},
      {"video:buckets=;", "no buckets"},
  });
  const absl::Status s = ParseError("video:max=100");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("every bucket exceeds it"));
  EXPECT_THAT(s.message(), HasSubstr("at least 256"));
}

// --- Files and lists --------------------------------------------------------

TEST(LengthsFileTest, ReadsAndCycles) {
  const std::string path = WriteTempFile(
      "lengths_ok.txt", "# lengths\n100\n\n  2000  \r\n# more\n30\n");
  absl::StatusOr<std::vector<int64_t>> lengths = ReadLengthsFile(path);
  ASSERT_TRUE(lengths.ok()) << lengths.status();
  EXPECT_EQ(*lengths, (std::vector<int64_t>{100, 2000, 30}));

  std::unique_ptr<LengthSource> source = MustParse("file:" + path);
  ASSERT_NE(source, nullptr);
  EXPECT_EQ(source->MaxLengthTokens(), 2000);
  EXPECT_THAT(source->Describe(), HasSubstr(path));
  EXPECT_EQ(Draw(*source, 1, 7),
            (std::vector<int64_t>{100, 2000, 30, 100, 2000, 30, 100}));
}

TEST(LengthsFileTest, EmptyFile) {
  const std::string path =
      WriteTempFile("lengths_empty.txt", "# only a comment\n\n");
  const absl::Status s = ReadLengthsFile(path).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("contains no lengths"));
  EXPECT_THAT(s.message(), HasSubstr(path));
  EXPECT_EQ(ParseError("file:" + path).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LengthsFileTest, BadLineNamesFileLineAndText) {
  const std::string path =
      WriteTempFile("lengths_bad.txt", "100\n# c\n200\nabc12\n300\n");
  const absl::Status s = ReadLengthsFile(path).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(path));
  EXPECT_THAT(s.message(), HasSubstr("line 4: 'abc12'"));

  const std::string zero = WriteTempFile("lengths_zero.txt", "5\n0\n");
  EXPECT_THAT(ReadLengthsFile(zero).status().message(),
              HasSubstr("line 2: '0'"));
  const std::string negative = WriteTempFile("lengths_neg.txt", "-5\n");
  EXPECT_THAT(ReadLengthsFile(negative).status().message(),
              HasSubstr("line 1: '-5'"));
}

// Lengths past 2^40 once reached `dcp validate` and `dcp price`, whose sums
// wrapped ("2 sequences, -9223372036854775808 tokens").
TEST(LengthsFileTest, LengthPastTheLimitIsRejectedNamingLineAndLimit) {
  const std::string path = WriteTempFile(
      "lengths_huge.txt", "100\n4611686018427387904\n4611686018427387904\n");
  const absl::Status s = ReadLengthsFile(path).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(path));
  EXPECT_THAT(s.message(), HasSubstr("line 2: 4611686018427387904 tokens"));
  EXPECT_THAT(s.message(), HasSubstr("1099511627776 = 2^40"));
  const std::string at_limit = WriteTempFile(
      "lengths_at_limit.txt", absl::StrCat(kMaxSequenceTokens, "\n"));
  absl::StatusOr<std::vector<int64_t>> lengths = ReadLengthsFile(at_limit);
  ASSERT_TRUE(lengths.ok()) << lengths.status();
  EXPECT_EQ(*lengths, (std::vector<int64_t>{kMaxSequenceTokens}));
}

TEST(LengthsFileTest, MissingFile) {
  const absl::Status s =
      ReadLengthsFile("/nonexistent/dir/lengths.txt").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("/nonexistent/dir/lengths.txt"));
  EXPECT_EQ(ParseError("file:").code(), absl::StatusCode::kInvalidArgument);
}

TEST(ListSourceTest, CyclesInOrder) {
  std::unique_ptr<LengthSource> source = MakeListSource({5, 1, 9});
  EXPECT_EQ(source->MaxLengthTokens(), 9);
  EXPECT_EQ(Draw(*source, 0, 5), (std::vector<int64_t>{5, 1, 9, 5, 1}));
  EXPECT_EQ(MakeListSource({})->MaxLengthTokens(), 0);
}

// --- Batches ----------------------------------------------------------------

BatchStream MustCreate(std::unique_ptr<LengthSource> source,
                       BatchOptions options, uint64_t seed) {
  absl::StatusOr<BatchStream> stream =
      BatchStream::Create(std::move(source), options, seed);
  EXPECT_TRUE(stream.ok()) << stream.status();
  return *std::move(stream);
}

TEST(BatchStreamTest, TokenBudgetKeepsOrderAndNeverLosesSamples) {
  const int64_t kBudget = 65536;
  BatchOptions options;
  options.global_batch_tokens = kBudget;
  BatchStream stream = MustCreate(MustParse("longtail"), options, 123);
  // The same source and seed drawn directly gives the expected order.
  const std::vector<int64_t> expected = DrawSpec("longtail", 123, 50000);

  std::vector<std::vector<Sample>> batches;
  size_t drawn = 0;
  while (drawn < 40000) {
    batches.push_back(stream.Next());
    drawn += batches.back().size();
  }
  int64_t next_id = 0;
  int oversize = 0;
  for (size_t b = 0; b < batches.size(); ++b) {
    const std::vector<Sample>& batch = batches[b];
    ASSERT_FALSE(batch.empty());
    int64_t total = 0;
    for (const Sample& s : batch) {
      ASSERT_EQ(s.id, next_id);
      ASSERT_EQ(s.length_tokens, expected[next_id]);
      ++next_id;
      total += s.length_tokens;
    }
    if (batch.size() > 1) {
      EXPECT_LE(total, kBudget) << "batch " << b;
    } else if (total > kBudget) {
      ++oversize;
    }
    // Greedy: the first sample of the next batch did not fit in this one.
    if (b + 1 < batches.size()) {
      EXPECT_GT(total + batches[b + 1][0].length_tokens, kBudget);
    }
  }
  EXPECT_GT(oversize, 0);  // longtail has samples up to 131072 > budget.
}

TEST(BatchStreamTest, OversizeSampleFormsItsOwnBatch) {
  BatchOptions options;
  options.global_batch_tokens = 50;
  BatchStream stream =
      MustCreate(MakeListSource({10, 100, 10, 10}), options, 0);
  auto lengths = [](const std::vector<Sample>& batch) {
    std::vector<int64_t> out;
    for (const Sample& s : batch) out.push_back(s.length_tokens);
    return out;
  };
  EXPECT_EQ(lengths(stream.Next()), (std::vector<int64_t>{10}));
  EXPECT_EQ(lengths(stream.Next()), (std::vector<int64_t>{100}));
  EXPECT_EQ(lengths(stream.Next()), (std::vector<int64_t>{10, 10, 10}));
  const std::vector<Sample> fourth = stream.Next();
  EXPECT_EQ(lengths(fourth), (std::vector<int64_t>{100}));
  EXPECT_EQ(fourth[0].id, 5);
}

TEST(BatchStreamTest, ExactBudgetFillsCompletely) {
  BatchOptions options;
  options.global_batch_tokens = 30;
  BatchStream stream = MustCreate(MakeListSource({10}), options, 0);
  for (int i = 0; i < 3; ++i) {
    const std::vector<Sample> batch = stream.Next();
    ASSERT_EQ(batch.size(), 3u);
    EXPECT_EQ(batch[0].id, 3 * i);
  }
}

TEST(BatchStreamTest, AHugeTokenBudgetStopsAtThePlannableSequenceCount) {
  BatchOptions options;
  options.global_batch_tokens = int64_t{1} << 40;
  BatchStream stream = MustCreate(MakeListSource({1}), options, 0);
  const std::vector<Sample> first = stream.Next();
  EXPECT_EQ(first.size(), static_cast<size_t>(kMaxBatchSequences));
  // Nothing is dropped: the next batch goes on from the next id.
  const std::vector<Sample> second = stream.Next();
  EXPECT_EQ(second.front().id, first.back().id + 1);
}

TEST(BatchStreamTest, SampleCount) {
  BatchOptions options;
  options.global_batch_samples = 7;
  BatchStream stream = MustCreate(MustParse("uniform"), options, 5);
  const std::vector<int64_t> expected = DrawSpec("uniform", 5, 70);
  int64_t next_id = 0;
  for (int b = 0; b < 10; ++b) {
    const std::vector<Sample> batch = stream.Next();
    ASSERT_EQ(batch.size(), 7u);
    for (const Sample& s : batch) {
      EXPECT_EQ(s.id, next_id);
      EXPECT_EQ(s.length_tokens, expected[next_id]);
      ++next_id;
    }
  }
}

TEST(BatchStreamTest, DeterministicAcrossStreams) {
  BatchOptions options;
  options.global_batch_tokens = 1 << 20;
  BatchStream a = MustCreate(MustParse("video"), options, 77);
  BatchStream b = MustCreate(MustParse("video"), options, 77);
  BatchStream c = MustCreate(MustParse("video"), options, 78);
  bool any_difference = false;
  for (int i = 0; i < 20; ++i) {
    const std::vector<Sample> x = a.Next();
    const std::vector<Sample> y = b.Next();
    const std::vector<Sample> z = c.Next();
    ASSERT_EQ(x.size(), y.size());
    for (size_t j = 0; j < x.size(); ++j) {
      EXPECT_EQ(x[j].id, y[j].id);
      EXPECT_EQ(x[j].length_tokens, y[j].length_tokens);
    }
    if (x.size() != z.size()) any_difference = true;
    for (size_t j = 0; j < std::min(x.size(), z.size()); ++j) {
      if (x[j].length_tokens != z[j].length_tokens) any_difference = true;
    }
  }
  EXPECT_TRUE(any_difference);
}

TEST(BatchStreamTest, CreateErrors) {
  BatchOptions none;
  absl::Status s = BatchStream::Create(MakeListSource({1}), none, 0).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("exactly one"));

  BatchOptions both;
  both.global_batch_tokens = 10;
  both.global_batch_samples = 2;
  EXPECT_THAT(
      BatchStream::Create(MakeListSource({1}), both, 0).status().message(),
      HasSubstr("exactly one"));

  BatchOptions negative;
  negative.global_batch_tokens = -1;
  negative.global_batch_samples = 4;
  EXPECT_THAT(
      BatchStream::Create(MakeListSource({1}), negative, 0).status().message(),
      HasSubstr("global_batch_tokens=-1"));

  BatchOptions ok;
  ok.global_batch_samples = 1;
  EXPECT_THAT(BatchStream::Create(nullptr, ok, 0).status().message(),
              HasSubstr("source is null"));
  EXPECT_THAT(BatchStream::Create(MakeListSource({}), ok, 0).status().message(),
              HasSubstr("no positive lengths"));
}

}  // namespace
}  // namespace dcp

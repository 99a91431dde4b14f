// Over 600 lines by choice: the five length generators, their one spec
// parser (keys, ranges and error messages shared by all of them) and the
// batch stream are one concept, "where the lengths come from", behind
// workload.h; the generators are private classes the parser builds.

#include "planner/workload/workload.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "planner/plan/limits.h"

namespace dcp {
namespace {

// Largest length (tokens) a spec may ask for; keeps every sum of a few
// million lengths and every double<->int64 conversion exact and overflow-free.
constexpr int64_t kMaxSpecTokens = int64_t{1} << 40;
// Largest video height/width (pixels) and frame count accepted in buckets.
constexpr int64_t kMaxVideoDim = int64_t{1} << 20;

constexpr double kPi = 3.14159265358979323846;

// ---------------------------------------------------------------------------
// Platform-independent random variates built on raw mt19937_64 output.

// Uniform double in [0, 1) with 53 random bits.
double Uniform01(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

// Uniform double in the open interval (0, 1), safe for log() and pow(u, -k).
double UniformOpen01(std::mt19937_64& rng) {
  return (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53;
}

// Standard normal via Box-Muller (one variate per call; the sine half is
// discarded so that sources stay stateless).
double StandardNormal(std::mt19937_64& rng) {
  const double u1 = UniformOpen01(rng);
  const double u2 = Uniform01(rng);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * kPi * u2);
}

// Lognormal with the given median: median * exp(sigma * Z).
double LogNormal(std::mt19937_64& rng, double median, double sigma) {
  return median * std::exp(sigma * StandardNormal(rng));
}

// Pareto(x_min, alpha) by inverse CDF: x_min * U^(-1/alpha), U in (0, 1).
double Pareto(std::mt19937_64& rng, double x_min, double alpha) {
  return x_min * std::pow(UniformOpen01(rng), -1.0 / alpha);
}

// Uniform integer in [lo, hi] (lo <= hi) by unbiased rejection sampling.
int64_t UniformInt(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  const uint64_t range = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo);
  if (range == UINT64_MAX) return static_cast<int64_t>(rng());
  const uint64_t n = range + 1;
  // Reject the lowest (2^64 mod n) values so that r % n is unbiased.
  const uint64_t threshold = (0 - n) % n;
  uint64_t r = rng();
  while (r < threshold) r = rng();
  return static_cast<int64_t>(static_cast<uint64_t>(lo) + r % n);
}

// Rounds x to the nearest integer and clamps it to [lo, hi]; NaN maps to lo.
int64_t RoundClamp(double x, int64_t lo, int64_t hi) {
  if (!(x >= static_cast<double>(lo))) return lo;
  if (x >= static_cast<double>(hi)) return hi;
  return std::clamp<int64_t>(std::llround(x), lo, hi);
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---------------------------------------------------------------------------
// Spec parsing helpers.

class Params {
 public:
  Params(std::string kind, std::vector<std::string> valid_keys)
      : kind_(std::move(kind)), valid_keys_(std::move(valid_keys)) {}

  // Parses "key=value,key=value" (may be empty).
  absl::Status Parse(absl::string_view body) {
    if (absl::StripAsciiWhitespace(body).empty()) return absl::OkStatus();
    for (absl::string_view entry : absl::StrSplit(body, ',')) {
      entry = absl::StripAsciiWhitespace(entry);
      if (entry.empty()) {
        return Error(
            absl::StrCat("empty entry in key list '", body,
                         "' (stray comma?); write KIND:key=value,key=value"));
      }
      const size_t eq = entry.find('=');
      if (eq == absl::string_view::npos) {
        return Error(
            absl::StrCat("entry '", entry, "' is not of the form key=value"));
      }
      const std::string key(absl::StripAsciiWhitespace(entry.substr(0, eq)));
      const std::string value(absl::StripAsciiWhitespace(entry.substr(eq + 1)));
      if (std::find(valid_keys_.begin(), valid_keys_.end(), key) ==
          valid_keys_.end()) {
        return Error(
            absl::StrCat("unknown key '", key, "' (value '", value, "')"));
      }
      if (values_.count(key) > 0) {
        return Error(absl::StrCat("key '", key, "' is given more than once"));
      }
      if (value.empty()) {
        return Error(absl::StrCat("key '", key, "' has an empty value"));
      }
      values_[key] = value;
    }
    return absl::OkStatus();
  }

  bool Has(const std::string& key) const { return values_.count(key) > 0; }

  const std::string& Raw(const std::string& key) const {
    return values_.at(key);
  }

  // Reads a positive integer token count into *value (left as is if absent).
  absl::Status GetTokens(const std::string& key, int64_t* value) const {
    auto it = values_.find(key);
    if (it == values_.end()) return absl::OkStatus();
    int64_t parsed = 0;
    if (!absl::SimpleAtoi(it->second, &parsed) || parsed <= 0 ||
        parsed > kMaxSpecTokens) {
      return Error(absl::StrCat("key '", key, "' has value '", it->second,
                                "'; expected an integer number of tokens in "
                                "[1, ",
                                kMaxSpecTokens, "]"));
    }
    *value = parsed;
    return absl::OkStatus();
  }

  // Reads a finite double > 0 into *value (left as is if absent).
  absl::Status GetPositive(const std::string& key, double* value) const {
    auto it = values_.find(key);
    if (it == values_.end()) return absl::OkStatus();
    double parsed = 0;
    if (!absl::SimpleAtod(it->second, &parsed) || !std::isfinite(parsed) ||
        parsed <= 0) {
      return Error(absl::StrCat("key '", key, "' has value '", it->second,
                                "'; expected a finite number > 0"));
    }
    *value = parsed;
    return absl::OkStatus();
  }

  // Reads a probability in [0, 1] into *value (left as is if absent).
  absl::Status GetFraction(const std::string& key, double* value) const {
    auto it = values_.find(key);
    if (it == values_.end()) return absl::OkStatus();
    double parsed = 0;
    if (!absl::SimpleAtod(it->second, &parsed) || !(parsed >= 0) ||
        !(parsed <= 1)) {
      return Error(absl::StrCat("key '", key, "' has value '", it->second,
                                "'; expected a fraction in [0, 1]"));
    }
    *value = parsed;
    return absl::OkStatus();
  }

  // InvalidArgument for this kind, listing the valid keys.
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("workload '", kind_, "': ", what, "; valid keys for '",
                     kind_, "': ", absl::StrJoin(valid_keys_, ", ")));
  }

  // Error unless lo_key <= hi_key.
  absl::Status CheckOrder(const std::string& lo_key, int64_t lo,
                          const std::string& hi_key, int64_t hi) const {
    if (lo <= hi) return absl::OkStatus();
    return Error(absl::StrCat(lo_key, "=", lo, " is greater than ", hi_key, "=",
                              hi, "; make ", lo_key, " <= ", hi_key));
  }

 private:
  std::string kind_;
  std::vector<std::string> valid_keys_;
  std::map<std::string, std::string> values_;
};

// ---------------------------------------------------------------------------
// Sources.

class LongtailSource : public LengthSource {
 public:
  struct Config {
    int64_t median = 1024;
    double sigma = 1.0;
    double tail_fraction = 0.02;
    int64_t tail_min = 16384;
    double alpha = 1.2;
    int64_t max = 131072;
    int64_t min = 32;
  };
  explicit LongtailSource(const Config& c) : c_(c) {}

  int64_t NextLengthTokens(std::mt19937_64& rng) override {
    if (Uniform01(rng) < c_.tail_fraction) {
      return RoundClamp(Pareto(rng, static_cast<double>(c_.tail_min), c_.alpha),
                        c_.tail_min, c_.max);
    }
    return RoundClamp(LogNormal(rng, static_cast<double>(c_.median), c_.sigma),
                      c_.min, c_.max);
  }
  std::string Describe() const override {
    return absl::StrCat(
        "longtail: lognormal body (median=", c_.median,
        " tokens, sigma=", c_.sigma, ") clamped to [", c_.min, ", ", c_.max,
        "]; with probability tail_fraction=", c_.tail_fraction,
        " a Pareto tail (tail_min=", c_.tail_min, ", alpha=", c_.alpha,
        ") capped at max=", c_.max, " tokens");
  }
  int64_t MaxLengthTokens() const override { return c_.max; }

 private:
  Config c_;
};

class UniformSource : public LengthSource {
 public:
  UniformSource(int64_t min, int64_t max) : min_(min), max_(max) {}
  int64_t NextLengthTokens(std::mt19937_64& rng) override {
    return UniformInt(rng, min_, max_);
  }
  std::string Describe() const override {
    return absl::StrCat("uniform: integer lengths uniform in [min=", min_,
                        ", max=", max_, "] tokens");
  }
  int64_t MaxLengthTokens() const override { return max_; }

 private:
  int64_t min_;
  int64_t max_;
};

class BimodalSource : public LengthSource {
 public:
  struct Config {
    int64_t short_median = 1024;
    int64_t long_median = 32768;
    double long_fraction = 0.1;
    double sigma = 0.5;
    int64_t min = 32;
    int64_t max = 131072;
  };
  explicit BimodalSource(const Config& c) : c_(c) {}

  int64_t NextLengthTokens(std::mt19937_64& rng) override {
    const int64_t median =
        Uniform01(rng) < c_.long_fraction ? c_.long_median : c_.short_median;
    return RoundClamp(LogNormal(rng, static_cast<double>(median), c_.sigma),
                      c_.min, c_.max);
  }
  std::string Describe() const override {
    return absl::StrCat(
        "bimodal: lognormal(short_median=", c_.short_median,
        " tokens) or, with probability long_fraction=", c_.long_fraction,
        ", lognormal(long_median=", c_.long_median,
        " tokens), sigma=", c_.sigma, ", clamped to [", c_.min, ", ", c_.max,
        "] tokens");
  }
  int64_t MaxLengthTokens() const override { return c_.max; }

 private:
  Config c_;
};

struct VideoBucket {
  int64_t height = 0;
  int64_t width = 0;
  int64_t frames = 0;
  double weight = 0;
  // ceil(H/16) * ceil(W/16) * ceil(F/4): 8x spatial VAE + 2x2 patches,
  // 4x temporal VAE (an image, F=1, is one latent frame).
  int64_t Tokens() const {
    return CeilDiv(height, 16) * CeilDiv(width, 16) * CeilDiv(frames, 4);
  }
};

// A skewed mix in the spirit of Open-Sora training data: mostly images and
// short low-resolution clips, a few percent of long 720p clips.
std::vector<VideoBucket> DefaultVideoBuckets() {
  return {
      {256, 256, 1, 30},    //    256 tokens: 256x256 image
      {512, 512, 1, 25},    //   1024 tokens: 512x512 image
      {240, 426, 51, 20},   //   5265 tokens: 240p, 51 frames
      {360, 640, 51, 12},   //  11960 tokens: 360p, 51 frames
      {480, 854, 102, 8},   //  42120 tokens: 480p, 102 frames
      {720, 1280, 51, 3},   //  46800 tokens: 720p, 51 frames
      {720, 1280, 204, 2},  // 183600 tokens: 720p, 204 frames
  };
}

class VideoSource : public LengthSource {
 public:
  VideoSource(std::vector<VideoBucket> buckets, int64_t num_dropped,
              std::optional<int64_t> cap)
      : buckets_(std::move(buckets)), num_dropped_(num_dropped), cap_(cap) {
    double total = 0;
    for (const VideoBucket& b : buckets_) {
      total += b.weight;
      cumulative_.push_back(total);
      max_tokens_ = std::max(max_tokens_, b.Tokens());
    }
  }

  int64_t NextLengthTokens(std::mt19937_64& rng) override {
    const double u = Uniform01(rng) * cumulative_.back();
    const size_t i =
        std::upper_bound(cumulative_.begin(), cumulative_.end(), u) -
        cumulative_.begin();
    return buckets_[std::min(i, buckets_.size() - 1)].Tokens();
  }
  std::string Describe() const override {
    const double total = cumulative_.back();
    std::vector<std::string> parts;
    for (const VideoBucket& b : buckets_) {
      parts.push_back(absl::StrCat(b.height, "x", b.width, "x", b.frames, "=",
                                   b.Tokens(), "tok@", 100.0 * b.weight / total,
                                   "%"));
    }
    std::string out = absl::StrCat("video: ", buckets_.size(), " buckets (",
                                   absl::StrJoin(parts, ", "), "), largest ",
                                   max_tokens_, " tokens");
    if (cap_.has_value()) {
      absl::StrAppend(&out, "; max=", *cap_, " dropped ", num_dropped_,
                      " bucket(s)");
    }
    return out;
  }
  int64_t MaxLengthTokens() const override { return max_tokens_; }

 private:
  std::vector<VideoBucket> buckets_;
  std::vector<double> cumulative_;
  int64_t num_dropped_ = 0;
  std::optional<int64_t> cap_;
  int64_t max_tokens_ = 0;
};

class ListSource : public LengthSource {
 public:
  ListSource(std::vector<int64_t> lengths, std::string label)
      : lengths_(std::move(lengths)), label_(std::move(label)) {}

  int64_t NextLengthTokens(std::mt19937_64& /*rng*/) override {
    if (lengths_.empty()) return 0;
    const int64_t length = lengths_[next_];
    next_ = (next_ + 1) % lengths_.size();
    return length;
  }
  std::string Describe() const override {
    if (lengths_.empty()) return absl::StrCat(label_, ": empty list");
    double sum = 0;
    for (int64_t l : lengths_) sum += static_cast<double>(l);
    return absl::StrCat(label_, ": ", lengths_.size(),
                        " lengths cycled in order (min ",
                        *std::min_element(lengths_.begin(), lengths_.end()),
                        ", mean ", sum / static_cast<double>(lengths_.size()),
                        ", max ", MaxLengthTokens(), " tokens)");
  }
  int64_t MaxLengthTokens() const override {
    if (lengths_.empty()) return 0;
    return *std::max_element(lengths_.begin(), lengths_.end());
  }

 private:
  std::vector<int64_t> lengths_;
  std::string label_;
  size_t next_ = 0;
};

// ---------------------------------------------------------------------------
// Per-kind parsers.

absl::StatusOr<std::unique_ptr<LengthSource>> ParseLongtail(
    absl::string_view body) {
  Params p("longtail", {"median", "sigma", "tail_fraction", "tail_min", "alpha",
                        "max", "min"});
  DCP_RETURN_IF_ERROR(p.Parse(body));
  LongtailSource::Config c;
  DCP_RETURN_IF_ERROR(p.GetTokens("median", &c.median));
  DCP_RETURN_IF_ERROR(p.GetPositive("sigma", &c.sigma));
  DCP_RETURN_IF_ERROR(p.GetFraction("tail_fraction", &c.tail_fraction));
  DCP_RETURN_IF_ERROR(p.GetTokens("tail_min", &c.tail_min));
  DCP_RETURN_IF_ERROR(p.GetPositive("alpha", &c.alpha));
  DCP_RETURN_IF_ERROR(p.GetTokens("max", &c.max));
  DCP_RETURN_IF_ERROR(p.GetTokens("min", &c.min));
  DCP_RETURN_IF_ERROR(p.CheckOrder("min", c.min, "max", c.max));
  DCP_RETURN_IF_ERROR(p.CheckOrder("min", c.min, "median", c.median));
  DCP_RETURN_IF_ERROR(p.CheckOrder("median", c.median, "max", c.max));
  DCP_RETURN_IF_ERROR(p.CheckOrder("min", c.min, "tail_min", c.tail_min));
  DCP_RETURN_IF_ERROR(p.CheckOrder("tail_min", c.tail_min, "max", c.max));
  return std::unique_ptr<LengthSource>(new LongtailSource(c));
}

absl::StatusOr<std::unique_ptr<LengthSource>> ParseUniform(
    absl::string_view body) {
  Params p("uniform", {"min", "max"});
  DCP_RETURN_IF_ERROR(p.Parse(body));
  int64_t min = 8192;
  int64_t max = 65536;
  DCP_RETURN_IF_ERROR(p.GetTokens("min", &min));
  DCP_RETURN_IF_ERROR(p.GetTokens("max", &max));
  DCP_RETURN_IF_ERROR(p.CheckOrder("min", min, "max", max));
  return std::unique_ptr<LengthSource>(new UniformSource(min, max));
}

absl::StatusOr<std::unique_ptr<LengthSource>> ParseBimodal(
    absl::string_view body) {
  Params p("bimodal", {"short_median", "long_median", "long_fraction", "sigma",
                       "min", "max"});
  DCP_RETURN_IF_ERROR(p.Parse(body));
  BimodalSource::Config c;
  DCP_RETURN_IF_ERROR(p.GetTokens("short_median", &c.short_median));
  DCP_RETURN_IF_ERROR(p.GetTokens("long_median", &c.long_median));
  DCP_RETURN_IF_ERROR(p.GetFraction("long_fraction", &c.long_fraction));
  DCP_RETURN_IF_ERROR(p.GetPositive("sigma", &c.sigma));
  DCP_RETURN_IF_ERROR(p.GetTokens("min", &c.min));
  DCP_RETURN_IF_ERROR(p.GetTokens("max", &c.max));
  DCP_RETURN_IF_ERROR(p.CheckOrder("min", c.min, "max", c.max));
  DCP_RETURN_IF_ERROR(
      p.CheckOrder("min", c.min, "short_median", c.short_median));
  DCP_RETURN_IF_ERROR(
      p.CheckOrder("short_median", c.short_median, "max", c.max));
  DCP_RETURN_IF_ERROR(p.CheckOrder("min", c.min, "long_median", c.long_median));
  DCP_RETURN_IF_ERROR(p.CheckOrder("long_median", c.long_median, "max", c.max));
  return std::unique_ptr<LengthSource>(new BimodalSource(c));
}

absl::StatusOr<std::vector<VideoBucket>> ParseVideoBuckets(
    const Params& p, absl::string_view text) {
  std::vector<VideoBucket> buckets;
  for (absl::string_view entry : absl::StrSplit(text, ';')) {
    entry = absl::StripAsciiWhitespace(entry);
    if (entry.empty()) continue;
    const auto bad = [&](absl::string_view why) {
      return p.Error(absl::StrCat("key 'buckets' has entry '", entry,
                                  "': ", why,
                                  "; expected HxWxF@weight, e.g. "
                                  "720x1280x51@3 (F=1 for images)"));
    };
    VideoBucket b;
    absl::string_view dims = entry;
    b.weight = 1;
    const size_t at = entry.find('@');
    if (at != absl::string_view::npos) {
      dims = absl::StripAsciiWhitespace(entry.substr(0, at));
      const absl::string_view weight =
          absl::StripAsciiWhitespace(entry.substr(at + 1));
      if (!absl::SimpleAtod(weight, &b.weight) || !std::isfinite(b.weight) ||
          b.weight <= 0) {
        return bad(
            absl::StrCat("weight '", weight, "' is not a finite number > 0"));
      }
    }
    const std::vector<absl::string_view> parts =
        absl::StrSplit(dims, absl::ByAnyChar("xX"));
    if (parts.size() != 3) {
      return bad("need exactly three dimensions HxWxF");
    }
    int64_t* fields[3] = {&b.height, &b.width, &b.frames};
    for (int i = 0; i < 3; ++i) {
      const absl::string_view part = absl::StripAsciiWhitespace(parts[i]);
      if (!absl::SimpleAtoi(part, fields[i]) || *fields[i] <= 0 ||
          *fields[i] > kMaxVideoDim) {
        return bad(absl::StrCat("'", part, "' is not an integer in [1, ",
                                kMaxVideoDim, "]"));
      }
    }
    buckets.push_back(b);
  }
  if (buckets.empty()) {
    return p.Error(absl::StrCat("key 'buckets' has value '", text,
                                "' with no buckets; expected "
                                "HxWxF@weight;HxWxF@weight;..."));
  }
  return buckets;
}

absl::StatusOr<std::unique_ptr<LengthSource>> ParseVideo(
    absl::string_view body) {
  Params p("video", {"buckets", "max"});
  DCP_RETURN_IF_ERROR(p.Parse(body));
  std::vector<VideoBucket> buckets = DefaultVideoBuckets();
  if (p.Has("buckets")) {
    absl::StatusOr<std::vector<VideoBucket>> parsed =
        ParseVideoBuckets(p, p.Raw("buckets"));
    if (!parsed.ok()) return parsed.status();
    buckets = *std::move(parsed);
  }
  std::optional<int64_t> cap;
  int64_t num_dropped = 0;
  if (p.Has("max")) {
    int64_t max = 0;
    DCP_RETURN_IF_ERROR(p.GetTokens("max", &max));
    cap = max;
    std::vector<VideoBucket> kept;
    int64_t smallest = INT64_MAX;
    for (const VideoBucket& b : buckets) {
      smallest = std::min(smallest, b.Tokens());
      if (b.Tokens() <= max) kept.push_back(b);
    }
    if (kept.empty()) {
      return p.Error(absl::StrCat("key 'max' has value '", max,
                                  "' but every bucket exceeds it (the "
                                  "smallest has ",
                                  smallest, " tokens); raise max to at least ",
                                  smallest, " or add smaller buckets"));
    }
    num_dropped = static_cast<int64_t>(buckets.size() - kept.size());
    buckets = std::move(kept);
  }
  return std::unique_ptr<LengthSource>(
      new VideoSource(std::move(buckets), num_dropped, cap));
}

}  // namespace

absl::StatusOr<std::unique_ptr<LengthSource>> ParseWorkloadSpec(
    absl::string_view spec) {
  spec = absl::StripAsciiWhitespace(spec);
  const size_t colon = spec.find(':');
  const absl::string_view kind =
      absl::StripAsciiWhitespace(spec.substr(0, colon));
  const absl::string_view body = colon == absl::string_view::npos
                                     ? absl::string_view()
                                     : spec.substr(colon + 1);
  if (kind == "longtail") return ParseLongtail(body);
  if (kind == "uniform") return ParseUniform(body);
  if (kind == "bimodal") return ParseBimodal(body);
  if (kind == "video") return ParseVideo(body);
  if (kind == "file") {
    const std::string path(absl::StripAsciiWhitespace(body));
    if (path.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "workload spec '", spec,
          "' names no file; write file:PATH with one length per line"));
    }
    absl::StatusOr<std::vector<int64_t>> lengths = ReadLengthsFile(path);
    if (!lengths.ok()) return lengths.status();
    return std::unique_ptr<LengthSource>(
        new ListSource(*std::move(lengths), absl::StrCat("file ", path)));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown workload kind '", kind, "' in spec '", spec,
      "'; valid kinds: longtail, uniform, bimodal, video, file:PATH "
      "(optionally followed by :key=value,...)"));
}

absl::StatusOr<std::vector<int64_t>> ReadLengthsFile(const std::string& path) {
  std::ifstream in(path);
  if (!in.is_open()) {
    return absl::NotFoundError(
        absl::StrCat("cannot open lengths file '", path,
                     "'; check the path and permissions"));
  }
  std::vector<int64_t> lengths;
  std::string line;
  int64_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    const absl::string_view text = absl::StripAsciiWhitespace(line);
    if (text.empty() || text[0] == '#') continue;
    int64_t length = 0;
    if (!absl::SimpleAtoi(text, &length) || length <= 0) {
      const std::string shown = text.size() > 80
                                    ? absl::StrCat(text.substr(0, 80), "...")
                                    : std::string(text);
      return absl::InvalidArgumentError(absl::StrCat(
          "lengths file '", path, "' line ", line_number, ": '", shown,
          "' is not a positive integer; write one length in tokens per line "
          "(blank lines and # comments are ignored)"));
    }
    if (length > kMaxSequenceTokens) {
      return absl::InvalidArgumentError(absl::StrCat(
          "lengths file '", path, "' line ", line_number, ": ", length,
          " tokens is longer than the longest supported sequence (",
          kMaxSequenceTokens, " = 2^40 tokens, planner/plan/limits.h)"));
    }
    lengths.push_back(length);
  }
  if (in.bad()) {
    return absl::DataLossError(absl::StrCat(
        "error reading lengths file '", path, "' after line ", line_number));
  }
  if (lengths.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "lengths file '", path, "' contains no lengths (", line_number,
        " lines, all blank or comments); write one positive integer per "
        "line"));
  }
  return lengths;
}

std::unique_ptr<LengthSource> MakeListSource(std::vector<int64_t> lengths) {
  return std::make_unique<ListSource>(std::move(lengths), "list");
}

// ---------------------------------------------------------------------------
// BatchStream.

BatchStream::BatchStream(std::unique_ptr<LengthSource> source,
                         BatchOptions options, uint64_t seed)
    : source_(std::move(source)), options_(options), rng_(seed) {}

absl::StatusOr<BatchStream> BatchStream::Create(
    std::unique_ptr<LengthSource> source, BatchOptions options, uint64_t seed) {
  if (source == nullptr) {
    return absl::InvalidArgumentError(
        "BatchStream: source is null; pass a LengthSource from "
        "ParseWorkloadSpec or MakeListSource");
  }
  if (options.global_batch_tokens < 0 || options.global_batch_samples < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BatchStream: global_batch_tokens=", options.global_batch_tokens,
        " and global_batch_samples=", options.global_batch_samples,
        " must not be negative"));
  }
  if ((options.global_batch_tokens > 0) == (options.global_batch_samples > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BatchStream: global_batch_tokens=", options.global_batch_tokens,
        " and global_batch_samples=", options.global_batch_samples,
        "; set exactly one of them > 0 and the other to 0"));
  }
  if (source->MaxLengthTokens() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BatchStream: source '", source->Describe(),
        "' has no positive lengths (MaxLengthTokens()=",
        source->MaxLengthTokens(), "); give it at least one length > 0"));
  }
  return BatchStream(std::move(source), options, seed);
}

Sample BatchStream::Draw() {
  Sample sample;
  sample.id = next_id_++;
  // A misbehaving source must not stall batching; treat <= 0 as 1 token.
  sample.length_tokens = std::max<int64_t>(1, source_->NextLengthTokens(rng_));
  return sample;
}

std::vector<Sample> BatchStream::Next() {
  std::vector<Sample> batch;
  if (options_.global_batch_samples > 0) {
    batch.reserve(static_cast<size_t>(
        std::min<int64_t>(options_.global_batch_samples, kMaxBatchSequences)));
    for (int64_t i = 0; i < options_.global_batch_samples; ++i) {
      batch.push_back(Draw());
    }
    return batch;
  }
  const int64_t budget = options_.global_batch_tokens;
  batch.push_back(pending_.has_value() ? *pending_ : Draw());
  pending_.reset();
  int64_t total = batch.back().length_tokens;
  // A batch stops at kMaxBatchSequences sequences even under its budget
  // (memory stays bounded; the planner refuses larger batches anyway).
  while (static_cast<int64_t>(batch.size()) < kMaxBatchSequences) {
    Sample sample = Draw();
    if (sample.length_tokens <= budget - total) {
      total += sample.length_tokens;
      batch.push_back(sample);
    } else {
      pending_ = sample;
      break;
    }
  }
  return batch;
}

}  // namespace dcp

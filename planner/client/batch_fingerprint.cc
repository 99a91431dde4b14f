#include "planner/client/batch_fingerprint.h"

namespace dcp {

uint64_t BatchFingerprint(absl::Span<const Sample> samples) {
  BatchFingerprinter fingerprinter(samples.size());
  for (const Sample& sample : samples) {
    fingerprinter.Add(sample.id, sample.length_tokens);
  }
  return fingerprinter.Finish();
}

}  // namespace dcp

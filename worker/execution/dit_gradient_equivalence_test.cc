// gradient_equivalence_test.cc's check for the video DiT: one global batch
// of latent samples run under very different plans (SP sizes, packings,
// accumulation counts, recompute) over 4 Gloo ranks on loopback, in fp32,
// fp32 with ZeRO-1 and bf16 with ZeRO-1, gives the same gradients and the
// same parameters after an AdamW step as one process running the whole
// batch with SP 1 and no recompute (equivalence_test_support.h says how
// each mode is compared). Each rank is a child process
// (multiprocess_test_util.h) that computes the references itself.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "cost_model/model_spec.h"
#include "gtest/gtest.h"
#include "planner/plan/plan.h"
#include "torch/torch.h"
#include "worker/communication/multiprocess_test_util.h"
#include "worker/execution/dit_model.h"
#include "worker/execution/equivalence_test_support.h"
#include "worker/execution/latent_dataset.h"
#include "worker/execution/plan_executor.h"
#include "worker/execution/trainable_model.h"

namespace dcp {
namespace {

using ::dcp::testing::EquivalenceCase;
using ::dcp::testing::EquivalenceSequenceLengths;

constexpr int kWorldSize = 4;
constexpr uint64_t kSeed = 4321;
constexpr int64_t kChannels = 8;
constexpr absl::Duration kRunTimeout = absl::Seconds(120);

SequenceInput SequenceOf(int index) {
  static const SyntheticLatentDataset dataset =
      *SyntheticLatentDataset::Create(/*seed=*/17, kChannels);
  SequenceInput input;
  input.latent = *dataset.Sample(/*sample_id=*/100 + index,
                                 EquivalenceSequenceLengths().at(index));
  return input;
}

EquivalenceCase DitCase() {
  EquivalenceCase dit;
  dit.label = "DiT";
  dit.make_model = [](torch::Dtype dtype)
      -> absl::StatusOr<std::shared_ptr<TrainableModel>> {
    absl::StatusOr<ModelSpec> spec = ModelPreset("tiny-dit");
    if (!spec.ok()) return spec.status();
    DitModelOptions options;
    options.seed = kSeed;
    options.dtype = dtype;
    options.latent_channels = kChannels;
    // Random modulation: with adaLN-Zero most gradients would be exactly 0
    // at the first step, and the check would see little.
    options.zero_init_modulation = false;
    absl::StatusOr<std::shared_ptr<DitModel>> model =
        DitModel::Create(*spec, options);
    if (!model.ok()) return model.status();
    return std::shared_ptr<TrainableModel>(*std::move(model));
  };
  dit.inputs_of = SequenceOf;
  // The DiT's loss counts every token.
  for (int64_t length : EquivalenceSequenceLengths()) {
    dit.total_loss_tokens += length;
  }
  dit.require_nonzero_gradients = true;
  return dit;
}

DCP_RANK_MAIN(RunDitPlanAndCompare) {
  return ::dcp::testing::RunPlanInEveryMode(DitCase(), context);
}

class DitGradientEquivalenceTest
    : public ::testing::TestWithParam<std::string> {};

TEST_P(DitGradientEquivalenceTest,
       PlanMatchesSingleProcessReferenceInEveryMode) {
  EXPECT_TRUE(dcp::testing::EveryRankSucceeded(
      kWorldSize, kRunTimeout, "RunDitPlanAndCompare", GetParam()));
}

INSTANTIATE_TEST_SUITE_P(
    Plans, DitGradientEquivalenceTest,
    ::testing::ValuesIn(::dcp::testing::EquivalencePlanNames()));

// The comparison can fail: in every mode the whole batch on one process
// passes and a plan missing one sequence does not, the bf16 tolerance
// included.
TEST(DitGradientEquivalenceReferenceTest, MissingSequenceIsDetectedInEveryMode) {
  const absl::Status status =
      ::dcp::testing::CheckMissingSequenceIsDetected(DitCase());
  EXPECT_TRUE(status.ok()) << status;
}

}  // namespace
}  // namespace dcp

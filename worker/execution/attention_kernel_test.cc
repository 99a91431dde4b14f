#include "worker/execution/attention_kernel.h"

#include <string>

#include "absl/status/statusor.h"
#include "cost_model/model_spec.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

constexpr AttentionDevice kCpu{};
constexpr AttentionDevice kH200{/*cuda=*/true, /*compute_capability_major=*/9};
constexpr AttentionDevice kV100{/*cuda=*/true, /*compute_capability_major=*/7};

// Every model the planner plans, in bfloat16 on an H200 (how the GPU path
// trains), runs varlen flash attention: never a per-sequence loop, never
// the math kernel.
TEST(AttentionKernelTest, EveryPresetRunsVarlenFlashInBfloat16OnAnH200) {
  for (const std::string& name : ModelPresetNames()) {
    absl::StatusOr<ModelSpec> spec = ModelPreset(name);
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(ChooseAttentionKernel(kH200, /*half_precision=*/true,
                                    spec->HeadDim()),
              AttentionKernel::kVarlenFlash)
        << name << " (head_dim " << spec->HeadDim() << ")";
  }
}

TEST(AttentionKernelTest, GpuInputsFlashCannotTakeRunFusedGqaPerSequence) {
  // float32, an odd head dimension, one above 256, a pre-Ampere GPU.
  EXPECT_EQ(ChooseAttentionKernel(kH200, /*half_precision=*/false, 128),
            AttentionKernel::kPerSequenceFusedGqa);
  EXPECT_EQ(ChooseAttentionKernel(kH200, true, 100),
            AttentionKernel::kPerSequenceFusedGqa);
  EXPECT_EQ(ChooseAttentionKernel(kH200, true, 512),
            AttentionKernel::kPerSequenceFusedGqa);
  EXPECT_EQ(ChooseAttentionKernel(kV100, true, 128),
            AttentionKernel::kPerSequenceFusedGqa);
}

TEST(AttentionKernelTest, TheCpuRunsPerSequence) {
  EXPECT_EQ(ChooseAttentionKernel(kCpu, true, 128),
            AttentionKernel::kPerSequence);
  EXPECT_EQ(ChooseAttentionKernel(kCpu, false, 64),
            AttentionKernel::kPerSequence);
  EXPECT_STREQ(AttentionKernelName(AttentionKernel::kVarlenFlash),
               "varlen-flash");
}

}  // namespace
}  // namespace dcp

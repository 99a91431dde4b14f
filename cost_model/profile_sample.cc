#include "cost_model/profile_sample.h"

#include <cmath>
#include <cstddef>
#include <initializer_list>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"

namespace dcp {

ProfileSample MicroBatchSample(const MicroBatchShape &shape,
                               int checkpointed_layers,
                               double measured_seconds) {
  ProfileSample sample;
  sample.op = ProfileSample::Op::kMicroBatch;
  sample.tokens = static_cast<double>(shape.tokens_per_rank);
  sample.sum_lengths = static_cast<double>(shape.sum_lengths);
  sample.sum_squared_lengths = shape.sum_squared_lengths;
  sample.num_sequences = shape.num_sequences;
  sample.checkpointed_layers = checkpointed_layers;
  sample.measured_seconds = measured_seconds;
  return sample;
}

MicroBatchShape ShapeOfMicroBatchSample(const ProfileSample &sample) {
  MicroBatchShape shape;
  shape.sp_size =
      sample.op == ProfileSample::Op::kSpMicroBatch ? sample.group_size : 1;
  shape.tokens_per_rank = static_cast<int64_t>(sample.tokens);
  shape.sum_lengths = static_cast<int64_t>(sample.sum_lengths);
  shape.sum_squared_lengths = sample.sum_squared_lengths;
  shape.num_sequences = sample.num_sequences;
  return shape;
}

ProfileSample SpMicroBatchSample(const MicroBatchShape &shape, bool inter_node,
                                 int checkpointed_layers,
                                 double measured_seconds,
                                 double communication_seconds) {
  ProfileSample sample =
      MicroBatchSample(shape, checkpointed_layers, measured_seconds);
  sample.op = ProfileSample::Op::kSpMicroBatch;
  sample.group_size = shape.sp_size;
  sample.inter_node = inter_node;
  sample.communication_seconds = communication_seconds;
  return sample;
}

const char *ProfileOpName(ProfileSample::Op op) {
  switch (op) {
    case ProfileSample::Op::kGemm:
      return "gemm";
    case ProfileSample::Op::kAttentionForward:
      return "attention_forward";
    case ProfileSample::Op::kAttentionBackward:
      return "attention_backward";
    case ProfileSample::Op::kAllToAll:
      return "all_to_all";
    case ProfileSample::Op::kAllReduce:
      return "all_reduce";
    case ProfileSample::Op::kActivationMemory:
      return "activation_memory";
    case ProfileSample::Op::kReduceScatter:
      return "reduce_scatter";
    case ProfileSample::Op::kAllGather:
      return "all_gather";
    case ProfileSample::Op::kMicroBatch:
      return "micro_batch";
    case ProfileSample::Op::kOptimizerStep:
      return "optimizer_step";
    case ProfileSample::Op::kSpMicroBatch:
      return "sp_micro_batch";
  }
  return "unknown";
}

absl::Status ValidateProfileSample(const ProfileSample &sample, size_t index,
                                   int num_layers) {
  auto bad = [&](absl::string_view field, auto value,
                 absl::string_view requirement) {
    return absl::InvalidArgumentError(absl::StrCat(
        "profile sample ", index, " (", ProfileOpName(sample.op), "): ", field,
        " = ", value, " ", requirement, "; fix or drop the sample"));
  };
  const std::pair<const char *, double> doubles[] = {
      {"flops", sample.flops},
      {"tokens", sample.tokens},
      {"sum_squared_lengths", sample.sum_squared_lengths},
      {"sum_lengths", sample.sum_lengths},
      {"bytes", sample.bytes},
      {"measured_seconds", sample.measured_seconds},
      {"measured_bytes", sample.measured_bytes},
      {"communication_seconds", sample.communication_seconds},
  };
  for (const auto &[field, value] : doubles) {
    if (!std::isfinite(value) || value < 0) {
      return bad(field, value, "must be a finite non-negative number");
    }
  }
  // The first of `fields` that is not > 0 as an error, else OK.
  auto positive =
      [&](std::initializer_list<std::pair<const char *, double>> fields) {
        for (const auto &[field, value] : fields) {
          if (value <= 0) return bad(field, value, "must be > 0");
        }
        return absl::OkStatus();
      };
  auto checkpointed_layers_in_range = [&]() {
    if (sample.checkpointed_layers >= 0 &&
        sample.checkpointed_layers <= num_layers) {
      return absl::OkStatus();
    }
    return bad("checkpointed_layers", sample.checkpointed_layers,
               absl::StrCat("must be in [0, num_layers = ", num_layers, "]"));
  };
  switch (sample.op) {
    case ProfileSample::Op::kGemm:
      DCP_RETURN_IF_ERROR(
          positive({{"flops", sample.flops}, {"tokens", sample.tokens}}));
      break;
    case ProfileSample::Op::kAttentionForward:
    case ProfileSample::Op::kAttentionBackward:
      DCP_RETURN_IF_ERROR(
          positive({{"flops", sample.flops},
                    {"sum_squared_lengths", sample.sum_squared_lengths},
                    {"sum_lengths", sample.sum_lengths}}));
      break;
    case ProfileSample::Op::kAllToAll:
    case ProfileSample::Op::kAllReduce:
    case ProfileSample::Op::kReduceScatter:
    case ProfileSample::Op::kAllGather:
      if (sample.group_size < 2)
        return bad("group_size", sample.group_size,
                   "must be at least 2 for a collective");
      break;
    case ProfileSample::Op::kActivationMemory:
      DCP_RETURN_IF_ERROR(positive({{"tokens", sample.tokens}}));
      DCP_RETURN_IF_ERROR(checkpointed_layers_in_range());
      return positive({{"measured_bytes", sample.measured_bytes}});
    case ProfileSample::Op::kMicroBatch:
    case ProfileSample::Op::kSpMicroBatch: {
      const bool sp = sample.op == ProfileSample::Op::kSpMicroBatch;
      DCP_RETURN_IF_ERROR(positive({{"tokens", sample.tokens}}));
      if (sample.num_sequences < 1)
        return bad("num_sequences", sample.num_sequences, "must be >= 1");
      if (sample.sum_lengths < sample.num_sequences)
        return bad("sum_lengths", sample.sum_lengths,
                   "must be at least one token per sequence");
      if (!sp && sample.group_size != 1)
        return bad("group_size", sample.group_size,
                   "must be 1 (micro-batches over SP groups are "
                   "sp_micro_batch samples)");
      if (sp && sample.group_size < 2)
        return bad("group_size", sample.group_size,
                   "must be at least 2 (SP 1 micro-batches are micro_batch "
                   "samples)");
      DCP_RETURN_IF_ERROR(checkpointed_layers_in_range());
      if (sample.communication_seconds > sample.measured_seconds)
        return bad("communication_seconds", sample.communication_seconds,
                   absl::StrCat("must be at most measured_seconds = ",
                                sample.measured_seconds));
      break;
    }
    case ProfileSample::Op::kOptimizerStep:
      break;
    default:
      return bad("op", static_cast<int>(sample.op), "is not a known op");
  }
  return positive({{"measured_seconds", sample.measured_seconds}});
}

}  // namespace dcp

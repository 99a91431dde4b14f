// What a checkpoint holds of a run that keeps float32 master weights apart
// from its parameters (bf16 weights, or ZeRO-1): every rank's shard
// gathered into whole flat tensors, so that it does not depend on the world
// size or on how the state was sharded.

#ifndef DCP_WORKER_EXECUTION_MASTER_WEIGHT_STATE_H_
#define DCP_WORKER_EXECUTION_MASTER_WEIGHT_STATE_H_

#include <cstdint>

#include "torch/torch.h"

namespace dcp {

/// The float32 master weights and AdamW's moments of every parameter,
/// flattened in parameters() order without padding (each [number of
/// parameter elements], float32, on the CPU), and AdamW's step count (0:
/// no step yet; the moments are then zeros). Plain value.
struct MasterWeightState {
  torch::Tensor master_weights;
  torch::Tensor exp_avg;
  torch::Tensor exp_avg_sq;
  int64_t adam_step = 0;
};

}  // namespace dcp

#endif  // DCP_WORKER_EXECUTION_MASTER_WEIGHT_STATE_H_

// A profile made from a known cost model, for tests and demos.

#ifndef DCP_COST_MODEL_SYNTHETIC_PROFILE_H_
#define DCP_COST_MODEL_SYNTHETIC_PROFILE_H_

#include <cstdint>
#include <vector>

#include "cost_model/cost_model.h"
#include "cost_model/profile_sample.h"

namespace dcp {

/// The samples `truth` would produce, for tests and demos: GEMMs over a range
/// of token counts, attention forward/backward over a range of lengths,
/// all-to-all and all-reduce over group sizes 2..gpus_per_node inside a node
/// (and multiples of gpus_per_node across nodes when num_nodes > 1),
/// reduce-scatter and all-gather over those groups too,
/// activation memory at several token counts and checkpointed layers,
/// whole micro-batches at SP 1 (1 to 16 sequences of 32 to 512 tokens, with
/// and without recompute) and over the collectives' groups (SP micro-batches,
/// the same shapes), and the optimizer step. Each
/// measured value is multiplied by max(1 + relative_noise * z, 0.01), z a
/// standard normal drawn from std::mt19937_64(seed). Deterministic.
std::vector<ProfileSample> SyntheticProfile(const CostModel& truth,
                                            uint64_t seed,
                                            double relative_noise);

}  // namespace dcp

#endif  // DCP_COST_MODEL_SYNTHETIC_PROFILE_H_

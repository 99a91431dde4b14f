// What depends on the kind of model a spec describes: a GPT decoder trained
// on token ids, or a diffusion transformer trained on latent patches. The
// worker's agent builds its model and reads its samples through these, so it
// runs either kind the same way.

#ifndef DCP_WORKER_EXECUTION_MODEL_KIND_H_
#define DCP_WORKER_EXECUTION_MODEL_KIND_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "cost_model/model_spec.h"
#include "worker/execution/dataset.h"
#include "worker/execution/latent_dataset.h"
#include "worker/execution/model.h"
#include "worker/execution/trainable_model.h"

namespace dcp {

/// A DitModel for a diffusion-transformer spec (IsDiffusionTransformerSpec),
/// with the seed, dtype, device and init_std of `options` and DitModelOptions'
/// defaults otherwise; a GptModel for any other spec. The model's own
/// Create errors (INVALID_ARGUMENT naming the field) otherwise.
absl::StatusOr<std::shared_ptr<TrainableModel>> CreateTrainableModel(
    const ModelSpec& spec, const GptModelOptions& options);

/// Where the inputs of `model`'s samples come from: the dataset named by a
/// --data spec, as token ids (GptModel: OpenDataset) or as latent samples
/// (DitModel: OpenLatentDataset with the model's latent width).
///
/// Thread model: immutable after Open; safe for concurrent reads.
class SequenceInputSource {
 public:
  /// INVALID_ARGUMENT for a spec the model's kind cannot read.
  static absl::StatusOr<std::unique_ptr<SequenceInputSource>> Open(
      const std::string& data_spec, const TrainableModel& model);

  /// Sample `sample_id` of `length_tokens` as the model reads it; the
  /// dataset's error otherwise.
  absl::StatusOr<SequenceInput> Input(int64_t sample_id,
                                      int64_t length_tokens) const;

 private:
  SequenceInputSource() = default;

  // Exactly one is set.
  std::unique_ptr<Dataset> tokens_;
  std::unique_ptr<SyntheticLatentDataset> latents_;
};

/// A model in training mode with synthetic inputs: what the profilers and
/// the device check run. Plain value.
struct SyntheticTrainingModel {
  std::shared_ptr<TrainableModel> model;
  /// "synthetic:<options.seed>" inputs of the model's kind.
  std::unique_ptr<SequenceInputSource> inputs;
};

/// CreateTrainableModel(spec, options), put in training mode, with its
/// synthetic inputs; the errors of either.
absl::StatusOr<SyntheticTrainingModel> CreateSyntheticTrainingModel(
    const ModelSpec& spec, const GptModelOptions& options);

}  // namespace dcp

#endif  // DCP_WORKER_EXECUTION_MODEL_KIND_H_

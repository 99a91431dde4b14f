#include "worker/execution/model_kind.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/execution/dit_model.h"

namespace dcp {

absl::StatusOr<std::shared_ptr<TrainableModel>> CreateTrainableModel(
    const ModelSpec& spec, const GptModelOptions& options) {
  if (IsDiffusionTransformerSpec(spec)) {
    DitModelOptions dit;
    dit.seed = options.seed;
    dit.dtype = options.dtype;
    dit.device = options.device;
    dit.init_std = options.init_std;
    absl::StatusOr<std::shared_ptr<DitModel>> model =
        DitModel::Create(spec, dit);
    if (!model.ok()) return model.status();
    return std::shared_ptr<TrainableModel>(*std::move(model));
  }
  absl::StatusOr<std::shared_ptr<GptModel>> model =
      GptModel::Create(spec, options);
  if (!model.ok()) return model.status();
  return std::shared_ptr<TrainableModel>(*std::move(model));
}

absl::StatusOr<std::unique_ptr<SequenceInputSource>> SequenceInputSource::Open(
    const std::string& data_spec, const TrainableModel& model) {
  std::unique_ptr<SequenceInputSource> source(new SequenceInputSource());
  if (const auto* dit = dynamic_cast<const DitModel*>(&model)) {
    absl::StatusOr<std::unique_ptr<SyntheticLatentDataset>> latents =
        OpenLatentDataset(data_spec, dit->options().latent_channels);
    if (!latents.ok()) return latents.status();
    source->latents_ = *std::move(latents);
  } else {
    absl::StatusOr<std::unique_ptr<Dataset>> tokens =
        OpenDataset(data_spec, model.spec().vocab_size);
    if (!tokens.ok()) return tokens.status();
    source->tokens_ = *std::move(tokens);
  }
  return source;
}

absl::StatusOr<SyntheticTrainingModel> CreateSyntheticTrainingModel(
    const ModelSpec& spec, const GptModelOptions& options) {
  SyntheticTrainingModel built;
  absl::StatusOr<std::shared_ptr<TrainableModel>> model =
      CreateTrainableModel(spec, options);
  if (!model.ok()) return model.status();
  built.model = *std::move(model);
  absl::StatusOr<std::unique_ptr<SequenceInputSource>> inputs =
      SequenceInputSource::Open(absl::StrCat("synthetic:", options.seed),
                                *built.model);
  if (!inputs.ok()) return inputs.status();
  built.inputs = *std::move(inputs);
  built.model->train();
  return built;
}

absl::StatusOr<SequenceInput> SequenceInputSource::Input(
    int64_t sample_id, int64_t length_tokens) const {
  SequenceInput input;
  if (latents_ != nullptr) {
    absl::StatusOr<LatentSample> sample =
        latents_->Sample(sample_id, length_tokens);
    if (!sample.ok()) return sample.status();
    input.latent = *std::move(sample);
    return input;
  }
  absl::StatusOr<std::vector<int32_t>> tokens =
      tokens_->Tokens(sample_id, length_tokens);
  if (!tokens.ok()) return tokens.status();
  input.token_ids.assign(tokens->begin(), tokens->end());
  return input;
}

}  // namespace dcp

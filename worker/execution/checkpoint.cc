#include "worker/execution/checkpoint.h"

#include <exception>
#include <filesystem>
#include <string>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"

namespace dcp {
namespace {

constexpr char kFileName[] = "checkpoint.pt";
constexpr char kModelKey[] = "model";
constexpr char kOptimizerKey[] = "optimizer";
constexpr char kNextStepKey[] = "next_step";
constexpr char kModelNameKey[] = "model_name";
constexpr char kPrecisionKey[] = "precision";
constexpr char kZero1Key[] = "zero1";
constexpr char kMasterKey[] = "master";
constexpr char kMasterWeightsKey[] = "master_weights";
constexpr char kExpAvgKey[] = "exp_avg";
constexpr char kExpAvgSqKey[] = "exp_avg_sq";
constexpr char kAdamStepKey[] = "adam_step";

}  // namespace

std::string CheckpointSettings::ToString() const {
  return absl::StrCat("--precision=", precision,
                      zero1 ? " --zero1" : " without --zero1");
}

absl::Status CheckCheckpointSettings(const CheckpointSettings& saved,
                                     const CheckpointSettings& current,
                                     const std::string& path) {
  if (saved.precision == current.precision &&
      saved.has_master_weights() == current.has_master_weights()) {
    return absl::OkStatus();
  }
  const std::string fix =
      saved.precision == current.precision
          ? absl::StrCat("; float32 without --zero1 keeps AdamW's state per "
                         "parameter, with --zero1 as master weights, so "
                         "resume with ",
                         saved.ToString())
          : absl::StrCat("; another precision would not continue the same "
                         "run, so resume with --precision=",
                         saved.precision,
                         saved.has_master_weights() && saved.precision != "fp32"
                             ? " (with or without --zero1)"
                             : (saved.zero1 ? " --zero1" : ""));
  return absl::FailedPreconditionError(absl::StrCat(
      path, " was written with ", saved.ToString(), " but this run has ",
      current.ToString(), fix, ", or use another --checkpoint-dir"));
}

std::string CheckpointPath(const std::string& dir) {
  return (std::filesystem::path(dir) / kFileName).string();
}

absl::Status WriteCheckpoint(const std::string& dir, int64_t next_step,
                             const std::string& model_name,
                             const torch::nn::Module& model,
                             const torch::optim::Optimizer& optimizer,
                             const CheckpointFileWriter& write_file,
                             const CheckpointSettings& settings,
                             const MasterWeightState* master) {
  if (settings.has_master_weights() &&
      (master == nullptr || !master->master_weights.defined())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "writing a checkpoint with ", settings.ToString(),
        " needs the gathered master weights and AdamW moments"));
  }
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::InternalError(absl::StrCat(
        "cannot create the checkpoint directory ", dir, ": ", error.message()));
  }
  // Serialized to memory first: LibTorch's file writer reports a failed
  // write by throwing, from a destructor too (which aborts the process), so
  // the bytes reach the disk only through checked writes below.
  std::string bytes;
  try {
    torch::serialize::OutputArchive archive;
    torch::serialize::OutputArchive model_archive;
    model.save(model_archive);
    archive.write(kModelKey, model_archive);
    if (settings.has_master_weights()) {
      torch::serialize::OutputArchive master_archive;
      master_archive.write(kMasterWeightsKey, master->master_weights);
      master_archive.write(kExpAvgKey, master->exp_avg);
      master_archive.write(kExpAvgSqKey, master->exp_avg_sq);
      master_archive.write(kAdamStepKey, c10::IValue(master->adam_step));
      archive.write(kMasterKey, master_archive);
    } else {
      torch::serialize::OutputArchive optimizer_archive;
      optimizer.save(optimizer_archive);
      archive.write(kOptimizerKey, optimizer_archive);
    }
    archive.write(kNextStepKey, c10::IValue(next_step));
    archive.write(kModelNameKey, c10::IValue(model_name));
    archive.write(kPrecisionKey, c10::IValue(settings.precision));
    archive.write(kZero1Key, c10::IValue(settings.zero1));
    archive.save_to([&bytes](const void* data, size_t size) -> size_t {
      bytes.append(static_cast<const char*>(data), size);
      return size;
    });
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("serializing the checkpoint: ", e.what()));
  }
  const std::string path = CheckpointPath(dir);
  const absl::Status written = write_file ? write_file(path, bytes)
                                          : WriteFileAtomically(path, bytes);
  if (!written.ok()) {
    return absl::Status(
        written.code(),
        absl::StrCat("writing the checkpoint (", bytes.size(), " bytes) in ",
                     dir, ": ", written.message(),
                     "; the previous checkpoint there, if any, is unchanged"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<int64_t>> ReadCheckpoint(
    const std::string& dir, const std::string& model_name,
    torch::nn::Module& model, torch::optim::Optimizer& optimizer,
    const CheckpointSettings& settings, MasterWeightState* master) {
  if (settings.has_master_weights() && master == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reading a checkpoint with ", settings.ToString(),
        " needs somewhere to put the master weights"));
  }
  const std::string path = CheckpointPath(dir);
  std::error_code error;
  const bool exists = std::filesystem::exists(path, error);
  if (error) {
    // Not "no checkpoint": starting over would overwrite a good one.
    return absl::UnavailableError(
        absl::StrCat("cannot tell whether the checkpoint ", path,
                     " exists: ", error.message()));
  }
  if (!exists) return std::nullopt;
  // Tensors are loaded straight onto the device the model lives on (each
  // rank its own GPU), not the one rank 0 saved them from.
  c10::optional<torch::Device> device;
  for (const torch::Tensor& parameter : model.parameters()) {
    device = parameter.device();
    break;
  }
  torch::serialize::InputArchive archive;
  c10::IValue next_step;
  c10::IValue saved_name;
  CheckpointSettings saved;
  try {
    archive.load_from(path, device);
    if (!archive.try_read(kNextStepKey, next_step) || !next_step.isInt() ||
        !archive.try_read(kModelNameKey, saved_name) ||
        !saved_name.isString()) {
      return absl::DataLossError(absl::StrCat(
          path,
          " has no next_step or model_name; it is not a DCP checkpoint "
          "(delete it or point --checkpoint-dir elsewhere)"));
    }
    // Checkpoints from before these keys were all float32 without ZeRO-1.
    c10::IValue precision;
    c10::IValue zero1;
    if (archive.try_read(kPrecisionKey, precision)) {
      if (!precision.isString() || !archive.try_read(kZero1Key, zero1) ||
          !zero1.isBool()) {
        return absl::DataLossError(absl::StrCat(
            path, " has a precision but no valid zero1 setting"));
      }
      saved.precision = precision.toStringRef();
      saved.zero1 = zero1.toBool();
    }
  } catch (const std::exception& e) {
    return absl::DataLossError(
        absl::StrCat("cannot read the checkpoint ", path, ": ", e.what()));
  }
  if (saved_name.toStringRef() != model_name) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " was written for model '", saved_name.toStringRef(),
                     "' but this job trains '", model_name,
                     "'; use another --checkpoint-dir or the same model"));
  }
  if (next_step.toInt() < 0) {
    return absl::DataLossError(
        absl::StrCat(path, " has next_step ", next_step.toInt(), " < 0"));
  }
  if (absl::Status compatible = CheckCheckpointSettings(saved, settings, path);
      !compatible.ok()) {
    return compatible;
  }
  if (saved.has_master_weights()) {
    // The parameters are the master weights in the model's dtype: the
    // executor sets them (loading them here would replace the storage the
    // executor's flat buffer shares).
    try {
      torch::serialize::InputArchive master_archive;
      archive.read(kMasterKey, master_archive);
      c10::IValue adam_step;
      master_archive.read(kMasterWeightsKey, master->master_weights);
      master_archive.read(kExpAvgKey, master->exp_avg);
      master_archive.read(kExpAvgSqKey, master->exp_avg_sq);
      if (!master_archive.try_read(kAdamStepKey, adam_step) ||
          !adam_step.isInt()) {
        return absl::DataLossError(
            absl::StrCat(path, " has master weights but no AdamW step count"));
      }
      master->adam_step = adam_step.toInt();
    } catch (const std::exception& e) {
      return absl::DataLossError(absl::StrCat(
          "cannot read the master weights of the checkpoint ", path, ": ",
          e.what()));
    }
    return next_step.toInt();
  }
  try {
    torch::serialize::InputArchive model_archive;
    archive.read(kModelKey, model_archive);
    model.load(model_archive);
    torch::serialize::InputArchive optimizer_archive;
    archive.read(kOptimizerKey, optimizer_archive);
    optimizer.load(optimizer_archive);
  } catch (const std::exception& e) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the checkpoint ", path, " does not fit this model: ", e.what()));
  }
  return next_step.toInt();
}

}  // namespace dcp

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

}  // namespace

std::string CheckpointPath(const std::string& dir) {
  return (std::filesystem::path(dir) / kFileName).string();
}

absl::Status WriteCheckpoint(const std::string& dir, int64_t next_step,
                             const std::string& model_name,
                             const torch::nn::Module& model,
                             const torch::optim::Optimizer& optimizer,
                             const CheckpointFileWriter& write_file) {
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
    torch::serialize::OutputArchive optimizer_archive;
    optimizer.save(optimizer_archive);
    archive.write(kOptimizerKey, optimizer_archive);
    archive.write(kNextStepKey, c10::IValue(next_step));
    archive.write(kModelNameKey, c10::IValue(model_name));
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
    torch::nn::Module& model, torch::optim::Optimizer& optimizer) {
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

#include "worker/execution/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace dcp {
namespace {

constexpr char kFileName[] = "checkpoint.pt";
constexpr char kModelKey[] = "model";
constexpr char kOptimizerKey[] = "optimizer";
constexpr char kNextStepKey[] = "next_step";
constexpr char kModelNameKey[] = "model_name";

std::string ErrnoText() { return std::strerror(errno); }

/// fsync()s `path` (a file or a directory).
absl::Status SyncPath(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot open ", path, " to sync it: ", ErrnoText()));
  }
  const int result = ::fsync(fd);
  const std::string error = result != 0 ? ErrnoText() : "";
  ::close(fd);
  if (result != 0) {
    return absl::InternalError(absl::StrCat("fsync ", path, ": ", error));
  }
  return absl::OkStatus();
}

}  // namespace

std::string CheckpointPath(const std::string& dir) {
  return (std::filesystem::path(dir) / kFileName).string();
}

absl::Status WriteCheckpoint(const std::string& dir, int64_t next_step,
                             const std::string& model_name,
                             const torch::nn::Module& model,
                             const torch::optim::Optimizer& optimizer) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::InternalError(absl::StrCat(
        "cannot create the checkpoint directory ", dir, ": ", error.message()));
  }
  const std::string path = CheckpointPath(dir);
  const std::string temporary =
      absl::StrCat(path, ".tmp.", static_cast<long>(::getpid()));
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
    std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
    if (!file) {
      return absl::InternalError(
          absl::StrCat("cannot create ", temporary, ": ", ErrnoText()));
    }
    archive.save_to(file);
    file.close();
    if (!file) {
      std::remove(temporary.c_str());
      return absl::InternalError(
          absl::StrCat("writing ", temporary, " failed (disk full?)"));
    }
  } catch (const std::exception& e) {
    std::remove(temporary.c_str());
    return absl::InternalError(absl::StrCat("serializing the checkpoint to ",
                                            temporary, ": ", e.what()));
  }
  if (absl::Status synced = SyncPath(temporary); !synced.ok()) {
    std::remove(temporary.c_str());
    return synced;
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const std::string text = ErrnoText();
    std::remove(temporary.c_str());
    return absl::InternalError(
        absl::StrCat("cannot rename ", temporary, " to ", path, ": ", text));
  }
  // Makes the rename itself durable.
  return SyncPath(dir);
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

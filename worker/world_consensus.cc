#include "worker/world_consensus.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/status_context.h"

namespace dcp {

absl::Status WorldConsensus::AllReduce(torch::Tensor& values,
                                       absl::string_view what,
                                       absl::Duration timeout) {
  return WithContext(communicator_.World().AllReduceSum(values, timeout),
                     absl::StrCat("agreeing ", what));
}

absl::StatusOr<double> WorldConsensus::Sum(double value, absl::string_view what,
                                           absl::Duration timeout) {
  torch::Tensor sum = torch::full(
      {1}, value,
      torch::TensorOptions().dtype(torch::kFloat64).device(device_));
  if (absl::Status status = AllReduce(sum, what, timeout); !status.ok()) {
    return status;
  }
  return sum.to(torch::kCPU).item<double>();
}

absl::StatusOr<bool> WorldConsensus::Any(bool mine, absl::string_view what,
                                         absl::Duration timeout) {
  absl::StatusOr<double> count = Sum(mine ? 1 : 0, what, timeout);
  if (!count.ok()) return count.status();
  return *count > 0;
}

absl::StatusOr<std::vector<double>> WorldConsensus::Gather(
    double value, absl::string_view what, absl::Duration timeout) {
  const int world = communicator_.world_size();
  torch::Tensor values = torch::zeros(
      {world}, torch::TensorOptions().dtype(torch::kFloat64).device(device_));
  values[communicator_.rank()].fill_(value);
  if (absl::Status status = AllReduce(values, what, timeout); !status.ok()) {
    return status;
  }
  values = values.to(torch::kCPU);
  return std::vector<double>(values.data_ptr<double>(),
                             values.data_ptr<double>() + world);
}

}  // namespace dcp

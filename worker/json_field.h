#ifndef DCP_WORKER_JSON_FIELD_H_
#define DCP_WORKER_JSON_FIELD_H_

// Reading the worker's own JSON files (the run summary, the step timing
// files) field by field.

#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace dcp {

/// `object[name]` as a T; a std::runtime_error naming the field when it is
/// missing or of another type (the reader catches it and names the file).
template <typename T>
T JsonField(const nlohmann::json& object, const char* name) {
  try {
    return object.at(name).get<T>();
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(absl::StrCat("field \"", name, "\": ", e.what()));
  }
}

}  // namespace dcp

#endif  // DCP_WORKER_JSON_FIELD_H_

#include "planner/client/wire_fields.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace dcp {

int64_t RoundToInt64(double value) {
  if (std::isnan(value)) return 0;
  // Rounds to 2^63 - 1024, the largest double below 2^63: from there on (and
  // from its negative down) the result saturates.
  constexpr double kMax = 9.2233720368547748e18;
  if (value >= kMax) return std::numeric_limits<int64_t>::max();
  if (value <= -kMax) return std::numeric_limits<int64_t>::min();
  return std::llround(value);
}

namespace wire_fields_internal {
namespace {

using ::google::protobuf::Descriptor;
using ::google::protobuf::FieldDescriptor;
using ::google::protobuf::Message;
using ::google::protobuf::Reflection;

// A wire type that carries a member of type T, and the conversion each way.
template <typename T>
struct Carrier {
  FieldDescriptor::CppType wire_type;
  void (*to_message)(const T& value, const FieldDescriptor* field,
                     Message& message);
  T (*from_message)(const Message& message, const FieldDescriptor* field);
};

template <typename Wire, typename T>
Wire StaticCast(const T& value) {
  return static_cast<Wire>(value);
}

// Carries T in a field of wire type `wire_type`, which reflection accesses
// as a `Wire` by kSet and kGet: to the wire by kToWire, back by static_cast.
template <
    typename T, typename Wire,
    void (Reflection::*kSet)(Message*, const FieldDescriptor*, Wire) const,
    Wire (Reflection::*kGet)(const Message&, const FieldDescriptor*) const,
    auto kToWire = &StaticCast<Wire, T>>
constexpr Carrier<T> Carry(FieldDescriptor::CppType wire_type) {
  return {
      wire_type,
      [](const T& value, const FieldDescriptor* field, Message& message) {
        (message.GetReflection()->*kSet)(&message, field, kToWire(value));
      },
      [](const Message& message, const FieldDescriptor* field) {
        return static_cast<T>((message.GetReflection()->*kGet)(message, field));
      }};
}

// The wire types of each member type (wire_fields.h lists them).
constexpr Carrier<double> kDoubleCarriers[] = {
    Carry<double, double, &Reflection::SetDouble, &Reflection::GetDouble>(
        FieldDescriptor::CPPTYPE_DOUBLE),
    Carry<double, int64_t, &Reflection::SetInt64, &Reflection::GetInt64,
          &RoundToInt64>(FieldDescriptor::CPPTYPE_INT64),
};
constexpr Carrier<int> kIntCarriers[] = {
    Carry<int, int32_t, &Reflection::SetInt32, &Reflection::GetInt32>(
        FieldDescriptor::CPPTYPE_INT32),
};
constexpr Carrier<int64_t> kInt64Carriers[] = {
    Carry<int64_t, int32_t, &Reflection::SetInt32, &Reflection::GetInt32>(
        FieldDescriptor::CPPTYPE_INT32),
};
constexpr Carrier<bool> kBoolCarriers[] = {
    Carry<bool, bool, &Reflection::SetBool, &Reflection::GetBool>(
        FieldDescriptor::CPPTYPE_BOOL),
};
constexpr Carrier<std::string> kStringCarriers[] = {
    Carry<std::string, std::string, &Reflection::SetString,
          &Reflection::GetString>(FieldDescriptor::CPPTYPE_STRING),
};

const auto& CarriersOf(const double*) { return kDoubleCarriers; }
const auto& CarriersOf(const int*) { return kIntCarriers; }
const auto& CarriersOf(const int64_t*) { return kInt64Carriers; }
const auto& CarriersOf(const bool*) { return kBoolCarriers; }
const auto& CarriersOf(const std::string*) { return kStringCarriers; }

constexpr const char* TypeName(const double*) { return "double"; }
constexpr const char* TypeName(const int*) { return "int"; }
constexpr const char* TypeName(const int64_t*) { return "int64_t"; }
constexpr const char* TypeName(const bool*) { return "bool"; }
constexpr const char* TypeName(const std::string*) { return "std::string"; }

[[noreturn]] void Die(const Descriptor& message, const char* name,
                      const char* problem) {
  std::fprintf(stderr, "wire_fields: %s.%s: %s\n", message.full_name().c_str(),
               name, problem);
  std::abort();
}

// The index in `carriers` of the one that `field` of `message` carries a
// member of type `type_name` by; aborts when none.
template <typename T, size_t N>
size_t CarrierOrDie(const Carrier<T> (&carriers)[N], const Descriptor& message,
                    const FieldDescriptor& field, const char* type_name) {
  for (size_t i = 0; i < N; ++i) {
    if (carriers[i].wire_type == field.cpp_type()) return i;
  }
  const std::string problem = std::string("its wire type ") +
                              field.cpp_type_name() +
                              " does not carry a member of type " + type_name;
  Die(message, field.name().c_str(), problem.c_str());
}

}  // namespace

FoundField FindField(const Descriptor& message, const char* name,
                     ConstMember type) {
  const FieldDescriptor* field = message.FindFieldByName(name);
  if (field == nullptr || field->is_repeated()) {
    Die(message, name, "no such singular field in the message");
  }
  return {field, std::visit(
                     [&](const auto* typed) {
                       return CarrierOrDie(CarriersOf(typed), message, *field,
                                           TypeName(typed));
                     },
                     type)};
}

void ToMessage(ConstMember value, const FoundField& found, Message& to) {
  std::visit(
      [&](const auto* member) {
        CarriersOf(member)[found.carrier].to_message(*member, found.field, to);
      },
      value);
}

void FromMessage(const Message& from, const FoundField& found, Member value) {
  std::visit(
      [&](auto* member) {
        *member =
            CarriersOf(member)[found.carrier].from_message(from, found.field);
      },
      value);
}

}  // namespace wire_fields_internal
}  // namespace dcp

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

// The member types in the order of Member and ConstMember.
constexpr const char* kMemberTypeNames[] = {"double", "int", "int64_t", "bool",
                                            "std::string"};

[[noreturn]] void Die(const Message& message, const char* name,
                      const char* problem) {
  std::fprintf(stderr, "wire_fields: %s.%s: %s\n",
               message.GetDescriptor()->full_name().c_str(), name, problem);
  std::abort();
}

// The singular field `name` of `message`; aborts when it has none.
const FieldDescriptor* FieldOrDie(const Message& message, const char* name) {
  const FieldDescriptor* field = message.GetDescriptor()->FindFieldByName(name);
  if (field == nullptr || field->is_repeated()) {
    Die(message, name, "no such singular field in the message");
  }
  return field;
}

// How `field` of `message` carries a member of type T (`type_index` in
// kMemberTypeNames); aborts when its wire type does not.
template <typename T, size_t N>
const Carrier<T>& CarrierOrDie(const Carrier<T> (&carriers)[N],
                               const Message& message,
                               const FieldDescriptor* field,
                               size_t type_index) {
  for (const Carrier<T>& carrier : carriers) {
    if (carrier.wire_type == field->cpp_type()) return carrier;
  }
  const std::string problem =
      std::string("its wire type ") + field->cpp_type_name() +
      " does not carry a member of type " + kMemberTypeNames[type_index];
  Die(message, field->name().c_str(), problem.c_str());
}

}  // namespace

void ToMessage(ConstMember value, const char* name, Message& to) {
  const FieldDescriptor* field = FieldOrDie(to, name);
  std::visit(
      [&](const auto* member) {
        CarrierOrDie(CarriersOf(member), to, field, value.index())
            .to_message(*member, field, to);
      },
      value);
}

void FromMessage(const Message& from, const char* name, Member value) {
  const FieldDescriptor* field = FieldOrDie(from, name);
  std::visit(
      [&](auto* member) {
        *member = CarrierOrDie(CarriersOf(member), from, field, value.index())
                      .from_message(from, field);
      },
      value);
}

}  // namespace wire_fields_internal
}  // namespace dcp

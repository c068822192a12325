// Field numbers come from XLA's xla/pjrt/proto/compile_options.proto:
//   CompileOptionsProto.executable_build_options = 3 (ExecutableBuildOptionsProto)
//   CompileOptionsProto.env_option_overrides = 7 (map<string, OptionOverrideProto>)
//   ExecutableBuildOptionsProto.device_ordinal = 1, num_replicas = 4, num_partitions = 5,
//     use_spmd_partitioning = 6, device_assignment = 9, use_shardy_partitioner = 19
//   DeviceAssignmentProto.replica_count = 1, computation_count = 2, computation_devices = 3
//     (ComputationDevice.replica_device_ids = 1: one entry a partition, one id a replica)
//   OptionOverrideProto.string_field = 1, bool_field = 2 (in a oneof)
// Every other field keeps its proto3 default. XLA's CPU plugin accepts these messages as they are.
//
// Debug options go in env_option_overrides, by the name of their xla.DebugOptions field: the
// client sets each one on top of XLA's defaults (CompileOptions::ApplyAllOptionOverrides). A
// DebugOptions message in ExecutableBuildOptionsProto.debug_options (field 3) would instead replace
// the defaults whole, every field we did not write falling to zero (optimisation level included).
// A name DebugOptions does not have is refused at compile time ("No such compile option"); GPU
// flags are DebugOptions fields like any other, so XLA:CPU accepts and ignores them.
#include "backend/pjrt/runtime/compile_options.h"

namespace lmt {
namespace proto {

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_int_field(std::string& out, int field, int64_t v) {
  put_varint(out, static_cast<uint64_t>(field) << 3 | 0);
  put_varint(out, static_cast<uint64_t>(v));  // negative int64: ten bytes, as protobuf writes it
}

void put_message_field(std::string& out, int field, const std::string& body) {
  put_varint(out, static_cast<uint64_t>(field) << 3 | 2);
  put_varint(out, body.size());
  out += body;
}

}  // namespace proto

namespace {

constexpr int kExecutableBuildOptions = 3, kEnvOptionOverrides = 7;

// One entry of env_option_overrides: a map entry is a message {key = 1, value = 2}.
void put_override(std::string& options, const std::string& name, const std::string& value) {
  constexpr int kKey = 1, kValue = 2;
  std::string entry;
  proto::put_message_field(entry, kKey, name);
  proto::put_message_field(entry, kValue, value);
  proto::put_message_field(options, kEnvOptionOverrides, entry);
}

void put_bool_override(std::string& options, const std::string& name, bool value) {
  constexpr int kBoolField = 2;
  std::string override_value;
  proto::put_int_field(override_value, kBoolField, value ? 1 : 0);
  put_override(options, name, override_value);
}

void put_string_override(std::string& options, const std::string& name, const std::string& value) {
  constexpr int kStringField = 1;
  std::string override_value;
  proto::put_message_field(override_value, kStringField, value);
  put_override(options, name, override_value);
}

// ExecutableBuildOptionsProto for one replica over `devices` partitions (SPMD, Shardy).
std::string spmd_build_options(const std::vector<int64_t>& devices) {
  constexpr int kNumReplicas = 4, kNumPartitions = 5, kUseSpmd = 6, kDeviceAssignment = 9,
                kUseShardy = 19;
  constexpr int kReplicaCount = 1, kComputationCount = 2, kComputationDevices = 3,
                kReplicaDeviceIds = 1;
  std::string assignment;
  proto::put_int_field(assignment, kReplicaCount, 1);
  proto::put_int_field(assignment, kComputationCount, static_cast<int64_t>(devices.size()));
  for (int64_t id : devices) {
    std::string computation;
    proto::put_int_field(computation, kReplicaDeviceIds, id);
    proto::put_message_field(assignment, kComputationDevices, computation);
  }
  std::string build;
  proto::put_int_field(build, kNumReplicas, 1);
  proto::put_int_field(build, kNumPartitions, static_cast<int64_t>(devices.size()));
  proto::put_int_field(build, kUseSpmd, 1);
  proto::put_message_field(build, kDeviceAssignment, assignment);
  proto::put_int_field(build, kUseShardy, 1);
  return build;
}

}  // namespace

std::string compile_options(const CompileSettings& settings) {
  constexpr int kDeviceOrdinal = 1, kNumReplicas = 4, kNumPartitions = 5;
  std::string build;
  if (settings.devices.size() > 1) {
    build = spmd_build_options(settings.devices);
  } else {
    proto::put_int_field(build, kDeviceOrdinal, 0);
    proto::put_int_field(build, kNumReplicas, 1);
    proto::put_int_field(build, kNumPartitions, 1);
  }
  std::string options;
  proto::put_message_field(options, kExecutableBuildOptions, build);
  // xla.proto: DebugOptions.xla_gpu_exclude_nondeterministic_ops (297). Not
  // xla_gpu_deterministic_ops (148), which also turns off autotuning.
  if (settings.deterministic) {
    put_bool_override(options, "xla_gpu_exclude_nondeterministic_ops", true);
  }
  if (!settings.xnnpack) put_bool_override(options, "xla_cpu_use_xnnpack", false);
  for (const auto& [name, value] : settings.xla_strings) put_string_override(options, name, value);
  return options;
}

std::string single_device_compile_options() {
  return compile_options(CompileSettings{});
}

}  // namespace lmt

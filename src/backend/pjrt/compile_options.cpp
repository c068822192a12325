// Field numbers come from XLA's xla/pjrt/proto/compile_options.proto:
//   CompileOptionsProto.executable_build_options = 3 (ExecutableBuildOptionsProto)
//   ExecutableBuildOptionsProto.device_ordinal = 1, num_replicas = 4, num_partitions = 5
// Every other field keeps its proto3 default. XLA's CPU plugin accepts this message as it is.
#include "backend/pjrt/compile_options.h"

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

std::string single_device_compile_options() {
  constexpr int kExecutableBuildOptions = 3;
  constexpr int kDeviceOrdinal = 1, kNumReplicas = 4, kNumPartitions = 5;
  std::string build;
  proto::put_int_field(build, kDeviceOrdinal, 0);
  proto::put_int_field(build, kNumReplicas, 1);
  proto::put_int_field(build, kNumPartitions, 1);
  std::string options;
  proto::put_message_field(options, kExecutableBuildOptions, build);
  return options;
}

}  // namespace lmt

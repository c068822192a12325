// The hand-written protobuf bytes of the compile options, checked against the wire format by
// hand (field key = number << 3 | wire type; varints little-endian, 7 bits a byte). The programs
// tests check that XLA's CPU plugin accepts them.
#include <gtest/gtest.h>

#include <string>

#include "backend/pjrt/runtime/compile_options.h"

namespace lmt {
namespace {

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int c : b) s.push_back(static_cast<char>(c));
  return s;
}

TEST(PjrtCompileOptions, Varints) {
  std::string s;
  proto::put_varint(s, 1);
  proto::put_varint(s, 300);
  EXPECT_EQ(s, bytes({0x01, 0xAC, 0x02}));
  s.clear();
  proto::put_int_field(s, 4, -1);  // a negative int64: ten bytes
  EXPECT_EQ(s, bytes({0x20, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01}));
}

TEST(PjrtCompileOptions, SingleDevice) {
  // CompileOptionsProto { executable_build_options (3) { device_ordinal (1) = 0,
  //   num_replicas (4) = 1, num_partitions (5) = 1 } }
  EXPECT_EQ(single_device_compile_options(),
            bytes({0x1A, 0x06, 0x08, 0x00, 0x20, 0x01, 0x28, 0x01}));
}

TEST(PjrtCompileOptions, DeterministicIsADebugOptionOverride) {
  // The single-device message, then env_option_overrides (7) { key (1) =
  // "xla_gpu_exclude_nondeterministic_ops", value (2) { bool_field (2) = true } }.
  const std::string name = "xla_gpu_exclude_nondeterministic_ops";
  ASSERT_EQ(name.size(), 36u);
  const std::string want = single_device_compile_options() + bytes({0x3A, 2 + 36 + 4, 0x0A, 36}) +
                           name + bytes({0x12, 0x02, 0x10, 0x01});
  EXPECT_EQ(compile_options(CompileSettings{.deterministic = true}), want);
  EXPECT_EQ(compile_options(CompileSettings{}), single_device_compile_options());
}

}  // namespace
}  // namespace lmt

// The serialized xla.CompileOptionsProto that PJRT_Client_Compile takes, written by hand: a few
// protobuf wire-format fields are all lmtrain's programs need, so lmtrain does not depend on
// protobuf or XLA's generated code.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lmt {

// What lmtrain asks of XLA's compiler beyond "one device". Every field's default leaves XLA's own
// default in place.
struct CompileSettings {
  // Only deterministic ops: the same inputs give the same bits, run after run. XLA's GPU backend
  // then replaces its atomic scatters and reductions with slower deterministic ones; XLA:CPU is
  // deterministic anyway and accepts the request.
  bool deterministic = false;
  // XLA:CPU's XNNPACK matrix products (xla_cpu_use_xnnpack). They keep a weight operand's packed
  // form keyed by its address, so a cached program run again on a donated buffer that the
  // previous step updated in place reads the old weights: wrong gradients from the second step
  // on. lmtrain turns them off on XLA's CPU plugin, whose programs it donates from step to step.
  bool xnnpack = true;
  // More than one id: one program for that many devices (partitions), partitioned by XLA's SPMD
  // partitioner (Shardy) from the shardings the module's arguments and results carry; partition i
  // runs on the device with id devices[i].
  std::vector<int64_t> devices;
  // XLA debug options of string value, by their xla.DebugOptions name (a deviceless compile's
  // xla_gpu_cuda_data_dir and xla_dump_to).
  std::vector<std::pair<std::string, std::string>> xla_strings;
};

// Options for a program with `settings`: on one device (one replica, one partition), or SPMD over
// settings.devices.
std::string compile_options(const CompileSettings& settings);
// compile_options with every setting at its default.
std::string single_device_compile_options();

// The protobuf wire format, just enough for the messages above (exposed for their test).
namespace proto {
void put_varint(std::string& out, uint64_t v);
void put_int_field(std::string& out, int field, int64_t v);  // wire type 0 (int64, bool)
// Wire type 2: a nested message, a string or bytes.
void put_message_field(std::string& out, int field, const std::string& body);
}  // namespace proto

}  // namespace lmt

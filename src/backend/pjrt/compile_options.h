// The serialized xla.CompileOptionsProto that PJRT_Client_Compile takes, written by hand: a few
// protobuf wire-format fields are all a single-device program needs, so lmtrain does not depend on
// protobuf or XLA's generated code.
#pragma once

#include <cstdint>
#include <string>

namespace lmt {

// Options for a program that runs on one device: one replica, one partition.
std::string single_device_compile_options();

// The protobuf wire format, just enough for the message above (exposed for its test).
namespace proto {
void put_varint(std::string& out, uint64_t v);
void put_int_field(std::string& out, int field, int64_t v);                    // wire type 0
void put_message_field(std::string& out, int field, const std::string& body);  // wire type 2
}  // namespace proto

}  // namespace lmt

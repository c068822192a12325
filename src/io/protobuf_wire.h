// Protocol-buffer wire format, writing only: enough to encode TensorBoard's Event records by hand
// (src/io/tensorboard.cpp) without a protobuf dependency. Fields are appended in the order they
// are written; a nested message is written first and then added as a length-delimited field.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

namespace lmt {

// The low n bytes of v appended to out, least significant first.
inline void append_little_endian(std::string& out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

class ProtoWriter {
 public:
  // Wire type 0: int32, int64 (negative values as their two's complement), enum, bool.
  ProtoWriter& varint(int field, uint64_t v) {
    key(field, 0);
    raw_varint(v);
    return *this;
  }
  // Wire type 1: double.
  ProtoWriter& f64(int field, double v) { return fixed(field, 1, v); }
  // Wire type 5: float.
  ProtoWriter& f32(int field, float v) { return fixed(field, 5, v); }
  // Wire type 2: string, bytes, or an embedded message's encoding.
  ProtoWriter& bytes(int field, std::string_view v) {
    key(field, 2);
    raw_varint(v.size());
    out_.append(v);
    return *this;
  }
  ProtoWriter& message(int field, const ProtoWriter& m) { return bytes(field, m.str()); }

  const std::string& str() const { return out_; }

 private:
  void key(int field, int wire_type) {
    raw_varint((static_cast<uint64_t>(field) << 3) | static_cast<uint64_t>(wire_type));
  }
  void raw_varint(uint64_t v) {
    for (; v >= 0x80; v >>= 7) out_.push_back(static_cast<char>((v & 0x7f) | 0x80));
    out_.push_back(static_cast<char>(v));
  }
  // A fixed-width field: v's bits, little-endian.
  template <class T>
  ProtoWriter& fixed(int field, int wire_type, T v) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8);
    std::conditional_t<sizeof(T) == 8, uint64_t, uint32_t> bits;
    std::memcpy(&bits, &v, sizeof bits);
    key(field, wire_type);
    append_little_endian(out_, bits, sizeof bits);
    return *this;
  }
  std::string out_;
};

}  // namespace lmt

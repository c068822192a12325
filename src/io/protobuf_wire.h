// Protocol-buffer wire format without a protobuf dependency. ProtoWriter encodes TensorBoard's
// Event records by hand (src/io/tensorboard.cpp): fields are appended in the order they are
// written; a nested message is written first and then added as a length-delimited field.
// ProtoReader walks a message's fields one by one (a SentencePiece model's settings,
// src/io/sp_tokenizer_json.cpp); what it cannot decode is a UserError naming `what`.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "core/error.h"

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

class ProtoReader {
 public:
  // `data` must outlive the reader (it is not copied).
  ProtoReader(std::string_view data, std::string what) : data_(data), what_(std::move(what)) {}

  // One field: its number, wire type and value (`number` for varints and fixed-width fields,
  // `bytes` for length-delimited ones).
  struct Field {
    int number = 0;
    int wire_type = 0;
    uint64_t number_value = 0;
    std::string_view bytes;
    bool as_bool() const { return number_value != 0; }
    float as_f32() const {
      const auto bits = static_cast<uint32_t>(number_value);
      float f;
      std::memcpy(&f, &bits, sizeof f);
      return f;
    }
  };

  // The next field into `f`; false at the end of the message.
  bool next(Field& f) {
    if (pos_ == data_.size()) return false;
    const uint64_t key = varint();
    f.number = static_cast<int>(key >> 3);
    f.wire_type = static_cast<int>(key & 7);
    f.bytes = {};
    f.number_value = 0;
    switch (f.wire_type) {
      case 0:
        f.number_value = varint();
        break;
      case 1:
        f.number_value = fixed(8);
        break;
      case 5:
        f.number_value = fixed(4);
        break;
      case 2: {
        const uint64_t n = varint();
        if (n > data_.size() - pos_) fail("a field runs past the end");
        f.bytes = data_.substr(pos_, n);
        pos_ += n;
        break;
      }
      default:
        fail("wire type " + std::to_string(f.wire_type) + " is not supported");
    }
    return true;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw UserError(what_ + ": not a valid protocol-buffer message (" + why + " at byte " +
                    std::to_string(pos_) + ")");
  }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ == data_.size()) fail("a varint runs past the end");
      const auto b = static_cast<uint8_t>(data_[pos_++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("a varint longer than 10 bytes");
  }
  uint64_t fixed(size_t n) {
    if (n > data_.size() - pos_) fail("a fixed-width field runs past the end");
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i)
      v |= static_cast<uint64_t>(static_cast<uint8_t>(data_[pos_ + i])) << (8 * i);
    pos_ += n;
    return v;
  }
  std::string_view data_;
  std::string what_;
  size_t pos_ = 0;
};

}  // namespace lmt

// A reader for the Thrift compact protocol, the encoding of Parquet's footer and page headers.
// It decodes from one byte buffer with every read bounds-checked; fields a caller does not ask
// for are skipped (so newer writers' extra fields are harmless), and nesting is depth-limited, so
// corrupt input ends in a UserError naming `what` (e.g. "FILE: footer"), never a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace lmt::parquet {

// Compact protocol type ids (the low nibble of a field header).
enum class TType : uint8_t {
  kStop = 0,
  kTrue = 1,
  kFalse = 2,
  kByte = 3,
  kI16 = 4,
  kI32 = 5,
  kI64 = 6,
  kDouble = 7,
  kBinary = 8,
  kList = 9,
  kSet = 10,
  kMap = 11,
  kStruct = 12,
};

// Thrown when the buffer ends before the value does; the page-header reader catches it to read
// more bytes and retry. Everything else (and this, when no retry helps) is a UserError.
struct ThriftTruncated {};

class ThriftReader {
 public:
  ThriftReader(const uint8_t* data, size_t size, std::string what)
      : p_(data), begin_(data), end_(data + size), what_(std::move(what)) {}

  size_t position() const { return static_cast<size_t>(p_ - begin_); }

  // Reads a struct: calls field(id, type) for each field; the callback reads the value with the
  // typed readers below (or returns false to have it skipped).
  void read_struct(const std::function<bool(int16_t id, TType type)>& field);
  // Reads a list header and calls elem(type) once per element.
  void read_list(const std::function<void(TType elem)>& elem);

  int64_t read_int(TType t);  // i8/i16/i32/i64 (zigzag varint)
  bool read_bool(TType t);    // a struct field's bool lives in its type nibble
  std::string_view read_binary(TType t);
  void skip(TType t, int depth = 0);

  [[noreturn]] void fail(const std::string& reason) const;

 private:
  uint8_t byte();
  uint64_t varint();
  void expect(TType got, TType want, bool allow_int = false);

  const uint8_t* p_;
  const uint8_t* begin_;
  const uint8_t* end_;
  std::string what_;
  int depth_ = 0;
};

}  // namespace lmt::parquet

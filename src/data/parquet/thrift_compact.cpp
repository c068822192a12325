// Thrift compact protocol: varints, zigzag integers, field headers with id deltas, list headers.
#include "data/parquet/thrift_compact.h"

#include "core/error.h"

namespace lmt::parquet {

namespace {
constexpr int kMaxDepth = 64;  // Parquet metadata nests a few levels; deeper is corruption
}

void ThriftReader::fail(const std::string& reason) const {
  throw UserError(what_ + ": " + reason + " (at byte " + std::to_string(p_ - begin_) + ")");
}

uint8_t ThriftReader::byte() {
  if (p_ >= end_) throw ThriftTruncated{};
  return *p_++;
}

uint64_t ThriftReader::varint() {
  uint64_t v = 0;
  for (int shift = 0; shift < 70; shift += 7) {
    uint8_t b = byte();
    if (shift == 63 && b > 1) fail("malformed varint");
    v |= uint64_t{b & 0x7fu} << shift;
    if (!(b & 0x80)) return v;
  }
  fail("malformed varint");
}

void ThriftReader::expect(TType got, TType want, bool allow_int) {
  if (got == want) return;
  if (allow_int &&
      (got == TType::kByte || got == TType::kI16 || got == TType::kI32 || got == TType::kI64))
    return;
  fail("unexpected field type " + std::to_string(static_cast<int>(got)));
}

int64_t ThriftReader::read_int(TType t) {
  expect(t, TType::kI64, true);
  if (t == TType::kByte) return static_cast<int8_t>(byte());
  uint64_t z = varint();
  return static_cast<int64_t>(z >> 1) ^ -static_cast<int64_t>(z & 1);
}

bool ThriftReader::read_bool(TType t) {
  if (t == TType::kTrue) return true;
  if (t == TType::kFalse) return false;
  fail("unexpected field type " + std::to_string(static_cast<int>(t)) + " for a bool");
}

std::string_view ThriftReader::read_binary(TType t) {
  expect(t, TType::kBinary);
  uint64_t n = varint();
  if (n > static_cast<uint64_t>(end_ - p_)) throw ThriftTruncated{};
  std::string_view s(reinterpret_cast<const char*>(p_), n);
  p_ += n;
  return s;
}

void ThriftReader::read_struct(const std::function<bool(int16_t, TType)>& field) {
  if (++depth_ > kMaxDepth) fail("structures nested too deeply");
  int16_t last_id = 0;
  for (;;) {
    uint8_t h = byte();
    TType t = static_cast<TType>(h & 0x0f);
    if (t == TType::kStop) break;
    if (static_cast<uint8_t>(t) > static_cast<uint8_t>(TType::kStruct))
      fail("unknown field type " + std::to_string(h & 0x0f));
    int16_t id;
    if (h >> 4) {
      id = static_cast<int16_t>(last_id + (h >> 4));
    } else {
      int64_t v = read_int(TType::kI16);
      if (v < INT16_MIN || v > INT16_MAX) fail("field id out of range");
      id = static_cast<int16_t>(v);
    }
    last_id = id;
    if (!field(id, t)) skip(t, depth_);
  }
  --depth_;
}

void ThriftReader::read_list(const std::function<void(TType)>& elem) {
  uint8_t h = byte();
  uint64_t n = h >> 4;
  if (n == 15) n = varint();
  TType t = static_cast<TType>(h & 0x0f);
  // Every element takes at least one byte (bools and structs too), so a count larger than the
  // bytes left is corrupt; this bounds the work a garbage count can cause.
  if (n > static_cast<uint64_t>(end_ - p_)) throw ThriftTruncated{};
  for (uint64_t i = 0; i < n; ++i) elem(t);
}

void ThriftReader::skip(TType t, int depth) {
  if (depth > kMaxDepth) fail("structures nested too deeply");
  switch (t) {
    case TType::kTrue:
    case TType::kFalse:
      return;
    case TType::kByte:
      byte();
      return;
    case TType::kI16:
    case TType::kI32:
    case TType::kI64:
      varint();
      return;
    case TType::kDouble:
      for (int i = 0; i < 8; ++i) byte();
      return;
    case TType::kBinary:
      read_binary(t);
      return;
    case TType::kList:
    case TType::kSet:
      read_list([&](TType e) {
        if (e == TType::kTrue || e == TType::kFalse)
          byte();  // in a collection a bool is one byte
        else
          skip(e, depth + 1);
      });
      return;
    case TType::kMap: {
      uint64_t n = varint();
      if (n == 0) return;
      uint8_t kv = byte();
      if (n > static_cast<uint64_t>(end_ - p_)) throw ThriftTruncated{};
      for (uint64_t i = 0; i < n; ++i) {
        for (TType e : {static_cast<TType>(kv >> 4), static_cast<TType>(kv & 0x0f)}) {
          if (e == TType::kTrue || e == TType::kFalse)
            byte();
          else
            skip(e, depth + 1);
        }
      }
      return;
    }
    case TType::kStruct: {
      int saved = depth_;
      depth_ = depth;
      read_struct([](int16_t, TType) { return false; });
      depth_ = saved;
      return;
    }
    default:
      fail("unknown field type " + std::to_string(static_cast<int>(t)));
  }
}

}  // namespace lmt::parquet

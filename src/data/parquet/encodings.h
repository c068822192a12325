// Parquet's value and level encodings for byte-array columns, decoded from one page held in
// memory: the RLE / bit-packed hybrid (levels, dictionary indices), PLAIN byte arrays,
// DELTA_BINARY_PACKED (lengths inside the delta byte-array encodings), DELTA_LENGTH_BYTE_ARRAY
// and DELTA_BYTE_ARRAY. Every read is bounds-checked; corrupt data throws a UserError that starts
// with `what` (file, column, row group), so a mutated file can never be read out of bounds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lmt::parquet {

// A byte range of a page; `what` names it in messages.
struct Bytes {
  const uint8_t* p;
  const uint8_t* end;
  size_t size() const { return static_cast<size_t>(end - p); }
};

// Reads `count` values of `bit_width` bits (0..32) in the RLE / bit-packed hybrid encoding.
void decode_rle_hybrid(Bytes in, int bit_width, size_t count, uint32_t* out,
                       const std::string& what);

// PLAIN byte arrays: `count` values of a 4-byte little-endian length and the bytes. Returns the
// views (into `in`) in `out`.
void decode_plain_byte_arrays(Bytes in, size_t count, std::vector<std::string_view>& out,
                              const std::string& what);

// DELTA_LENGTH_BYTE_ARRAY: `count` values; views into `in`. Returns where the data ends.
const uint8_t* decode_delta_length_byte_arrays(Bytes in, size_t count,
                                               std::vector<std::string_view>& out,
                                               const std::string& what);

// DELTA_BYTE_ARRAY: `count` values rebuilt from prefixes and suffixes into `arena`; the views in
// `out` point into arena (which is not resized after they are made).
void decode_delta_byte_arrays(Bytes in, size_t count, std::string& arena,
                              std::vector<std::string_view>& out, const std::string& what);

}  // namespace lmt::parquet

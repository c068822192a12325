// The parts of Parquet's Thrift metadata that a reader of flat string columns needs: the footer
// (FileMetaData: schema, row groups, column chunks) and page headers. Field ids follow
// parquet.thrift; every other field is skipped. Decoding checks only what the format itself
// demands; the reader checks offsets and sizes against the file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lmt::parquet {

enum class PhysicalType : int32_t {
  kBoolean = 0,
  kInt32 = 1,
  kInt64 = 2,
  kInt96 = 3,
  kFloat = 4,
  kDouble = 5,
  kByteArray = 6,
  kFixedLenByteArray = 7,
};
enum class Repetition : int32_t { kRequired = 0, kOptional = 1, kRepeated = 2 };
enum class Codec : int32_t {
  kUncompressed = 0,
  kSnappy = 1,
  kGzip = 2,
  kLzo = 3,
  kBrotli = 4,
  kLz4 = 5,
  kZstd = 6,
  kLz4Raw = 7,
};
enum class Encoding : int32_t {
  kPlain = 0,
  kPlainDictionary = 2,
  kRle = 3,
  kBitPacked = 4,
  kDeltaBinaryPacked = 5,
  kDeltaLengthByteArray = 6,
  kDeltaByteArray = 7,
  kRleDictionary = 8,
  kByteStreamSplit = 9,
};
enum class PageType : int32_t { kData = 0, kIndex = 1, kDictionary = 2, kDataV2 = 3 };

std::string codec_name(int32_t codec);
std::string encoding_name(int32_t encoding);

struct SchemaElement {
  std::optional<int32_t> type;  // PhysicalType; absent for groups
  std::optional<int32_t> repetition;
  std::string name;
  int32_t num_children = 0;
  std::optional<int32_t> converted_type;
  std::optional<int16_t> logical_type;  // the set field id of the LogicalType union
};

struct ColumnChunk {
  bool external = false;  // file_path set: the data lives in another file
  bool has_meta = false;
  int32_t type = -1;
  int32_t codec = -1;
  int64_t num_values = 0;
  int64_t total_compressed_size = 0;
  int64_t data_page_offset = -1;
  std::optional<int64_t> dictionary_page_offset;
};

struct RowGroup {
  std::vector<ColumnChunk> columns;
  int64_t num_rows = 0;
};

struct FileMetaData {
  std::vector<SchemaElement> schema;
  int64_t num_rows = 0;
  std::vector<RowGroup> row_groups;
  std::string created_by;
};

struct PageHeader {
  int32_t type = -1;
  int32_t uncompressed_size = -1;
  int32_t compressed_size = -1;
  int32_t num_values = -1;
  int32_t encoding = -1;
  int32_t def_level_encoding = -1;  // v1
  int32_t def_levels_length = 0;    // v2
  int32_t rep_levels_length = 0;    // v2
  bool is_compressed = true;        // v2
  bool has_data_header = false;     // the header matching `type` was present
};

// Decode the footer / a page header held in [data, data + size). `what` names the place in
// messages. decode_page_header throws ThriftTruncated when the buffer ends too early and returns
// the header's length in bytes through `used`.
FileMetaData decode_file_metadata(const uint8_t* data, size_t size, const std::string& what);
PageHeader decode_page_header(const uint8_t* data, size_t size, const std::string& what,
                              size_t* used);

}  // namespace lmt::parquet

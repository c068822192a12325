// lmtrain's own Parquet reader for flat string columns. ParquetFile reads the footer with pread
// and maps top-level schema fields to column chunks; ColumnChunkReader walks one column chunk a
// page at a time (pread of one page, decompress, decode levels and values), so memory stays at
// about one page per selected column whatever the file size. Supported: data pages v1 and v2,
// dictionary pages, PLAIN / PLAIN_DICTIONARY / RLE_DICTIONARY / DELTA_LENGTH_BYTE_ARRAY /
// DELTA_BYTE_ARRAY values, RLE definition levels, UNCOMPRESSED / SNAPPY / ZSTD pages. Anything
// else, and any corruption, is a UserError naming the file (and column and row group).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/parquet/parquet_meta.h"

namespace lmt::parquet {

// A top-level field of the schema.
struct ColumnInfo {
  std::string name;
  std::string type;       // for messages: STRING, BYTE_ARRAY, INT64, LIST, STRUCT, ...
  bool nested = false;    // a group or a repeated field: several or no leaf columns
  bool readable = false;  // a BYTE_ARRAY leaf that is a string or plain bytes
  int leaf = -1;          // index of its column chunk in each row group (flat fields only)
  int max_def = 0;        // 1 when optional
};

// Owns a file descriptor; reads are pread, so several ColumnChunkReaders can share one file.
class ParquetFile {
 public:
  explicit ParquetFile(const std::string& path);
  ~ParquetFile();
  ParquetFile(const ParquetFile&) = delete;
  ParquetFile& operator=(const ParquetFile&) = delete;

  const std::string& path() const { return path_; }
  const FileMetaData& meta() const { return meta_; }
  const std::vector<ColumnInfo>& columns() const { return columns_; }
  // "id: INT64, body: STRING"
  std::string describe_columns() const;
  // The named column, which must be a flat string (or plain BYTE_ARRAY) column; else a UserError
  // naming the file and the column (and listing the columns when it does not exist).
  const ColumnInfo& string_column(const std::string& name) const;

  // Reads exactly n bytes at offset (the caller checked the range lies in the file).
  void read_at(int64_t offset, size_t n, uint8_t* out) const;
  int64_t size() const { return size_; }
  int64_t data_end() const { return data_end_; }  // where the footer starts

 private:
  void build_columns();

  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;
  int64_t data_end_ = 0;
  FileMetaData meta_;
  std::vector<ColumnInfo> columns_;
};

// The values of one column in one row group, in order; a null is std::nullopt. Views stay valid
// until the next call of next().
class ColumnChunkReader {
 public:
  ColumnChunkReader(const ParquetFile& file, const ColumnInfo& column, int row_group);
  ~ColumnChunkReader();

  // The next value; false at the end of the chunk.
  bool next(std::optional<std::string_view>* value) {
    if (level_ == defs_.size() && !load_data_page()) return false;
    if (defs_[level_++] < column_.max_def) {
      *value = std::nullopt;
    } else {
      *value = values_[value_++];
    }
    return true;
  }
  const std::string& what() const { return what_; }

 private:
  struct Buffer {
    std::unique_ptr<uint8_t[]> data;
    size_t capacity = 0;
    uint8_t* reserve(size_t n);
  };

  bool load_data_page();
  // Decompresses `n` bytes at `in` into page_ (uncompressed size `out_n`); returns the bytes.
  const uint8_t* decompress(const uint8_t* in, size_t n, size_t out_n, bool compressed);
  void decode_dictionary(const PageHeader& h, const uint8_t* data, size_t n);
  void decode_values(const PageHeader& h, const uint8_t* data, const uint8_t* end, size_t count);
  [[noreturn]] void fail(const std::string& reason) const;

  const ParquetFile& file_;
  ColumnInfo column_;
  std::string what_;  // "FILE: column 'x', row group N"
  int32_t codec_ = 0;
  int64_t pos_ = 0, end_ = 0;  // the chunk's unread byte range in the file
  int64_t values_left_ = 0;    // the chunk's num_values not yet seen in a page
  Buffer raw_, page_, dict_buf_;
  std::vector<std::string_view> dict_;
  bool has_dict_ = false;
  std::vector<uint8_t> defs_;
  std::vector<uint32_t> scratch_;
  std::vector<std::string_view> values_;
  std::string arena_;
  size_t level_ = 0, value_ = 0;
};

}  // namespace lmt::parquet

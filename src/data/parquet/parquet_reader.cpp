// ParquetFile (footer, schema → columns) and ColumnChunkReader (pages → values); see the header.
#include "data/parquet/parquet_reader.h"

#include <fcntl.h>
#include <snappy-c.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "data/parquet/encodings.h"
#include "data/parquet/thrift_compact.h"

namespace lmt::parquet {

namespace {

constexpr int64_t kMaxPage = int64_t{1} << 30;       // larger pages are taken as corruption
constexpr size_t kMaxPageHeader = size_t{64} << 20;  // statistics can make headers long
constexpr int kMaxSchemaDepth = 100;
// Writers keep pages to ~20k values (parquet-mr, arrow-rs) or one row group (DuckDB); a page of
// more than 16M values is taken as corruption (its levels and views would take ~400 MB).
constexpr int32_t kMaxPageValues = int32_t{1} << 24;

const char* physical_name(int32_t t) {
  static const char* names[] = {"BOOLEAN", "INT32",  "INT64",      "INT96",
                                "FLOAT",   "DOUBLE", "BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY"};
  return t >= 0 && t < 8 ? names[t] : "UNKNOWN";
}

// The type of a primitive field for messages, and whether it holds text or plain bytes.
std::string primitive_type(const SchemaElement& e, bool* readable) {
  *readable = false;
  int32_t t = e.type.value_or(-1);
  if (t != static_cast<int32_t>(PhysicalType::kByteArray)) return physical_name(t);
  int lt = e.logical_type.value_or(-1), ct = e.converted_type.value_or(-1);
  if (lt == 5 || ct == 5) return "DECIMAL";
  if (lt == 13 || ct == 20) return "BSON";
  *readable = true;
  if (lt == 1 || ct == 0) return "STRING";
  if (lt == 4 || ct == 4) return "ENUM";
  if (lt == 12 || ct == 19) return "JSON";
  if (lt >= 0 || ct >= 0) *readable = false;  // some other annotation on the bytes
  return *readable ? "BYTE_ARRAY" : "BYTE_ARRAY (annotated)";
}

std::string group_type(const SchemaElement& e) {
  int lt = e.logical_type.value_or(-1), ct = e.converted_type.value_or(-1);
  if (lt == 3 || ct == 3) return "LIST";
  if (lt == 2 || ct == 1 || ct == 2) return "MAP";
  return "STRUCT";
}

}  // namespace

ParquetFile::ParquetFile(const std::string& path) : path_(path) {
  // Non-blocking: a FIFO is refused below instead of blocking open() (reads of a regular file
  // never block).
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) throw UserError(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw UserError(path + ": not a regular file");
  }
  size_ = st.st_size;
  try {
    uint8_t head[4], tail[8];
    if (size_ < 12)
      throw UserError(path + ": not a Parquet file (only " + std::to_string(size_) + " bytes)");
    read_at(0, 4, head);
    if (std::memcmp(head, "PAR1", 4) != 0)
      throw UserError(path + ": not a Parquet file (no PAR1 magic at the start)");
    read_at(size_ - 8, 8, tail);
    if (std::memcmp(tail + 4, "PARE", 4) == 0)
      throw UserError(path + ": encrypted Parquet files are not supported");
    if (std::memcmp(tail + 4, "PAR1", 4) != 0)
      throw UserError(path + ": not a Parquet file or truncated (no PAR1 magic at the end)");
    uint32_t footer_len;
    std::memcpy(&footer_len, tail, 4);
    if (footer_len > static_cast<uint64_t>(size_ - 12))
      throw UserError(path + ": footer length " + std::to_string(footer_len) +
                      " points before the start of the file (" + std::to_string(size_) +
                      " bytes; truncated or corrupt)");
    data_end_ = size_ - 8 - footer_len;
    std::vector<uint8_t> footer(footer_len);
    read_at(data_end_, footer_len, footer.data());
    meta_ = decode_file_metadata(footer.data(), footer.size(), path + ": footer");
    build_columns();
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

ParquetFile::~ParquetFile() {
  ::close(fd_);
}

void ParquetFile::read_at(int64_t offset, size_t n, uint8_t* out) const {
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd_, out + done, n - done, offset + static_cast<int64_t>(done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      throw UserError(path_ + ": cannot read " + std::to_string(n) + " bytes at offset " +
                      std::to_string(offset) + ": " +
                      (r < 0 ? std::strerror(errno) : "the file is shorter than expected"));
    done += static_cast<size_t>(r);
  }
}

void ParquetFile::build_columns() {
  const auto& s = meta_.schema;
  if (s.empty()) throw UserError(path_ + ": footer: the schema is empty");
  int leaves = 0;
  size_t next = 1;
  // Walks the subtree at schema[next], advancing next; returns its number of leaves.
  auto walk = [&](auto&& self, int depth) -> int {
    if (next >= s.size() || depth > kMaxSchemaDepth)
      throw UserError(path_ + ": footer: the schema's child counts do not match its elements");
    const SchemaElement& e = s[next++];
    if (e.num_children < 0) throw UserError(path_ + ": footer: negative child count in the schema");
    if (e.num_children == 0) return e.type ? 1 : 0;
    int n = 0;
    for (int32_t c = 0; c < e.num_children; ++c) n += self(self, depth + 1);
    return n;
  };
  if (s[0].num_children < 0 || static_cast<size_t>(s[0].num_children) >= s.size())
    throw UserError(path_ + ": footer: the schema's root child count is wrong");
  for (int32_t c = 0; c < s[0].num_children; ++c) {
    size_t at = next;
    int n = walk(walk, 0);
    const SchemaElement& e = s[at];
    ColumnInfo col;
    col.name = e.name;
    if (e.num_children > 0 || !e.type) {
      col.nested = true;
      col.type = group_type(e);
    } else {
      col.type = primitive_type(e, &col.readable);
      int32_t rep = e.repetition.value_or(0);
      if (rep == static_cast<int32_t>(Repetition::kRepeated)) {
        col.nested = true;
        col.readable = false;
        col.type = "REPEATED " + col.type;
      }
      col.max_def = rep == static_cast<int32_t>(Repetition::kOptional) ? 1 : 0;
      col.leaf = leaves;
    }
    leaves += n;
    columns_.push_back(std::move(col));
  }
  if (next != s.size())
    throw UserError(path_ + ": footer: the schema's child counts do not match its elements");
  for (size_t g = 0; g < meta_.row_groups.size(); ++g) {
    const RowGroup& rg = meta_.row_groups[g];
    if (rg.columns.size() != static_cast<size_t>(leaves))
      throw UserError(path_ + ": footer: row group " + std::to_string(g) + " has " +
                      std::to_string(rg.columns.size()) + " column chunks, the schema " +
                      std::to_string(leaves) + " columns");
    if (rg.num_rows < 0)
      throw UserError(path_ + ": footer: row group " + std::to_string(g) + " has " +
                      std::to_string(rg.num_rows) + " rows");
  }
}

std::string ParquetFile::describe_columns() const {
  std::string out;
  for (const ColumnInfo& c : columns_) out += (out.empty() ? "" : ", ") + c.name + ": " + c.type;
  return out;
}

const ColumnInfo& ParquetFile::string_column(const std::string& name) const {
  for (const ColumnInfo& c : columns_) {
    if (c.name != name) continue;
    if (c.nested)
      throw UserError(path_ + ": column '" + name + "' is a nested " + c.type +
                      " column; only flat string columns can be read");
    if (!c.readable)
      throw UserError(path_ + ": column '" + name + "' is " + c.type + ", not a string column");
    return c;
  }
  throw UserError(path_ + ": no column '" + name + "' (columns: " + describe_columns() + ")");
}

// ---- ColumnChunkReader ----

uint8_t* ColumnChunkReader::Buffer::reserve(size_t n) {
  if (n > capacity || !data) {
    data.reset(new uint8_t[std::max<size_t>(n, 1)]);
    capacity = std::max<size_t>(n, 1);
  }
  return data.get();
}

ColumnChunkReader::ColumnChunkReader(const ParquetFile& file, const ColumnInfo& column,
                                     int row_group)
    : file_(file), column_(column) {
  what_ = file.path() + ": column '" + column.name + "', row group " + std::to_string(row_group);
  const ColumnChunk& c =
      file.meta().row_groups.at(static_cast<size_t>(row_group)).columns.at(column.leaf);
  if (!c.has_meta) fail("the column chunk has no metadata");
  if (c.external) fail("the column chunk lives in another file (file_path); not supported");
  if (c.type != static_cast<int32_t>(PhysicalType::kByteArray))
    fail(std::string("the column chunk holds ") + physical_name(c.type) +
         " values but the schema says BYTE_ARRAY");
  codec_ = c.codec;
  if (codec_ != static_cast<int32_t>(Codec::kUncompressed) &&
      codec_ != static_cast<int32_t>(Codec::kSnappy) &&
      codec_ != static_cast<int32_t>(Codec::kZstd))
    fail("compression codec " + codec_name(codec_) +
         " is not supported (supported: UNCOMPRESSED, SNAPPY, ZSTD)");
  int64_t start = c.data_page_offset;
  if (c.dictionary_page_offset && *c.dictionary_page_offset > 0 &&
      *c.dictionary_page_offset < start)
    start = *c.dictionary_page_offset;
  if (start < 4 || start > file.data_end() || c.total_compressed_size < 0 ||
      c.total_compressed_size > file.data_end() - start)
    fail("the column chunk's byte range (offset " + std::to_string(start) + ", " +
         std::to_string(c.total_compressed_size) + " bytes) lies outside the file's data");
  // A flat column has one value (or null) per row.
  const int64_t rows = file.meta().row_groups[static_cast<size_t>(row_group)].num_rows;
  if (c.num_values != rows)
    fail("the column chunk holds " + std::to_string(c.num_values) + " values but its row group " +
         std::to_string(rows) + " rows");
  pos_ = start;
  end_ = start + c.total_compressed_size;
  values_left_ = c.num_values;
}

ColumnChunkReader::~ColumnChunkReader() = default;

void ColumnChunkReader::fail(const std::string& reason) const {
  throw UserError(what_ + ": " + reason);
}

const uint8_t* ColumnChunkReader::decompress(const uint8_t* in, size_t n, size_t out_n,
                                             bool compressed) {
  if (!compressed || codec_ == static_cast<int32_t>(Codec::kUncompressed)) {
    if (n != out_n)
      fail("an uncompressed page of " + std::to_string(n) + " bytes claims " +
           std::to_string(out_n) + " bytes uncompressed");
    return in;
  }
  const char* src = reinterpret_cast<const char*>(in);
  if (codec_ == static_cast<int32_t>(Codec::kSnappy)) {
    size_t len = 0;
    if (snappy_uncompressed_length(src, n, &len) != SNAPPY_OK || len != out_n)
      fail("corrupt SNAPPY page (its length does not match the page header's)");
    char* out = reinterpret_cast<char*>(page_.reserve(out_n));
    if (snappy_uncompress(src, n, out, &len) != SNAPPY_OK || len != out_n)
      fail("corrupt SNAPPY page");
    return page_.data.get();
  }
  // The first frame's declared size (writers emit one frame per page) must fit the page.
  unsigned long long first = ZSTD_getFrameContentSize(src, n);
  const bool one_frame = ZSTD_findFrameCompressedSize(src, n) == n;
  if (first == ZSTD_CONTENTSIZE_ERROR ||
      (first != ZSTD_CONTENTSIZE_UNKNOWN && first > static_cast<unsigned long long>(out_n)) ||
      (first != ZSTD_CONTENTSIZE_UNKNOWN && one_frame && first != out_n))
    fail("corrupt ZSTD page (its size does not match the page header's)");
  // One decompression context per thread, reused by every reader (making one costs ~100 KB).
  static thread_local std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> dctx(ZSTD_createDCtx(),
                                                                              ZSTD_freeDCtx);
  if (!dctx) fail("out of memory for a ZSTD context");
  size_t got = ZSTD_decompressDCtx(dctx.get(), page_.reserve(out_n), out_n, src, n);
  if (ZSTD_isError(got) || got != out_n)
    fail(std::string("corrupt ZSTD page: ") +
         (ZSTD_isError(got) ? ZSTD_getErrorName(got) : "short output"));
  return page_.data.get();
}

void ColumnChunkReader::decode_dictionary(const PageHeader& h, const uint8_t* data, size_t n) {
  if (h.encoding != static_cast<int32_t>(Encoding::kPlain) &&
      h.encoding != static_cast<int32_t>(Encoding::kPlainDictionary))
    fail("dictionary page encoding " + encoding_name(h.encoding) + " is not supported");
  if (has_dict_) fail("a second dictionary page");
  if (h.num_values < 0) fail("negative dictionary size");
  uint8_t* copy = dict_buf_.reserve(n);  // raw_ and page_ are reused by later pages
  if (n) std::memcpy(copy, data, n);
  decode_plain_byte_arrays(Bytes{copy, copy + n}, static_cast<size_t>(h.num_values), dict_,
                           what_ + ": dictionary page");
  has_dict_ = true;
}

void ColumnChunkReader::decode_values(const PageHeader& h, const uint8_t* p, const uint8_t* end,
                                      size_t count) {
  const std::string what = what_ + ": data page";
  Bytes in{p, end};
  if (count == 0) {  // all nulls: writers may leave the value section empty
    values_.clear();
    return;
  }
  switch (static_cast<Encoding>(h.encoding)) {
    case Encoding::kPlain:
      decode_plain_byte_arrays(in, count, values_, what);
      return;
    case Encoding::kPlainDictionary:
    case Encoding::kRleDictionary: {
      if (!has_dict_) fail("a dictionary-encoded page but no dictionary page");
      values_.resize(count);
      if (in.p >= in.end) fail("dictionary-encoded page without data");
      int bw = *in.p++;
      scratch_.resize(count);
      decode_rle_hybrid(in, bw, count, scratch_.data(), what);
      for (size_t i = 0; i < count; ++i) {
        if (scratch_[i] >= dict_.size())
          fail("dictionary index " + std::to_string(scratch_[i]) + " past the dictionary's " +
               std::to_string(dict_.size()) + " entries");
        values_[i] = dict_[scratch_[i]];
      }
      return;
    }
    case Encoding::kDeltaLengthByteArray:
      decode_delta_length_byte_arrays(in, count, values_, what);
      return;
    case Encoding::kDeltaByteArray:
      decode_delta_byte_arrays(in, count, arena_, values_, what);
      return;
    default:
      fail("encoding " + encoding_name(h.encoding) +
           " is not supported (supported: PLAIN, PLAIN_DICTIONARY, RLE_DICTIONARY, "
           "DELTA_LENGTH_BYTE_ARRAY, DELTA_BYTE_ARRAY)");
  }
}

bool ColumnChunkReader::load_data_page() {
  std::vector<uint8_t> header;
  for (;;) {
    if (pos_ >= end_) {
      if (values_left_ != 0)
        fail("the column chunk ends " + std::to_string(values_left_) +
             " values short of its num_values");
      return false;
    }
    // The header: read a little, and more while it turns out longer.
    const std::string where = what_ + ": page at byte " + std::to_string(pos_);
    PageHeader h;
    size_t used = 0;
    for (size_t want = std::min<int64_t>(end_ - pos_, 1024);; want *= 8) {
      want = std::min<size_t>(want, static_cast<size_t>(end_ - pos_));
      header.resize(want);
      file_.read_at(pos_, want, header.data());
      try {
        h = decode_page_header(header.data(), want, where + ": page header", &used);
        break;
      } catch (const ThriftTruncated&) {
        if (want == static_cast<size_t>(end_ - pos_))
          throw UserError(where + ": the page header runs past the end of the column chunk");
        if (want >= kMaxPageHeader) throw UserError(where + ": page header larger than 64 MiB");
      }
    }
    if (h.compressed_size < 0 || h.uncompressed_size < 0 || h.uncompressed_size > kMaxPage)
      throw UserError(where + ": bad page sizes " + std::to_string(h.compressed_size) + " / " +
                      std::to_string(h.uncompressed_size));
    const int64_t body = pos_ + static_cast<int64_t>(used);
    if (h.compressed_size > end_ - body)
      throw UserError(where + ": page size " + std::to_string(h.compressed_size) +
                      " runs past the end of the column chunk (byte " + std::to_string(end_) + ")");
    pos_ = body + h.compressed_size;
    const auto type = static_cast<PageType>(h.type);
    if (type != PageType::kData && type != PageType::kDataV2 && type != PageType::kDictionary)
      continue;  // index pages and unknown kinds carry no values
    if (!h.has_data_header) throw UserError(where + ": the page header lacks its page's header");
    const size_t csize = static_cast<size_t>(h.compressed_size);
    const size_t usize = static_cast<size_t>(h.uncompressed_size);
    uint8_t* raw = raw_.reserve(csize);
    file_.read_at(body, csize, raw);
    if (type == PageType::kDictionary) {
      decode_dictionary(h, decompress(raw, csize, usize, true), usize);
      continue;
    }
    if (h.num_values < 0 || h.num_values > values_left_ || h.num_values > kMaxPageValues)
      throw UserError(where + ": the page holds " + std::to_string(h.num_values) +
                      " values, more than the " + std::to_string(values_left_) +
                      " left in the column chunk");
    values_left_ -= h.num_values;
    const size_t n = static_cast<size_t>(h.num_values);
    const uint8_t* data;
    const uint8_t* data_end;
    Bytes defs{nullptr, nullptr};
    if (type == PageType::kData) {
      data = decompress(raw, csize, usize, true);
      data_end = data + usize;
      if (column_.max_def > 0) {
        if (h.def_level_encoding != static_cast<int32_t>(Encoding::kRle))
          throw UserError(where + ": definition levels in encoding " +
                          encoding_name(h.def_level_encoding) + " are not supported");
        uint32_t len = 0;
        if (usize < 4) throw UserError(where + ": definition levels missing");
        std::memcpy(&len, data, 4);
        if (len > usize - 4) throw UserError(where + ": definition levels run past the page");
        defs = Bytes{data + 4, data + 4 + len};
        data += 4 + len;
      }
    } else {
      const int64_t rep = h.rep_levels_length, def = h.def_levels_length;
      if (rep < 0 || def < 0 || rep + def > static_cast<int64_t>(std::min(csize, usize)))
        throw UserError(where + ": level lengths run past the page");
      const size_t levels = static_cast<size_t>(rep + def);
      defs = Bytes{raw + rep, raw + levels};
      data = decompress(raw + levels, csize - levels, usize - levels, h.is_compressed);
      data_end = data + (usize - levels);
    }
    defs_.resize(n);
    size_t non_null = n;
    if (column_.max_def > 0) {
      scratch_.resize(n);
      decode_rle_hybrid(defs, 1, n, scratch_.data(), where + ": definition levels");
      non_null = 0;
      for (size_t i = 0; i < n; ++i) {
        defs_[i] = static_cast<uint8_t>(scratch_[i]);
        non_null += scratch_[i];
      }
    } else {
      std::fill(defs_.begin(), defs_.end(), uint8_t{0});
    }
    decode_values(h, data, data_end, non_null);
    level_ = value_ = 0;
    if (n > 0) return true;
  }
}

}  // namespace lmt::parquet

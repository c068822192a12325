// Decoding FileMetaData and PageHeader from the Thrift compact protocol (ids from parquet.thrift).
#include "data/parquet/parquet_meta.h"

#include "core/error.h"
#include "data/parquet/thrift_compact.h"

namespace lmt::parquet {

std::string codec_name(int32_t codec) {
  static const char* names[] = {"UNCOMPRESSED", "SNAPPY", "GZIP", "LZO",
                                "BROTLI",       "LZ4",    "ZSTD", "LZ4_RAW"};
  if (codec >= 0 && codec < 8) return names[codec];
  return "codec " + std::to_string(codec);
}

std::string encoding_name(int32_t encoding) {
  static const char* names[] = {
      "PLAIN",          "GROUP_VAR_INT",       "PLAIN_DICTIONARY",        "RLE",
      "BIT_PACKED",     "DELTA_BINARY_PACKED", "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY",
      "RLE_DICTIONARY", "BYTE_STREAM_SPLIT"};
  if (encoding >= 0 && encoding < 10) return names[encoding];
  return "encoding " + std::to_string(encoding);
}

namespace {

int32_t i32(ThriftReader& r, TType t) {
  int64_t v = r.read_int(t);
  if (v < INT32_MIN || v > INT32_MAX) r.fail("i32 field out of range");
  return static_cast<int32_t>(v);
}

SchemaElement read_schema_element(ThriftReader& r) {
  SchemaElement e;
  r.read_struct([&](int16_t id, TType t) {
    switch (id) {
      case 1:
        e.type = i32(r, t);
        return true;
      case 3:
        e.repetition = i32(r, t);
        return true;
      case 4:
        e.name = std::string(r.read_binary(t));
        return true;
      case 5:
        e.num_children = i32(r, t);
        return true;
      case 6:
        e.converted_type = i32(r, t);
        return true;
      case 10:
        if (t != TType::kStruct) return false;
        r.read_struct([&](int16_t lid, TType lt) {
          e.logical_type = lid;
          r.skip(lt);
          return true;
        });
        return true;
      default:
        return false;
    }
  });
  return e;
}

void read_column_meta(ThriftReader& r, ColumnChunk& c) {
  c.has_meta = true;
  r.read_struct([&](int16_t id, TType t) {
    switch (id) {
      case 1:
        c.type = i32(r, t);
        return true;
      case 4:
        c.codec = i32(r, t);
        return true;
      case 5:
        c.num_values = r.read_int(t);
        return true;
      case 7:
        c.total_compressed_size = r.read_int(t);
        return true;
      case 9:
        c.data_page_offset = r.read_int(t);
        return true;
      case 11:
        c.dictionary_page_offset = r.read_int(t);
        return true;
      default:
        return false;
    }
  });
}

ColumnChunk read_column_chunk(ThriftReader& r) {
  ColumnChunk c;
  r.read_struct([&](int16_t id, TType t) {
    switch (id) {
      case 1:
        c.external = !r.read_binary(t).empty();
        return true;
      case 3:
        if (t != TType::kStruct) return false;
        read_column_meta(r, c);
        return true;
      default:
        return false;
    }
  });
  return c;
}

RowGroup read_row_group(ThriftReader& r) {
  RowGroup g;
  r.read_struct([&](int16_t id, TType t) {
    switch (id) {
      case 1:
        if (t != TType::kList) return false;
        r.read_list([&](TType e) {
          if (e != TType::kStruct) r.fail("a column chunk is not a struct");
          g.columns.push_back(read_column_chunk(r));
        });
        return true;
      case 3:
        g.num_rows = r.read_int(t);
        return true;
      default:
        return false;
    }
  });
  return g;
}

}  // namespace

FileMetaData decode_file_metadata(const uint8_t* data, size_t size, const std::string& what) {
  ThriftReader r(data, size, what);
  FileMetaData m;
  try {
    r.read_struct([&](int16_t id, TType t) {
      switch (id) {
        case 2:
          if (t != TType::kList) return false;
          r.read_list([&](TType e) {
            if (e != TType::kStruct) r.fail("a schema element is not a struct");
            m.schema.push_back(read_schema_element(r));
          });
          return true;
        case 3:
          m.num_rows = r.read_int(t);
          return true;
        case 4:
          if (t != TType::kList) return false;
          r.read_list([&](TType e) {
            if (e != TType::kStruct) r.fail("a row group is not a struct");
            m.row_groups.push_back(read_row_group(r));
          });
          return true;
        case 6:
          m.created_by = std::string(r.read_binary(t));
          return true;
        default:
          return false;
      }
    });
  } catch (const ThriftTruncated&) {
    r.fail("the metadata ends in the middle of a value (corrupt or truncated)");
  }
  return m;
}

PageHeader decode_page_header(const uint8_t* data, size_t size, const std::string& what,
                              size_t* used) {
  ThriftReader r(data, size, what);
  PageHeader h;
  auto data_header = [&](bool v2) {
    h.has_data_header = true;
    r.read_struct([&](int16_t id, TType t) {
      switch (id) {
        case 1:
          h.num_values = i32(r, t);
          return true;
        case 2:
          if (!v2) {
            h.encoding = i32(r, t);
            return true;
          }
          return false;
        case 3:
          if (!v2) {
            h.def_level_encoding = i32(r, t);
            return true;
          }
          return false;
        case 4:
          if (v2) {
            h.encoding = i32(r, t);
            return true;
          }
          return false;
        case 5:
          if (v2) {
            h.def_levels_length = i32(r, t);
            return true;
          }
          return false;
        case 6:
          if (v2) {
            h.rep_levels_length = i32(r, t);
            return true;
          }
          return false;
        case 7:
          if (v2) {
            h.is_compressed = r.read_bool(t);
            return true;
          }
          return false;
        default:
          return false;
      }
    });
  };
  r.read_struct([&](int16_t id, TType t) {
    switch (id) {
      case 1:
        h.type = i32(r, t);
        return true;
      case 2:
        h.uncompressed_size = i32(r, t);
        return true;
      case 3:
        h.compressed_size = i32(r, t);
        return true;
      case 5:
        if (t != TType::kStruct || h.type != static_cast<int32_t>(PageType::kData)) return false;
        data_header(false);
        return true;
      case 7:
        if (t != TType::kStruct || h.type != static_cast<int32_t>(PageType::kDictionary))
          return false;
        h.has_data_header = true;
        r.read_struct([&](int16_t did, TType dt) {
          if (did == 1)
            h.num_values = i32(r, dt);
          else if (did == 2)
            h.encoding = i32(r, dt);
          else
            return false;
          return true;
        });
        return true;
      case 8:
        if (t != TType::kStruct || h.type != static_cast<int32_t>(PageType::kDataV2)) return false;
        data_header(true);
        return true;
      default:
        return false;
    }
  });
  *used = r.position();
  return h;
}

}  // namespace lmt::parquet

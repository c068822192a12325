// Parquet sources: the document is one string column of each row (or, for instruction data,
// several columns of a row). Read by lmtrain's own reader (data/parquet/): flat schemas,
// UNCOMPRESSED / SNAPPY / ZSTD, data pages v1 and v2, plain, dictionary and delta byte-array
// encodings; a column chunk is read a page at a time, so memory stays bounded whatever the file
// size. Every problem is a UserError naming the file (and column, row group or row).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/jsonl_source.h"

namespace lmt {

// Calls fn(value) for the `column` value of every row, in file order. Null and empty values and
// invalid UTF-8 are bad records: UserError "FILE: row N: reason" unless `skipped` is given,
// which counts them by reason. The view is valid only during the call.
void parquet_documents(const std::string& path, const std::string& column, SkippedRecords* skipped,
                       const std::function<void(std::string_view)>& fn);

// Several string columns per row (instruction data: instruction / input / output); a null is
// std::nullopt, values are passed as stored (not checked for UTF-8). `row` is 1-based. The views
// are valid only during the call.
void parquet_rows(
    const std::string& path, const std::vector<std::string>& columns,
    const std::function<void(int64_t row, std::span<const std::optional<std::string_view>> values)>&
        fn);

// The top-level columns and their types, for messages and listings.
struct ParquetColumn {
  std::string name;
  std::string type;  // STRING, BYTE_ARRAY, INT64, DOUBLE, LIST, STRUCT, ...
};
std::vector<ParquetColumn> parquet_columns(const std::string& path);
// "id: INT64, body: STRING"
std::string parquet_describe_columns(const std::string& path);

}  // namespace lmt

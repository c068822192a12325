// parquet_documents / parquet_rows: row groups in order, one ColumnChunkReader per selected
// column, rows zipped across them (each column's row count must match its row group's).
#include "data/parquet_source.h"

#include <simdjson.h>

#include <memory>

#include "core/error.h"
#include "data/parquet/parquet_reader.h"

namespace lmt {

namespace {

using parquet::ColumnChunkReader;
using parquet::ColumnInfo;
using parquet::ParquetFile;

using RowFn = std::function<void(int64_t, std::span<const std::optional<std::string_view>>)>;

void for_each_row(const std::string& path, const std::vector<std::string>& names, const RowFn& fn) {
  ParquetFile file(path);
  std::vector<const ColumnInfo*> cols;
  for (const std::string& name : names) cols.push_back(&file.string_column(name));
  std::vector<std::optional<std::string_view>> values(cols.size());
  int64_t row = 0;
  const auto& groups = file.meta().row_groups;
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<std::unique_ptr<ColumnChunkReader>> readers;
    for (const ColumnInfo* c : cols)
      readers.push_back(std::make_unique<ColumnChunkReader>(file, *c, static_cast<int>(g)));
    const int64_t rows = groups[g].num_rows;
    for (int64_t r = 0; r < rows; ++r) {
      for (size_t k = 0; k < readers.size(); ++k)
        if (!readers[k]->next(&values[k]))
          throw UserError(readers[k]->what() + ": holds " + std::to_string(r) +
                          " values but the row group has " + std::to_string(rows) + " rows");
      fn(++row, values);
    }
    for (auto& reader : readers) {
      std::optional<std::string_view> extra;
      if (reader->next(&extra))
        throw UserError(reader->what() + ": holds more values than the row group's " +
                        std::to_string(rows) + " rows");
    }
  }
}

}  // namespace

void parquet_documents(const std::string& path, const std::string& column, SkippedRecords* skipped,
                       const std::function<void(std::string_view)>& fn) {
  for_each_row(
      path, {column}, [&](int64_t row, std::span<const std::optional<std::string_view>> v) {
        auto bad = [&](const std::string& reason) {
          if (!skipped)
            throw UserError(path + ": row " + std::to_string(row) + ": " + reason +
                            " (set on_error: skip on the source to skip and count such records)");
          skipped->add(reason);
        };
        const std::optional<std::string_view>& doc = v[0];
        if (!doc)
          bad("null in column '" + column + "'");
        else if (doc->empty())
          bad("empty document");
        else if (!simdjson::validate_utf8(doc->data(), doc->size()))
          bad("invalid UTF-8");
        else
          fn(*doc);
      });
}

void parquet_rows(const std::string& path, const std::vector<std::string>& columns,
                  const RowFn& fn) {
  for_each_row(path, columns, fn);
}

std::vector<ParquetColumn> parquet_columns(const std::string& path) {
  ParquetFile file(path);
  std::vector<ParquetColumn> out;
  for (const ColumnInfo& c : file.columns()) out.push_back({c.name, c.type});
  return out;
}

std::string parquet_describe_columns(const std::string& path) {
  return ParquetFile(path).describe_columns();
}

}  // namespace lmt

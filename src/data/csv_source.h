// CSV and TSV sources (RFC 4180): a header row names the columns, the document is one column of
// each later row. Quoted fields may hold the separator, doubled quotes and line breaks; rows end
// with LF or CRLF. Problems are reported as FILE:LINE and a reason, or skipped and counted.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "data/jsonl_source.h"

namespace lmt {

// Calls fn(document) for the `column` field of every data row of a CSV (sep ',') or TSV
// (sep '\t') file held in `text`. A missing header column, an unterminated quote, a stray quote
// or a row whose field count differs from the header's are errors; empty documents and invalid
// UTF-8 are bad records (counted in `skipped` when given, else errors). Blank lines are skipped.
// `consumed`, when given, holds the offset just past the current record while fn runs. A record
// longer than max_record_bytes is a bad record ("record too long"), its fields never held.
void csv_documents(std::string_view text, char sep, const std::string& file,
                   const std::string& column, SkippedRecords* skipped,
                   const std::function<void(std::string_view)>& fn, size_t* consumed = nullptr,
                   int64_t max_record_bytes = kMaxRecordBytes);

// The record-level loop under csv_documents: calls on_header(names, line) once with the header
// row, then fn(fields, line) for every data row (as many fields as the header: a row of another
// width, an unterminated quote or a stray quote is a UserError "FILE:LINE: ..."). Nothing is
// validated beyond the structure: fn checks the fields it uses (UTF-8, emptiness). A data row
// longer than max_record_bytes is a bad record (counted in `skipped` when given, else a
// UserError), read through without holding its fields; a header row that long is an error.
void csv_rows(
    std::string_view text, char sep, const std::string& file,
    const std::function<void(const std::vector<std::string>& names, int64_t line)>& on_header,
    const std::function<void(const std::vector<std::string>& fields, int64_t line)>& fn,
    size_t* consumed = nullptr, int64_t max_record_bytes = kMaxRecordBytes,
    SkippedRecords* skipped = nullptr);

// The index of `column` in a header row; throws UserError "FILE:LINE: no column ..." naming the
// columns there are. With `optional`, returns names.size() instead of throwing.
size_t csv_column(const std::vector<std::string>& names, const std::string& column,
                  const std::string& file, int64_t line, bool optional = false);

}  // namespace lmt

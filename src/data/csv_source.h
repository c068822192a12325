// CSV and TSV sources (RFC 4180): a header row names the columns, the document is one column of
// each later row. Quoted fields may hold the separator, doubled quotes and line breaks; rows end
// with LF or CRLF. Problems are reported as FILE:LINE and a reason, or skipped and counted.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "data/jsonl_source.h"

namespace lmt {

// Calls fn(document) for the `column` field of every data row of a CSV (sep ',') or TSV
// (sep '\t') file held in `text`. A missing header column, an unterminated quote, a stray quote
// or a row whose field count differs from the header's are errors; empty documents and invalid
// UTF-8 are bad records (counted in `skipped` when given, else errors). Blank lines are skipped.
// `consumed`, when given, holds the offset just past the current record while fn runs.
void csv_documents(std::string_view text, char sep, const std::string& file,
                   const std::string& column, SkippedRecords* skipped,
                   const std::function<void(std::string_view)>& fn, size_t* consumed = nullptr);

}  // namespace lmt

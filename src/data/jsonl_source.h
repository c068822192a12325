// JSONL sources: one JSON object per line, the document being one string field of it ("text" by
// default). Lines are parsed one at a time with simdjson's on-demand parser, so a file of any
// size streams through memory a line at a time, and every problem is reported as FILE:LINE and a
// reason. With on_error = skip, bad records are counted by reason instead of stopping the run.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

namespace simdjson::dom {
class object;
}

namespace lmt {

// The longest JSONL record (line) read by default: the DOM parse of a line takes several times
// its size, so a longer one is a bad record rather than gigabytes of memory.
inline constexpr int64_t kMaxRecordBytes = int64_t{64} << 20;

// Bad records a source skipped, by reason ("malformed JSON", "missing field 'text'", ...).
struct SkippedRecords {
  int64_t total = 0;
  std::map<std::string, int64_t> by_reason;
  void add(const std::string& reason) {
    ++total;
    ++by_reason[reason];
  }
};

// "skipped N: reason n, reason n" for a summary line; "" when nothing was skipped.
std::string skipped_summary(int64_t total, const std::map<std::string, int64_t>& by_reason);

// One bad record: a UserError "FILE:LINE: detail (set on_error: skip ...)" when `skipped` is null,
// else counted under `reason`.
void report_bad_record(SkippedRecords* skipped, const std::string& file, int64_t line,
                       const std::string& reason, const std::string& detail);
// The same for a record located otherwise ("FILE: row N" for Parquet): `where` opens the message.
void report_bad_record(SkippedRecords* skipped, const std::string& where,
                       const std::string& reason, const std::string& detail);

// Calls fn(document) for every record of a JSONL file held in `text`. `file` names it in
// messages. Blank lines are not records. A record is bad when its line is not a JSON object,
// the field is missing or not a string, the string is not valid UTF-8, or it is empty: a
// UserError "FILE:LINE: reason" unless skipped is given, which then counts it.
// When `consumed` is given, it holds the offset just past the current record while fn runs (so a
// caller reading through a MappedFile can release what lies before it).
// A line longer than max_record_bytes is a bad record ("record too long"), not parsed.
void jsonl_documents(std::string_view text, const std::string& file, const std::string& field,
                     SkippedRecords* skipped, const std::function<void(std::string_view)>& fn,
                     size_t* consumed = nullptr, int64_t max_record_bytes = kMaxRecordBytes);

// The record-level loop under jsonl_documents: calls fn(object, line) for every line that is a
// JSON object (valid UTF-8); malformed lines and non-objects are bad records as above. fn reads
// the fields it needs (include <simdjson.h>) and reports its own bad records.
void jsonl_objects(std::string_view text, const std::string& file, SkippedRecords* skipped,
                   const std::function<void(const simdjson::dom::object&, int64_t line)>& fn,
                   size_t* consumed = nullptr, int64_t max_record_bytes = kMaxRecordBytes);

}  // namespace lmt

#include "data/jsonl_source.h"

#include <simdjson.h>

#include "core/error.h"

namespace lmt {

namespace {

bool blank(std::string_view line) {
  for (char c : line)
    if (c != ' ' && c != '\t' && c != '\r') return false;
  return true;
}

}  // namespace

std::string skipped_summary(int64_t total, const std::map<std::string, int64_t>& by_reason) {
  if (total == 0) return "";
  std::string out = "skipped " + std::to_string(total) + ":";
  for (const auto& [reason, n] : by_reason) out += " " + reason + " " + std::to_string(n) + ",";
  out.pop_back();
  return out;
}

void report_bad_record(SkippedRecords* skipped, const std::string& where,
                       const std::string& reason, const std::string& detail) {
  if (!skipped)
    throw UserError(where + ": " + detail +
                    " (set on_error: skip on the source to skip and count such records)");
  skipped->add(reason);
}

void report_bad_record(SkippedRecords* skipped, const std::string& file, int64_t line,
                       const std::string& reason, const std::string& detail) {
  report_bad_record(skipped, file + ":" + std::to_string(line), reason, detail);
}

void jsonl_objects(std::string_view text, const std::string& file, SkippedRecords* skipped,
                   const std::function<void(const simdjson::dom::object&, int64_t line)>& fn,
                   size_t* consumed, int64_t max_record_bytes) {
  // The DOM parser validates each whole line (syntax, UTF-8, trailing content), so a record is
  // either good or reported; lines are short, so the tape costs little.
  simdjson::dom::parser parser;
  int64_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (consumed) *consumed = std::min(pos, text.size());
    ++line_no;
    if (blank(line)) continue;
    auto bad = [&](const std::string& reason) {
      report_bad_record(skipped, file, line_no, reason, reason);
    };
    if (line.size() > static_cast<uint64_t>(max_record_bytes)) {
      report_bad_record(skipped, file, line_no, "record too long",
                        "a record of " + std::to_string(line.size()) + " bytes, more than the " +
                            std::to_string(max_record_bytes) + " of the source's max_record_bytes");
      continue;
    }
    simdjson::dom::element doc;
    if (auto err = parser.parse(line.data(), line.size()).get(doc)) {
      bad(err == simdjson::UTF8_ERROR ? "invalid UTF-8" : "malformed JSON");
      continue;
    }
    simdjson::dom::object obj;
    if (doc.get_object().get(obj)) {
      bad("not a JSON object");
      continue;
    }
    fn(obj, line_no);
  }
}

void jsonl_documents(std::string_view text, const std::string& file, const std::string& field,
                     SkippedRecords* skipped, const std::function<void(std::string_view)>& fn,
                     size_t* consumed, int64_t max_record_bytes) {
  jsonl_objects(
      text, file, skipped,
      [&](const simdjson::dom::object& obj, int64_t line) {
        auto bad = [&](const std::string& reason) {
          report_bad_record(skipped, file, line, reason, reason);
        };
        simdjson::dom::element value;
        if (obj.at_key(field).get(value)) return bad("missing field '" + field + "'");
        std::string_view s;
        if (value.get_string().get(s)) return bad("field '" + field + "' is not a string");
        if (s.empty()) return bad("empty document");
        fn(s);
      },
      consumed, max_record_bytes);
}

}  // namespace lmt

#include "data/csv_source.h"

#include <simdjson.h>

#include <vector>

#include "core/error.h"

namespace lmt {

namespace {

// Reads one record starting at `pos` into `fields`; returns false at the end of the text.
// `line` counts physical lines (quoted line breaks included) for messages.
class CsvReader {
 public:
  // max_record_bytes: a record longer than this is read through without keeping its fields
  // (oversized() says so), so that one huge record costs no memory.
  CsvReader(std::string_view text, char sep, const std::string& file, int64_t max_record_bytes)
      : text_(text), sep_(sep), file_(file), max_(static_cast<size_t>(max_record_bytes)) {}

  size_t position() const { return pos_; }
  bool oversized() const { return oversized_; }
  size_t record_bytes() const { return pos_ - start_; }

  bool next(std::vector<std::string>& fields, int64_t& record_line) {
    fields.clear();
    while (pos_ < text_.size() && (text_[pos_] == '\n' || is_crlf(pos_))) skip_line_end();
    if (pos_ >= text_.size()) return false;
    record_line = line_;
    start_ = pos_;
    oversized_ = false;
    std::string field;
    for (;;) {
      field.clear();
      if (pos_ < text_.size() && text_[pos_] == '"') {
        read_quoted(field);
      } else {
        while (pos_ < text_.size() && text_[pos_] != sep_ && text_[pos_] != '\n' &&
               !is_crlf(pos_)) {
          if (text_[pos_] == '"') fail("a quote inside an unquoted field");
          keep(field, text_[pos_++]);
        }
      }
      fields.push_back(field);
      if (pos_ < text_.size() && text_[pos_] == sep_) {
        ++pos_;
        continue;
      }
      if (pos_ < text_.size()) skip_line_end();
      if (oversized_) fields.assign(fields.size(), std::string());
      return true;
    }
  }

  [[noreturn]] void fail(const std::string& reason) const {
    throw UserError(file_ + ":" + std::to_string(line_) + ": " + reason);
  }

 private:
  bool is_crlf(size_t p) const {
    return text_[p] == '\r' && p + 1 < text_.size() && text_[p + 1] == '\n';
  }
  void skip_line_end() {
    pos_ += is_crlf(pos_) ? 2 : 1;
    ++line_;
  }
  void read_quoted(std::string& field) {
    ++pos_;  // opening quote
    for (;;) {
      if (pos_ >= text_.size()) fail("unterminated quoted field");
      const char c = text_[pos_++];
      if (c == '"') {
        if (pos_ < text_.size() && text_[pos_] == '"') {
          keep(field, '"');
          ++pos_;
          continue;
        }
        if (pos_ < text_.size() && text_[pos_] != sep_ && text_[pos_] != '\n' && !is_crlf(pos_))
          fail("text after a closing quote");
        return;
      }
      if (c == '\n') ++line_;
      keep(field, c);
    }
  }
  // Appends c to the field unless the record has grown past the limit.
  void keep(std::string& field, char c) {
    if (!oversized_ && pos_ - start_ > max_) {
      oversized_ = true;
      std::string().swap(field);
    }
    if (!oversized_) field += c;
  }

  std::string_view text_;
  char sep_;
  const std::string& file_;
  size_t max_;
  size_t pos_ = 0, start_ = 0;
  bool oversized_ = false;
  int64_t line_ = 1;
};

}  // namespace

size_t csv_column(const std::vector<std::string>& names, const std::string& column,
                  const std::string& file, int64_t line, bool optional) {
  std::string list;
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == column) return i;
    list += (i ? ", " : "") + names[i];
  }
  if (optional) return names.size();
  throw UserError(file + ":" + std::to_string(line) + ": no column '" + column +
                  "' in the header (columns: " + list + ")");
}

void csv_rows(
    std::string_view text, char sep, const std::string& file,
    const std::function<void(const std::vector<std::string>& names, int64_t line)>& on_header,
    const std::function<void(const std::vector<std::string>& fields, int64_t line)>& fn,
    size_t* consumed, int64_t max_record_bytes, SkippedRecords* skipped) {
  CsvReader reader(text, sep, file, max_record_bytes);
  std::vector<std::string> fields;
  int64_t line = 0;
  auto too_long = [&] {
    return "a record of " + std::to_string(reader.record_bytes()) + " bytes, more than the " +
           std::to_string(max_record_bytes) + " of the source's max_record_bytes";
  };
  if (!reader.next(fields, line)) return;  // an empty file holds no records
  if (reader.oversized())
    throw UserError(file + ":" + std::to_string(line) + ": the header row is " + too_long());
  on_header(fields, line);
  const size_t width = fields.size();
  while (reader.next(fields, line)) {
    if (consumed) *consumed = reader.position();
    if (fields.size() != width)
      throw UserError(file + ":" + std::to_string(line) + ": " + std::to_string(fields.size()) +
                      " fields, the header has " + std::to_string(width));
    if (reader.oversized()) {
      report_bad_record(skipped, file, line, "record too long", too_long());
      continue;
    }
    fn(fields, line);
  }
}

void csv_documents(std::string_view text, char sep, const std::string& file,
                   const std::string& column, SkippedRecords* skipped,
                   const std::function<void(std::string_view)>& fn, size_t* consumed,
                   int64_t max_record_bytes) {
  size_t col = 0;
  csv_rows(
      text, sep, file,
      [&](const std::vector<std::string>& names, int64_t line) {
        col = csv_column(names, column, file, line);
      },
      [&](const std::vector<std::string>& fields, int64_t line) {
        const std::string& doc = fields[col];
        if (doc.empty()) {
          report_bad_record(skipped, file, line, "empty document", "empty document");
        } else if (!simdjson::validate_utf8(doc.data(), doc.size())) {
          report_bad_record(skipped, file, line, "invalid UTF-8", "invalid UTF-8");
        } else {
          fn(doc);
        }
      },
      consumed, max_record_bytes, skipped);
}

}  // namespace lmt

// Plain-text sources: listing files, reading them whole, splitting them into documents.
#include "data/text_source.h"

#include <fnmatch.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <simdjson.h>

#include "core/error.h"
#include "core/mapped_file.h"
#include "data/csv_source.h"
#include "data/parquet_source.h"

namespace lmt {

namespace fs = std::filesystem;

namespace {

// Removes one trailing line end ("\n" or "\r\n").
std::string_view strip_line_end(std::string_view s) {
  if (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  if (!s.empty() && s.back() == '\r') s.remove_suffix(1);
  return s;
}

// Calls fn(line, start, next) for each line of text: the line without its line end, the offset
// where it starts and the offset of the next line.
template <class F>
void for_each_line(std::string_view text, F&& fn) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    size_t end = nl == std::string_view::npos ? text.size() : nl;
    size_t next = nl == std::string_view::npos ? text.size() : nl + 1;
    fn(strip_line_end(text.substr(pos, end - pos)), pos, next);
    pos = next;
  }
}

// A text file whose first bytes hold a NUL is binary.
constexpr size_t kBinaryProbeBytes = 8192;

// Line numbers of positions in a text, asked for in increasing order (each byte is counted once).
class LineCounter {
 public:
  explicit LineCounter(std::string_view text) : text_(text) {}
  int64_t line_of(const char* p) {
    const size_t to = static_cast<size_t>(p - text_.data());
    line_ += std::count(text_.begin() + static_cast<std::ptrdiff_t>(pos_),
                        text_.begin() + static_cast<std::ptrdiff_t>(to), '\n');
    pos_ = to;
    return line_;
  }

 private:
  std::string_view text_;
  size_t pos_ = 0;
  int64_t line_ = 1;
};

}  // namespace

std::vector<std::string> list_source_files(const std::string& path, const std::string& key,
                                           const std::vector<std::string>& exclude) {
  std::error_code ec;
  fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) throw UserError(key + ".path: '" + path + "' does not exist");
  if (fs::is_regular_file(st)) return {path};
  if (!fs::is_directory(st))
    throw UserError(key + ".path: '" + path + "' is neither a regular file nor a directory");
  std::vector<std::string> files;
  try {
    for (const auto& e : fs::recursive_directory_iterator(path))
      if (e.is_regular_file()) files.push_back(e.path().string());
  } catch (const fs::filesystem_error& err) {
    throw UserError(key + ".path: cannot list '" + path + "': " + err.code().message());
  }
  std::sort(files.begin(), files.end());
  std::vector<std::string> kept;
  std::set<std::string> seen;  // canonical paths already listed
  for (const std::string& f : files) {
    const std::string name = fs::path(f).filename().string();
    bool excluded = false;
    for (const std::string& pattern : exclude)
      excluded = excluded || ::fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
    if (excluded) continue;
    if (!seen.insert(fs::weakly_canonical(f, ec).string()).second) continue;
    kept.push_back(f);
  }
  if (kept.empty())
    throw UserError(key + ".path: directory '" + path + "' holds no files" +
                    (exclude.empty() ? "" : " that data.sources exclude patterns leave"));
  return kept;
}

void split_documents(std::string_view text, const std::string& split, const std::string& delimiter,
                     const std::string& key, const std::function<void(std::string_view)>& fn) {
  if (split == "file") {
    if (!text.empty()) fn(text);
  } else if (split == "line") {
    for_each_line(text, [&](std::string_view line, size_t, size_t) {
      if (!line.empty()) fn(line);
    });
  } else if (split == "delimiter") {
    size_t doc_start = 0;
    auto emit = [&](size_t end) {
      std::string_view doc = strip_line_end(text.substr(doc_start, end - doc_start));
      if (!doc.empty()) fn(doc);
    };
    for_each_line(text, [&](std::string_view line, size_t start, size_t next) {
      if (line != delimiter) return;
      emit(start);
      doc_start = next;
    });
    emit(text.size());
  } else {
    throw UserError(key + ".split: '" + split + "' is not a split mode (file, line or delimiter)");
  }
}

TextSourceStats for_each_document(const TextSourceSpec& spec, int index,
                                  const std::function<void(std::string_view)>& fn) {
  const std::string key = "data.sources[" + std::to_string(index) + "]";
  const bool jsonl = spec.format == "jsonl";
  const bool csv = spec.format == "csv" || spec.format == "tsv";
  const bool parquet = spec.format == "parquet";
  if (spec.format != "text" && !jsonl && !csv && !parquet)
    throw UserError(key + ".format: '" + spec.format +
                    "' is not supported yet (supported: text, jsonl, csv, tsv, parquet)");
  if (spec.on_error != "stop" && spec.on_error != "skip")
    throw UserError(key + ".on_error: '" + spec.on_error + "' must be stop or skip");
  if (spec.max_record_bytes < 1)
    throw UserError(key + ".max_record_bytes: must be at least 1 (got " +
                    std::to_string(spec.max_record_bytes) + ")");
  if (spec.format == "text" && spec.split != "file" && spec.split != "line" &&
      spec.split != "delimiter")
    throw UserError(key + ".split: '" + spec.split +
                    "' is not a split mode (file, line or delimiter)");
  TextSourceStats stats;
  for (const std::string& file : list_source_files(spec.path, key, spec.exclude)) {
    SkippedRecords* skipped = spec.on_error == "skip" ? &stats.skipped : nullptr;
    if (parquet) {  // read a page at a time by its own reader, not through the map
      ++stats.files;
      parquet_documents(file, spec.field, skipped, [&](std::string_view doc) {
        ++stats.documents;
        stats.bytes += static_cast<int64_t>(doc.size());
        fn(doc);
      });
      continue;
    }
    MappedFile mapped(file, key);
    std::string_view text = mapped.text();
    ++stats.files;
    auto take = [&](std::string_view doc) {
      mapped.check();  // the file truncated under the read: its zeros are not passed on
      ++stats.documents;
      stats.bytes += static_cast<int64_t>(doc.size());
      fn(doc);
    };
    // Hands the pages of records already passed to fn back to the kernel (bounded memory).
    size_t consumed = 0;
    auto take_and_release = [&](std::string_view doc) {
      take(doc);
      mapped.release_before(text.data() + consumed);
    };
    try {
      if (jsonl) {
        jsonl_documents(text, file, spec.field, skipped, take_and_release, &consumed,
                        spec.max_record_bytes);
      } else if (csv) {
        csv_documents(text, spec.format == "csv" ? ',' : '\t', file, spec.field, skipped,
                      take_and_release, &consumed, spec.max_record_bytes);
      } else {
        // Text must be text: a NUL byte near the start marks a binary file (git's rule), and a
        // document that is not valid UTF-8 is a bad record, as in the other formats.
        const std::string_view head = text.substr(0, kBinaryProbeBytes);
        if (const size_t nul = head.find('\0'); nul != std::string_view::npos) {
          report_bad_record(skipped, file, "binary file",
                            "a binary file (a NUL byte at offset " + std::to_string(nul) +
                                "); leave it out with " + key + ".exclude");
          continue;
        }
        LineCounter lines(text);
        split_documents(text, spec.split, spec.delimiter, key, [&](std::string_view doc) {
          consumed = static_cast<size_t>(doc.data() + doc.size() - text.data());
          if (simdjson::validate_utf8(doc.data(), doc.size())) {
            take_and_release(doc);
          } else {
            report_bad_record(skipped, file, lines.line_of(doc.data()), "invalid UTF-8",
                              "the document starting on this line is not valid UTF-8");
            mapped.release_before(text.data() + consumed);
          }
        });
      }
    } catch (const UserError&) {
      mapped.check();  // a record the truncation's zeros broke: the truncation is the error
      throw;
    }
    mapped.check();
  }
  return stats;
}

std::vector<std::string> read_documents(const TextSourceSpec& spec, int index,
                                        TextSourceStats* stats) {
  std::vector<std::string> docs;
  TextSourceStats s =
      for_each_document(spec, index, [&](std::string_view d) { docs.emplace_back(d); });
  if (stats) *stats = s;
  return docs;
}

}  // namespace lmt

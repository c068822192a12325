// Reads the documents of one plain-text data source. A source is a file or a directory; a
// directory contributes all regular files below it, recursively, in byte-wise path order, so the
// document order (and everything downstream: split, shuffle) is the same on every machine.
// Bytes are kept exactly as stored (no normalisation); only the line ends that separate documents
// are removed. Text must be UTF-8: a file with a NUL byte in its first 8 KiB is binary, and a
// document that is not valid UTF-8 is a bad record; both are errors naming the file (and line),
// or, under on_error: skip, counted ("binary file", "invalid UTF-8") and left out. src/data depends on src/core only, so a source is
// described by TextSourceSpec rather than train's SourceConfig (same field names).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "data/jsonl_source.h"

namespace lmt {

struct TextSourceSpec {
  std::string path;
  std::string format = "text";
  std::string split = "delimiter";  // file | line | delimiter
  std::string delimiter = "%";
  double weight = 1.0;
  std::vector<std::string> exclude;  // glob patterns on file names (fnmatch), e.g. "*.dat"
  std::string field = "text";        // jsonl: the field that holds the document
  std::string on_error = "stop";     // stop | skip (bad records are counted)
  // Schemas (data/schema.h): text | instruction | chat; instruction and chat go through a chat
  // template and count only the response in the loss unless loss = all.
  std::string schema = "text";
  std::string chat_template = "chatml";  // chatml | llama3 | gemma | plain | a custom template
  std::string loss = "assistant";        // assistant | all
  std::string messages_field = "messages";
  std::string instruction_field = "instruction";
  std::string input_field = "input";
  std::string output_field = "output";
  int64_t max_record_bytes = kMaxRecordBytes;  // jsonl: a longer line is a bad record
};

// Any config struct with the fields above (train's SourceConfig) converts with this.
template <class S>
TextSourceSpec to_text_source_spec(const S& s) {
  TextSourceSpec t{s.path,
                   s.format,
                   s.split,
                   s.delimiter,
                   s.weight,
                   s.exclude,
                   s.field,
                   s.on_error,
                   s.schema,
                   s.chat_template,
                   s.loss,
                   s.messages_field,
                   s.instruction_field,
                   s.input_field,
                   s.output_field};
  t.max_record_bytes = s.max_record_bytes;
  return t;
}

struct TextSourceStats {
  int64_t files = 0;
  int64_t documents = 0;
  int64_t bytes = 0;       // bytes of the documents (separators not counted)
  SkippedRecords skipped;  // bad records skipped under on_error: skip
};

// The files of a source: `path` itself, or every regular file below a directory, sorted, less
// those whose name matches an `exclude` pattern and less repeats of one file reached through
// symbolic links (the first path in sorted order is kept). `key` names the source in messages
// ("data.sources[0]"). Throws UserError when the path does not exist or no file is left.
std::vector<std::string> list_source_files(const std::string& path, const std::string& key,
                                           const std::vector<std::string>& exclude = {});

// Splits one file's text into documents:
//   file:      the whole text (if not empty);
//   line:      each non-empty line ("\n" or "\r\n" ends a line);
//   delimiter: documents separated by lines equal to `delimiter` (fortune files use "%"); the
//              line end just before a delimiter line (or the end of the text) is not part of the
//              document; empty documents are skipped.
// `key` names the source in messages; an unknown mode is a UserError naming <key>.split.
void split_documents(std::string_view text, const std::string& split, const std::string& delimiter,
                     const std::string& key, const std::function<void(std::string_view)>& fn);

// Reads every document of source number `index` in order and passes it to `fn`; returns counts.
// Throws UserError naming data.sources[index] for a missing path, an unreadable file, an unknown
// split mode or a format other than text.
TextSourceStats for_each_document(const TextSourceSpec& spec, int index,
                                  const std::function<void(std::string_view)>& fn);

// The same, collected (tests, small data).
std::vector<std::string> read_documents(const TextSourceSpec& spec, int index,
                                        TextSourceStats* stats = nullptr);

}  // namespace lmt

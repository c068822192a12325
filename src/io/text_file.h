// Writing a small text file (configs, state.json, a rewritten metrics.jsonl) so that it is never
// half-written: the one way lmtrain replaces a file that must survive a crash.
#pragma once

#include <string>

namespace lmt {

// Replaces the file's contents atomically: the text goes to a temporary file beside it, is
// flushed to disk and renamed over `path`, so a reader or a crash sees the old file or the whole
// new one. Throws UserError naming the path (and leaves no temporary file) on failure.
void write_text_file(const std::string& path, const std::string& text);

}  // namespace lmt

// Writing a small text file (configs, state.json) with one clear error when it fails.
#pragma once

#include <string>

namespace lmt {

// Replaces the file's contents; throws UserError naming the path on failure.
void write_text_file(const std::string& path, const std::string& text);

}  // namespace lmt

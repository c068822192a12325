// Small stores for the prepare and loader tests: documents written to text files (one document
// per line), prepared with the byte tokenizer.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/prepare.h"

namespace lmt::test {

namespace fs = std::filesystem;

// A fresh directory under /tmp, removed when the object goes.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag) {
    static int n = 0;
    path = fs::temp_directory_path() /
           ("lmt_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

inline std::string write_lines(const fs::path& file, const std::vector<std::string>& lines) {
  std::ofstream f(file, std::ios::binary);
  for (const auto& l : lines) f << l << "\n";
  return file.string();
}

// "document <i> of source <s>: <some words>" lines of varying length.
inline std::vector<std::string> numbered_docs(int n, int source = 0) {
  std::vector<std::string> d;
  for (int i = 0; i < n; ++i) {
    std::string s = "document " + std::to_string(i) + " of source " + std::to_string(source) + ":";
    for (int k = 0; k < (i * 7) % 13; ++k) s += " word" + std::to_string(k);
    d.push_back(s);
  }
  return d;
}

inline TextSourceSpec line_source(const std::string& path, double weight = 1.0) {
  TextSourceSpec s;
  s.path = path;
  s.split = "line";
  s.weight = weight;
  return s;
}

}  // namespace lmt::test

// Helpers shared by the io tests: a per-process temporary directory and file writing.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"

namespace lmt::test {

inline std::filesystem::path temp_dir() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("lmt_io_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline std::string write_text(const std::string& name, const std::string& text) {
  const std::string path = (temp_dir() / name).string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

inline std::string write_bytes(const std::string& name, const std::vector<uint8_t>& bytes) {
  const std::string path = (temp_dir() / name).string();
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  return path;
}

// Runs `f`, expects a UserError whose message contains every one of `parts`; returns the message.
template <class F>
std::string expect_user_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
  } catch (const UserError& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "message: " << msg << "\nmissing: " << p;
    return msg;
  }
  ADD_FAILURE() << "expected a UserError";
  return "";
}

}  // namespace lmt::test

// Helpers of the Hugging Face tests: fixture paths, a per-process temporary directory, and
// expecting a UserError that names what went wrong.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "core/error.h"

namespace lmt::test {

inline std::string hf_fixture(const std::string& family) {
  return std::string(LMT_TEST_DATA) + "/hf/" + family;
}

inline std::filesystem::path hf_temp_dir() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("lmt_hf_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

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

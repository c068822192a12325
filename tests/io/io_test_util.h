// Helpers shared by the io tests: a per-process temporary directory, file writing, expected user
// errors, and a full disk.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
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

// What `f` throws as a UserError while no file may grow past `limit` bytes (RLIMIT_FSIZE, with
// SIGXFSZ ignored so that a write past it fails with EFBIG instead of killing the process): its
// message, or "" when it throws none. The limit and the signal's handler are restored after.
template <class F>
std::string user_error_when_the_disk_is_full(rlim_t limit, F&& f) {
  struct rlimit old {};
  if (::getrlimit(RLIMIT_FSIZE, &old) != 0) {
    ADD_FAILURE() << "getrlimit";
    return "";
  }
  auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = limit;
  std::string msg;
  if (::setrlimit(RLIMIT_FSIZE, &small) != 0) {
    ADD_FAILURE() << "setrlimit";
  } else {
    try {
      f();
    } catch (const UserError& e) {
      msg = e.what();
    }
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, old_handler);
  return msg;
}

}  // namespace lmt::test

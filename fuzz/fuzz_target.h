// What every fuzz target is made of: one function over bytes (fuzz_targets.h lists them) that
// feeds them to a real entry point of lmtrain. It returns 0 when the input is accepted (and what
// it gave works) or refused with lmt::UserError; anything else (another exception, a failed
// expectation, a crash, a sanitizer report) is a finding. LMT_FUZZ_TARGET(fn) makes fn the
// libFuzzer entry point in the fuzz build (-DLMTRAIN_FUZZ=ON), and is nothing in the replay test
// (tests/fuzz), which calls every target on its committed corpus.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>

#include "core/error.h"

namespace lmt::fuzz {

// A directory made once per process (mkdtemp) for the inputs an API reads from a path; removed
// when the process exits normally.
inline const std::string& temp_dir() {
  struct Dir {
    std::string path;
    Dir() {
      // Memory-backed where there is /dev/shm: ext4 flushes a file truncated and rewritten at
      // close (auto_da_alloc), which made every input cost milliseconds.
      const std::filesystem::path base = std::filesystem::is_directory("/dev/shm")
                                             ? std::filesystem::path("/dev/shm")
                                             : std::filesystem::temp_directory_path();
      std::string tmpl = (base / "lmt-fuzz-XXXXXX").string();
      if (!mkdtemp(tmpl.data())) throw std::runtime_error("fuzz: mkdtemp failed");
      path = tmpl;
    }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Dir dir;
  return dir.path;
}

// Writes the input to temp_dir()/name, replacing what was there, and returns its path.
inline std::string write_temp(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = temp_dir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) throw std::runtime_error("fuzz: cannot write " + path);
  return path;
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A property of an accepted input that must hold: its failure is a finding, reported as an
// exception other than UserError.
struct Finding : std::logic_error {
  using std::logic_error::logic_error;
};
inline void expect(bool cond, const std::string& what) {
  if (!cond) throw Finding("fuzz: expected " + what);
}

// Runs fn(); a UserError is one of the two accepted outcomes.
template <class F>
int accept_user_error(F&& fn) {
  try {
    fn();
  } catch (const UserError&) {
  }
  return 0;
}

}  // namespace lmt::fuzz

#ifdef LMT_LIBFUZZER
#define LMT_FUZZ_TARGET(fn)                                                 \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { \
    return ::lmt::fuzz::fn(data, size);                                     \
  }
#else
#define LMT_FUZZ_TARGET(fn)
#endif

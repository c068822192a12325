// Pieces every test area may share: the message of a UserError, an environment variable set for
// one scope, and the checksums of a directory a test edited on purpose.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/error.h"
#include "io/dir_checksums.h"

namespace lmt::test {

// The message of the UserError that `fn` throws ("" and a test failure if it throws none).
template <class Fn>
std::string user_error_of(Fn&& fn) {
  try {
    fn();
  } catch (const UserError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no UserError was thrown";
  return "";
}

// Sets (or, for nullptr, unsets) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    value ? setenv(name, value, 1) : unsetenv(name);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() { old_ ? setenv(name_, old_->c_str(), 1) : unsetenv(name_); }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// Records checksums.json anew for a directory whose files a test changed on purpose (as if lmtrain
// had written them so): what reads the files is then tested, not the checksum that guards them.
// A metrics.jsonl line less what differs from run to run of the same computation: the wall-clock
// fields and the process's and device's memory.
inline nlohmann::json without_run_dependent_metrics(nlohmann::json j) {
  for (const char* k : {"tokens_per_s", "step_ms", "mfu", "rss_bytes", "rss_peak_bytes",
                        "device_bytes_in_use", "device_peak_bytes"})
    j.erase(k);
  return j;
}

inline void reseal_checksums(const std::filesystem::path& dir) {
  std::filesystem::remove(dir / kChecksumsFile);
  ChecksumRecorder checksums(dir.string());
  for (const auto& e : std::filesystem::directory_iterator(dir))
    checksums.add(e.path().filename().string());
  checksums.write();
}

}  // namespace lmt::test

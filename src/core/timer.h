// Wall-clock timing and resident-memory readings for progress lines and benchmarks.
#pragma once

#include <chrono>
#include <cstdint>

namespace lmt {

class Timer {
 public:
  Timer() : start_(std::chrono::steady_clock::now()) {}
  void reset() { start_ = std::chrono::steady_clock::now(); }
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  double ms() const { return seconds() * 1e3; }

 private:
  std::chrono::steady_clock::time_point start_;
};

// Peak resident set size of this process in bytes (VmHWM), 0 if unknown.
int64_t peak_rss_bytes();

// This process's resident set now (VmRSS) and its peak so far (VmHWM), in bytes; 0 where
// /proc/self/status does not say (not Linux).
struct ProcessMemory {
  int64_t rss_bytes = 0;
  int64_t peak_rss_bytes = 0;
};
ProcessMemory process_memory();

}  // namespace lmt

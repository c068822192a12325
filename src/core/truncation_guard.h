// A file lmtrain has memory-mapped can be truncated under it by another program (a store being
// prepared again, a disk quota, a user's mistake); touching a page past the new end raises SIGBUS,
// which ends the process with "Bus error" and no word of which file. A mapping registered here has
// such pages replaced by zero pages instead (from a SIGBUS handler, installed once, that handles
// only faults inside registered mappings: any other SIGBUS ends the process as before), and is
// marked truncated. The reader calls check() after it copied from the mapping: the copy may hold
// those zeros, and check() turns them into a UserError naming the file before they are used.
#pragma once

#include <cstddef>
#include <string>

namespace lmt {

class TruncationGuard {
 public:
  TruncationGuard() = default;
  // Registers [base, base + size); `path` names the file in messages. Up to 1024 mappings are
  // guarded at once (more are read unguarded, as before).
  void watch(const void* base, size_t size, std::string path);
  ~TruncationGuard();
  TruncationGuard(const TruncationGuard&) = delete;
  TruncationGuard& operator=(const TruncationGuard&) = delete;

  bool truncated() const;
  // UserError naming the file when it was truncated while mapped.
  void check() const;

 private:
  int slot_ = -1;
  std::string path_;
};

}  // namespace lmt

// One training process per run directory. Two `lmtrain train` processes on one out_dir would
// delete each other's temporary checkpoint directories and interleave metrics.jsonl, and both
// could exit 0. RunDirLock holds an exclusive flock on <out_dir>/.lock for the life of a run; the
// kernel drops it when the process ends however it ends (kill -9 included), so a crashed run never
// leaves a stale lock behind. The file holds the owner's pid, for the message.
#pragma once

#include <string>

namespace lmt {

class RunDirLock {
 public:
  // Throws UserError naming the directory (and the owner's pid) when another process holds it.
  explicit RunDirLock(const std::string& run_dir);
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace lmt

// One writer per output. Two `lmtrain train` processes on one out_dir would delete each other's
// temporary checkpoint directories and interleave metrics.jsonl; two `prepare`s or `export`s into
// one place would each exit 0 while one result silently replaced the other. An OutputLock holds an
// exclusive flock on a lock file for the life of the writer; the kernel drops it when the process
// ends however it ends (kill -9 included), so a crash never leaves a stale lock behind. The file
// holds the owner's pid, for the message. Holding the lock also makes whatever a dead writer of
// the same output left (temporary directories) safe to remove.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

namespace lmt {

class OutputLock {
 public:
  // Locks `lock_file` for the output `output`, which `what` names in messages (a flag or config
  // key). Throws UserError naming the output (and the owner's pid) when another process holds it.
  // remove_when_done: the lock file is deleted on release (a lock file beside the output, rather
  // than inside it).
  OutputLock(const std::string& lock_file, const std::string& what, const std::string& output,
             bool remove_when_done);
  ~OutputLock();
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;

  // UserError when the lock file is no longer the one locked (its directory was deleted or
  // replaced under the writer: another process may write there now, and what was written is gone).
  void check_held() const;

 private:
  std::string path_, what_, output_;
  bool remove_ = false;
  int fd_ = -1;
};

// The lock of a run directory: <out_dir>/.lock, named train.out_dir. In a run across processes
// each rank holds its own (<out_dir>/.lock.rank<r> for r > 0), so that a second run started on
// the same directory stops on every rank, however its processes are spread over hosts.
class RunDirLock : public OutputLock {
 public:
  explicit RunDirLock(const std::string& run_dir, int rank = 0)
      : OutputLock(run_dir + "/.lock" + (rank > 0 ? ".rank" + std::to_string(rank) : ""),
                   "train.out_dir", run_dir, false) {}
};

// The lock of an output that is written elsewhere and renamed into place (a token store, an
// exported directory or file): .<name>.lock beside it, removed when done.
OutputLock lock_output_path(const std::string& output, const std::string& what);

// What killed writers of `output` left beside it: OUTPUT.tmp-PID (being built) and OUTPUT.old-PID
// (being replaced) of processes that no longer run (a live PID's stay). Call it holding the
// output's lock. A kill between the two renames of a swap leaves the previous output only as
// OUTPUT.old-PID: when `restorable` says it is whole, it is put back (when nothing is at OUTPUT).
void remove_dead_writers_leftovers(
    const std::filesystem::path& output,
    const std::function<bool(const std::filesystem::path&)>& restorable = nullptr);

}  // namespace lmt

#include "train/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "core/error.h"

namespace lmt {

RunDirLock::RunDirLock(const std::string& run_dir) {
  const std::string path = run_dir + "/.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw UserError("train.out_dir: cannot create '" + path + "': " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char buf[32] = {};
    const ssize_t n = ::pread(fd_, buf, sizeof(buf) - 1, 0);
    ::close(fd_);
    fd_ = -1;
    if (err != EWOULDBLOCK)
      throw UserError("train.out_dir: cannot lock '" + path + "': " + std::strerror(err));
    std::string owner = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
    while (!owner.empty() && (owner.back() == '\n' || owner.back() == ' ')) owner.pop_back();
    throw UserError("train.out_dir: '" + run_dir + "' is in use by another lmtrain process" +
                    (owner.empty() ? "" : " (pid " + owner + ")") +
                    "; two runs in one directory would overwrite each other's checkpoints and "
                    "metrics: wait for it, stop it, or choose another train.out_dir");
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) < 0) {
    // The lock is held; only the pid shown to a second process is missing.
  }
}

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

}  // namespace lmt

#include "core/output_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"

namespace lmt {

namespace {

bool same_file(int fd, const std::string& path) {
  struct stat a {
  }, b{};
  return ::fstat(fd, &a) == 0 && ::stat(path.c_str(), &b) == 0 && a.st_dev == b.st_dev &&
         a.st_ino == b.st_ino;
}

}  // namespace

OutputLock::OutputLock(const std::string& lock_file, const std::string& what,
                       const std::string& output, bool remove_when_done)
    : path_(lock_file), what_(what), output_(output), remove_(remove_when_done) {
  for (;;) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0)
      throw UserError(what_ + ": cannot create '" + path_ + "': " + std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      char buf[32] = {};
      const ssize_t n = ::pread(fd_, buf, sizeof(buf) - 1, 0);
      ::close(fd_);
      fd_ = -1;
      if (err != EWOULDBLOCK)
        throw UserError(what_ + ": cannot lock '" + path_ + "': " + std::strerror(err));
      std::string owner = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
      while (!owner.empty() && (owner.back() == '\n' || owner.back() == ' ')) owner.pop_back();
      throw UserError(what_ + ": '" + output_ + "' is in use by another lmtrain process" +
                      (owner.empty() ? "" : " (pid " + owner + ")") +
                      "; two writers would overwrite each other's work: wait for it, stop it, "
                      "or choose another " +
                      what_);
    }
    // A holder that removed the file as it finished may have done so after this open: the lock
    // is then on a file no one else can see, so take the new one.
    if (same_file(fd_, path_)) break;
    ::close(fd_);
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) < 0) {
    // The lock is held; only the pid shown to a second process is missing.
  }
}

OutputLock::~OutputLock() {
  if (fd_ < 0) return;
  if (remove_ && same_file(fd_, path_)) ::unlink(path_.c_str());
  ::close(fd_);  // releases the flock
}

void OutputLock::check_held() const {
  if (!same_file(fd_, path_))
    throw UserError(what_ + ": '" + output_ +
                    "' was deleted or replaced while this process was writing to it (its lock "
                    "file '" +
                    path_ +
                    "' is gone): what was written there is lost, and another "
                    "process may write there now; stopping");
}

OutputLock lock_output_path(const std::string& output, const std::string& what) {
  const std::filesystem::path p = std::filesystem::path(output).lexically_normal();
  const std::filesystem::path name = p.has_filename() ? p.filename() : p.parent_path().filename();
  const std::filesystem::path parent =
      p.has_filename() ? p.parent_path() : p.parent_path().parent_path();
  const std::filesystem::path dir = parent.empty() ? "." : parent;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  return OutputLock((dir / ("." + name.string() + ".lock")).string(), what, output, true);
}

void remove_dead_writers_leftovers(
    const std::filesystem::path& output,
    const std::function<bool(const std::filesystem::path&)>& restorable) {
  namespace fs = std::filesystem;
  const fs::path final_path = output.lexically_normal();
  const fs::path parent = final_path.parent_path().empty() ? "." : final_path.parent_path();
  const std::string name = final_path.filename().string();
  std::error_code ec;
  if (name.empty() || !fs::is_directory(parent, ec)) return;
  std::vector<fs::path> stale;
  for (const auto& e : fs::directory_iterator(parent, ec)) {
    const std::string f = e.path().filename().string();
    for (const char* kind : {".tmp-", ".old-"}) {
      const std::string prefix = name + kind;
      if (f.size() <= prefix.size() || f.compare(0, prefix.size(), prefix) != 0) continue;
      const std::string pid = f.substr(prefix.size());
      if (pid.find_first_not_of("0123456789") != std::string::npos || pid.size() > 9) continue;
      const pid_t p = static_cast<pid_t>(std::stol(pid));
      if (p == ::getpid() || ::kill(p, 0) == 0 || errno == EPERM) continue;  // alive
      stale.push_back(e.path());
    }
  }
  for (const fs::path& d : stale)
    if (restorable && d.string().find(".old-") != std::string::npos &&
        !fs::exists(final_path, ec) && restorable(d))
      fs::rename(d, final_path, ec);
  for (const fs::path& d : stale) fs::remove_all(d, ec);
}

}  // namespace lmt

#include "core/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace lmt {

namespace {

std::string kind_of(mode_t m) {
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

}  // namespace

int open_regular_file(const std::string& path, const std::string& what, uint64_t max_bytes,
                      uint64_t* size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    throw UserError(what + ": cannot read '" + path +
                    "': " + (e == ELOOP ? std::string("a symbolic link loop") : std::strerror(e)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw UserError(what + ": cannot read '" + path + "': " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw UserError(what + ": '" + path + "' is " + kind_of(st.st_mode) +
                    ", not a regular file (lmtrain reads only regular files)");
  }
  const auto n = static_cast<uint64_t>(st.st_size);
  if (max_bytes > 0 && n > max_bytes) {
    ::close(fd);
    throw UserError(what + ": '" + path + "' has " + std::to_string(n) + " bytes, more than the " +
                    std::to_string(max_bytes >> 20) + " MiB a file of its kind may have");
  }
  // Reads block again (a regular file never blocks; the flag only kept open() from waiting).
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  if (size) *size = n;
  return fd;
}

std::string read_regular_file(const std::string& path, const std::string& what,
                              uint64_t max_bytes) {
  uint64_t n = 0;
  const int fd = open_regular_file(path, what, max_bytes, &n);
  std::string out;
  out.resize(static_cast<size_t>(n));
  size_t got = 0;
  while (true) {
    if (got == out.size()) out.resize(out.size() + 4096);  // the file may have grown
    const ssize_t r = ::read(fd, out.data() + got, out.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int e = errno;
      ::close(fd);
      throw UserError(what + ": cannot read '" + path + "': " + std::strerror(e));
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
    if (max_bytes > 0 && got > max_bytes) {
      ::close(fd);
      throw UserError(what + ": '" + path + "' grew past the " + std::to_string(max_bytes >> 20) +
                      " MiB a file of its kind may have");
    }
  }
  ::close(fd);
  out.resize(got);
  return out;
}

uint64_t check_regular_file(const std::string& path, const std::string& what, uint64_t max_bytes) {
  uint64_t n = 0;
  ::close(open_regular_file(path, what, max_bytes, &n));
  return n;
}

}  // namespace lmt

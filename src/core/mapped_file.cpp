#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace lmt {

namespace {
constexpr size_t kReleaseStep = size_t{8} << 20;  // hand pages back in 8 MiB steps
}

MappedFile::MappedFile(const std::string& path, const std::string& key) {
  // Non-blocking: a FIFO is refused below instead of blocking open().
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw UserError(key + ": cannot read '" + path + "': " + std::strerror(errno));
  struct stat st{};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    int e = errno;
    ::close(fd);
    throw UserError(key + ": cannot read '" + path + "': " +
                    (S_ISREG(st.st_mode) ? std::strerror(e) : "not a regular file"));
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      throw UserError(key + ": cannot map '" + path + "': " + std::strerror(e));
    }
    ::madvise(p, size_, MADV_SEQUENTIAL);
    data_ = static_cast<const char*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<char*>(data_), size_);
}

void MappedFile::release_before(const char* p) {
  if (!data_ || p < data_) return;
  size_t upto = std::min(static_cast<size_t>(p - data_), size_);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  upto -= upto % page;
  if (upto < released_ + kReleaseStep) return;
  ::madvise(const_cast<char*>(data_) + released_, upto - released_, MADV_DONTNEED);
  released_ = upto;
}

}  // namespace lmt

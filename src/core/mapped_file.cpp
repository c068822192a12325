#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/regular_file.h"

namespace lmt {

namespace {
constexpr size_t kReleaseStep = size_t{4} << 20;  // hand pages back in 4 MiB steps
}

MappedFile::MappedFile(const std::string& path, const std::string& key) {
  uint64_t size = 0;
  const int fd =
      open_regular_file(path, key, kNoSizeLimit, &size);  // a FIFO: refused, not waited on
  size_ = static_cast<size_t>(size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      throw UserError(key + ": cannot map '" + path + "': " + std::strerror(e));
    }
    ::madvise(p, size_, MADV_SEQUENTIAL);
    data_ = static_cast<const char*>(p);
    guard_.watch(data_, size_, path);
  }
  ::close(fd);
  path_ = path;
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
  // Test hook: with LMT_TEST_TRUNCATE_INPUT=PATH, the first release of PATH's pages truncates the
  // file to what was read so far: a truncation in the middle of a read.
  static const char* const target = std::getenv("LMT_TEST_TRUNCATE_INPUT");
  if (target && path_ == target && !truncated_for_test_) {
    truncated_for_test_ = true;
    if (::truncate(path_.c_str(), static_cast<off_t>(upto)) != 0)
      throw UserError("test hook: cannot truncate '" + path_ + "': " + std::strerror(errno));
  }
}

}  // namespace lmt

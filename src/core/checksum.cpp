#include "core/checksum.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <unistd.h>
#include <xxh_x86dispatch.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/regular_file.h"

namespace lmt {

namespace {

std::string format(XXH128_hash_t h) {
  return fmt::format("xxh3_128:{:016x}{:016x}", h.high64, h.low64);
}

}  // namespace

struct StreamHash::State {
  XXH3_state_t* s = XXH3_createState();
  ~State() { XXH3_freeState(s); }
};

StreamHash::StreamHash() : state_(std::make_unique<State>()) {
  LMT_CHECK(state_->s != nullptr, "XXH3_createState");
  XXH3_128bits_reset(state_->s);
}

StreamHash::~StreamHash() = default;

void StreamHash::update(const void* data, size_t n) {
  if (n > 0) XXH3_128bits_update_dispatch(state_->s, data, n);
}

std::string StreamHash::digest() const {
  return format(XXH3_128bits_digest(state_->s));
}

std::string checksum_bytes(const void* data, size_t n) {
  return format(XXH3_128bits_dispatch(data, n));
}

std::string checksum_file(const std::string& path, const std::string& what, uint64_t* bytes) {
  uint64_t size = 0;
  const int fd = open_regular_file(path, what, kNoSizeLimit, &size);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  StreamHash h;
  std::vector<char> block(size_t{1} << 20);
  uint64_t total = 0;
  for (;;) {
    const ssize_t n = ::read(fd, block.data(), block.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      throw UserError(what + ": cannot read '" + path + "': " + why);
    }
    if (n == 0) break;
    h.update(block.data(), static_cast<size_t>(n));
    total += static_cast<uint64_t>(n);
  }
  ::close(fd);
  if (bytes) *bytes = total;
  return h.digest();
}

}  // namespace lmt

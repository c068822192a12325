#include "core/host_memory.h"

#include <fmt/format.h>
#include <unistd.h>

#include <limits>

namespace lmt {

uint64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return 0;
  uint64_t r;
  if (__builtin_mul_overflow(static_cast<uint64_t>(pages), static_cast<uint64_t>(page), &r))
    return std::numeric_limits<uint64_t>::max();
  return r;
}

std::string gib_text(uint64_t b) {
  if (b == std::numeric_limits<uint64_t>::max()) return "more than 16 EiB";
  return fmt::format("{:.1f} GiB", static_cast<double>(b) / (1024.0 * 1024.0 * 1024.0));
}

}  // namespace lmt

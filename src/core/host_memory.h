// The host's physical memory, the bound lmtrain checks sizes against before allocating: a model
// or a training step larger than the whole machine is one message naming both sizes, not a
// std::bad_alloc (or the OOM killer) after minutes of work.
#pragma once

#include <cstdint>
#include <string>

namespace lmt {

// The machine's physical memory in bytes (sysconf), 0 where unknown.
uint64_t physical_memory_bytes();

// "12.3 GiB", or "more than 16 EiB" for UINT64_MAX (a size that overflowed).
std::string gib_text(uint64_t bytes);

}  // namespace lmt

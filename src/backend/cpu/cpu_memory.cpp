// Host memory for the CPU backend: 64-byte aligned, zero-filled.
#include <cstdlib>
#include <cstring>
#include <new>

#include "backend/cpu/cpu_backend.h"

namespace lmt {

void* CpuBackend::alloc(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded ? rounded : 64);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  return p;
}
void CpuBackend::free(void* p) {
  std::free(p);
}
void CpuBackend::to_host(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}
void CpuBackend::from_host(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}
void CpuBackend::copy(void* dst, const void* src, size_t bytes) {
  std::memmove(dst, src, bytes);
}
void CpuBackend::zero(void* p, size_t bytes) {
  std::memset(p, 0, bytes);
}

}  // namespace lmt

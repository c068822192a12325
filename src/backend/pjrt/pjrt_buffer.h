// One array on a PJRT device (a PJRT_Buffer), owned: destroying the object frees the device
// memory. Buffers stay on the device between program runs; an output of one run can be the
// input of the next, so a training step never copies its parameters through the host.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "core/dtype.h"

struct PJRT_Buffer;

namespace lmt {

struct PjrtSession;

class PjrtBuffer {
 public:
  PjrtBuffer() = default;
  PjrtBuffer(const PjrtBuffer&) = delete;
  PjrtBuffer& operator=(const PjrtBuffer&) = delete;
  PjrtBuffer(PjrtBuffer&& o) noexcept { take(o); }
  PjrtBuffer& operator=(PjrtBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      take(o);
    }
    return *this;
  }
  ~PjrtBuffer() { reset(); }

  // False for a default-constructed buffer, a moved-from one, or one donated to a program.
  bool valid() const { return buffer_ != nullptr; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& dims() const { return dims_; }  // row-major, outermost first
  int64_t element_count() const {
    int64_t n = 1;
    for (int64_t d : dims_) n *= d;
    return n;
  }
  size_t byte_size() const { return static_cast<size_t>(element_count()) * dtype_size(dtype_); }

  // Copies the array to `dst` (byte_size() bytes, dense row-major) and waits for the copy.
  void to_host(void* dst, size_t bytes) const;
  template <class T>
  std::vector<T> to_host() const {
    std::vector<T> out(static_cast<size_t>(element_count()));
    to_host(out.data(), out.size() * sizeof(T));
    return out;
  }

  PJRT_Buffer* raw() const { return buffer_; }

 private:
  friend class PjrtClient;
  friend class PjrtExecutable;
  PjrtBuffer(std::shared_ptr<PjrtSession> session, PJRT_Buffer* buffer, DType dtype,
             std::vector<int64_t> dims)
      : session_(std::move(session)), buffer_(buffer), dtype_(dtype), dims_(std::move(dims)) {}
  void take(PjrtBuffer& o) noexcept {
    session_ = std::move(o.session_);
    buffer_ = std::exchange(o.buffer_, nullptr);
    dtype_ = o.dtype_;
    dims_ = std::move(o.dims_);
  }
  void reset() noexcept;  // frees the device buffer; the object becomes invalid

  std::shared_ptr<PjrtSession> session_;  // keeps the client alive while the buffer lives
  PJRT_Buffer* buffer_ = nullptr;
  DType dtype_ = DType::f32;
  std::vector<int64_t> dims_;
};

}  // namespace lmt

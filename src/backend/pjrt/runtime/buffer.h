// One array on the client's devices, owned: destroying the object frees the device memory. On one
// device it is one PJRT_Buffer; over a mesh of devices it is one PJRT_Buffer a device, each that
// device's piece of the array as its sharding says (the whole array where it is replicated).
// Buffers stay on the devices between program runs; an output of one run can be the input of the
// next, so a training step never copies its parameters through the host.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "backend/mesh.h"
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
  bool valid() const { return !shards_.empty(); }
  DType dtype() const { return dtype_; }
  // The whole array's dims (row-major, outermost first), and how it is split over the mesh.
  const std::vector<int64_t>& dims() const { return dims_; }
  const TensorSharding& sharding() const { return sharding_; }
  int64_t element_count() const {
    int64_t n = 1;
    for (int64_t d : dims_) n *= d;
    return n;
  }
  size_t byte_size() const { return static_cast<size_t>(element_count()) * dtype_size(dtype_); }

  // Copies the whole array to `dst` (byte_size() bytes, dense row-major), gathered from its
  // pieces, and waits for the copies.
  void to_host(void* dst, size_t bytes) const;
  template <class T>
  std::vector<T> to_host() const {
    std::vector<T> out(static_cast<size_t>(element_count()));
    to_host(out.data(), out.size() * sizeof(T));
    return out;
  }

  // The piece on the mesh's device i (0: the only one on one device).
  PJRT_Buffer* raw(size_t device = 0) const { return shards_.at(device); }
  size_t device_count() const { return shards_.size(); }

 private:
  friend class PjrtClient;
  friend class PjrtExecutable;
  PjrtBuffer(std::shared_ptr<PjrtSession> session, std::vector<PJRT_Buffer*> shards, DType dtype,
             std::vector<int64_t> dims, TensorSharding sharding = {})
      : session_(std::move(session)),
        shards_(std::move(shards)),
        dtype_(dtype),
        dims_(std::move(dims)),
        sharding_(std::move(sharding)) {}
  void take(PjrtBuffer& o) noexcept {
    session_ = std::move(o.session_);
    shards_ = std::exchange(o.shards_, {});
    dtype_ = o.dtype_;
    dims_ = std::move(o.dims_);
    sharding_ = std::move(o.sharding_);
  }
  void reset() noexcept;  // frees the device buffers; the object becomes invalid

  std::shared_ptr<PjrtSession> session_;  // keeps the client alive while the buffer lives
  std::vector<PJRT_Buffer*> shards_;      // one a device of the mesh; empty: invalid
  DType dtype_ = DType::f32;
  std::vector<int64_t> dims_;
  TensorSharding sharding_;  // empty: whole on every device
};

}  // namespace lmt

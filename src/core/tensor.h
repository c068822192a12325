// Shape and Tensor. A Tensor is a non-owning view (pointer, dtype, shape): kernels and model code
// pass views; memory is owned elsewhere (a backend Buffer, an arena, a HostTensor).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace lmt {

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t operator[](int i) const { return dims_[i < 0 ? i + rank() : i]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : dims_) n *= d;
    return n;
  }
  const std::vector<int64_t>& dims() const { return dims_; }
  bool operator==(const Shape& o) const { return dims_ == o.dims_; }
  bool operator!=(const Shape& o) const { return dims_ != o.dims_; }
  std::string str() const;  // "[2, 3]"

 private:
  std::vector<int64_t> dims_;
};

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::f32;
  Shape shape;

  int64_t numel() const { return shape.numel(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  template <class T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
};

// A tensor that owns host memory: used for loading and saving files, fixtures and tests.
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, Shape shape)
      : dtype_(dtype), shape_(std::move(shape)), bytes_(shape_.numel() * dtype_size(dtype)) {}

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return bytes_.size(); }
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  template <class T>
  T* ptr() {
    return reinterpret_cast<T*>(bytes_.data());
  }
  template <class T>
  const T* ptr() const {
    return reinterpret_cast<const T*>(bytes_.data());
  }
  Tensor view() { return Tensor{bytes_.data(), dtype_, shape_}; }
  // Converts any floating dtype to f32 or f64 (a new tensor).
  HostTensor to(DType target) const;

 private:
  DType dtype_ = DType::f32;
  Shape shape_;
  std::vector<unsigned char> bytes_;
};

}  // namespace lmt

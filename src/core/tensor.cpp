#include "core/tensor.h"

#include <cstring>

#include "core/error.h"

namespace lmt {

std::string Shape::str() const {
  std::string s = "[";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(dims_[i]);
  }
  return s + "]";
}


HostTensor HostTensor::to(DType target) const {
  HostTensor out(target, shape_);
  if (target == dtype_) {
    std::memcpy(out.data(), data(), nbytes());
    return out;
  }
  const int64_t n = numel();
  for (int64_t i = 0; i < n; ++i)
    store_element(target, out.data(), i, load_element(dtype_, data(), i));
  return out;
}

}  // namespace lmt

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

namespace {
double load_as_double(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::f64: return static_cast<const double*>(p)[i];
    case DType::bf16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::f16: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::i32: return static_cast<const int32_t*>(p)[i];
    case DType::u16: return static_cast<const uint16_t*>(p)[i];
    case DType::u8: return static_cast<const uint8_t*>(p)[i];
  }
  return 0;
}
void store_from_double(void* p, DType t, int64_t i, double v) {
  switch (t) {
    case DType::f32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DType::f64: static_cast<double*>(p)[i] = v; break;
    case DType::bf16: static_cast<uint16_t*>(p)[i] = f32_to_bf16(static_cast<float>(v)); break;
    case DType::f16: static_cast<uint16_t*>(p)[i] = f32_to_f16(static_cast<float>(v)); break;
    case DType::i32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DType::u16: static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(v); break;
    case DType::u8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
  }
}
}  // namespace

HostTensor HostTensor::to(DType target) const {
  HostTensor out(target, shape_);
  if (target == dtype_) {
    std::memcpy(out.data(), data(), nbytes());
    return out;
  }
  const int64_t n = numel();
  for (int64_t i = 0; i < n; ++i) store_from_double(out.data(), target, i, load_as_double(data(), dtype_, i));
  return out;
}

}  // namespace lmt

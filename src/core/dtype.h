// Element types a tensor can hold. The dtype is a runtime property of a tensor: one model graph
// serves every precision (f64 for gradient checks, f32 on the CPU, bf16 on accelerators).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace lmt {

enum class DType : uint8_t { f32, f64, bf16, f16, i32, u16, u8 };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);
// Parses "f32", "float32", "bf16", ... ; throws UserError naming `what` otherwise.
DType parse_dtype(std::string_view s, std::string_view what = "dtype");

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::f64;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::i32;
}
template <>
constexpr DType dtype_of<uint16_t>() {
  return DType::u16;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return DType::u8;
}

// Element i of a buffer of dtype t, as double (bf16 and f16 widen exactly); and the store back,
// rounding to t (f64 -> bf16/f16 rounds through float).
double load_element(DType t, const void* p, int64_t i);
void store_element(DType t, void* p, int64_t i, double v);

// bf16 <-> f32 with round-to-nearest-even (NaN kept quiet).
uint16_t f32_to_bf16(float f);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
float f16_to_f32(uint16_t h);

}  // namespace lmt

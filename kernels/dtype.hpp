#pragma once
// Element types. float32 is the training type; float64 exists so that every layer
// and loss can be gradient-checked in double precision; bf16 is for storage and operands (no layer computes in it);
// i32 holds labels and indices (never a dtype a layer computes in).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace codistill::kernels {

enum class DType : std::uint8_t { f32, f64, bf16, i32 };

inline std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::bf16: return 2;
    case DType::i32: return 4;
  }
  throw std::logic_error("dtype_size: bad dtype");
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::bf16: return "bfloat16";
    case DType::i32: return "int32";
  }
  return "?";
}

// float32 -> bfloat16 bits (the upper 16 bits of a float32): round to nearest, ties to even,
// on the bit pattern, so subnormals round as subnormals, values past the largest bf16 become
// infinities and a NaN stays a NaN (quieted, sign kept); and back, exactly. Shared by the
// CPU backend's mixed precision (kernels/cpu/bf16.hpp) and the checkpoints' bf16 storage.
inline std::uint16_t bf16_round(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // NaN: quiet
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}
inline float bf16_to_float(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<std::int32_t>() { return DType::i32; }

// Calls fn.template operator()<T>() with T = float or double for the tensor's dtype:
//   dispatch_floating(t.dtype(), [&]<class T>() { kernel<T>(t.data<T>(), ...); });
template <class Fn>
decltype(auto) dispatch_floating(DType t, Fn&& fn) {
  switch (t) {
    case DType::f32: return fn.template operator()<float>();
    case DType::f64: return fn.template operator()<double>();
    default: break;
  }
  throw std::invalid_argument(std::string("operation not supported for dtype ") + dtype_name(t) +
                              " (valid: float32, float64)");
}

}  // namespace codistill::kernels

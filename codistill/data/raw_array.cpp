#include "codistill/data/raw_array.hpp"

#include <bit>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace codistill::data {

const char* dtype_name(ArrayDtype t) {
  switch (t) {
    case ArrayDtype::u8: return "uint8";
    case ArrayDtype::i8: return "int8";
    case ArrayDtype::u16: return "uint16";
    case ArrayDtype::i16: return "int16";
    case ArrayDtype::u32: return "uint32";
    case ArrayDtype::i32: return "int32";
    case ArrayDtype::u64: return "uint64";
    case ArrayDtype::i64: return "int64";
    case ArrayDtype::f16: return "float16";
    case ArrayDtype::bf16: return "bfloat16";
    case ArrayDtype::f32: return "float32";
    case ArrayDtype::f64: return "float64";
  }
  return "?";
}

std::int64_t dtype_bytes(ArrayDtype t) {
  switch (t) {
    case ArrayDtype::u8:
    case ArrayDtype::i8: return 1;
    case ArrayDtype::u16:
    case ArrayDtype::i16:
    case ArrayDtype::f16:
    case ArrayDtype::bf16: return 2;
    case ArrayDtype::u32:
    case ArrayDtype::i32:
    case ArrayDtype::f32: return 4;
    case ArrayDtype::u64:
    case ArrayDtype::i64:
    case ArrayDtype::f64: return 8;
  }
  return 0;
}

bool is_integer(ArrayDtype t) {
  return t != ArrayDtype::f16 && t != ArrayDtype::bf16 && t != ArrayDtype::f32 && t != ArrayDtype::f64;
}

std::int64_t checked_numel(const std::vector<std::int64_t>& shape, std::int64_t elem_bytes) {
  std::int64_t n = 1;
  const std::int64_t limit = std::numeric_limits<std::int64_t>::max() / (elem_bytes > 0 ? elem_bytes : 1);
  for (std::int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > limit / d) return -1;
    n *= d;
  }
  return n;
}

std::int64_t RawArray::numel() const { return checked_numel(shape, 1); }

std::string RawArray::shape_str() const {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

namespace {

template <class T>
T load(const std::uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);  // the file's bytes need not be aligned
  return v;
}

// IEEE binary16 to binary32, exactly (every half is a float).
float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));  // inf, nan
  if (exp == 0) {
    if (mant == 0) return std::bit_cast<float>(sign);
    // Subnormal: normalize the mantissa.
    int shift = 0;
    while (!(mant & 0x400u)) {
      mant <<= 1;
      ++shift;
    }
    mant &= 0x3ffu;
    return std::bit_cast<float>(sign | static_cast<std::uint32_t>(113 - shift) << 23 | (mant << 13));
  }
  return std::bit_cast<float>(sign | (exp + 112) << 23 | (mant << 13));
}

}  // namespace

std::int64_t integer_at(const RawArray& a, std::int64_t i) {
  const std::uint8_t* p = a.bytes.data() + i * dtype_bytes(a.dtype);
  switch (a.dtype) {
    case ArrayDtype::u8: return *p;
    case ArrayDtype::i8: return static_cast<std::int8_t>(*p);
    case ArrayDtype::u16: return load<std::uint16_t>(p);
    case ArrayDtype::i16: return load<std::int16_t>(p);
    case ArrayDtype::u32: return load<std::uint32_t>(p);
    case ArrayDtype::i32: return load<std::int32_t>(p);
    case ArrayDtype::u64: return static_cast<std::int64_t>(load<std::uint64_t>(p));
    case ArrayDtype::i64: return load<std::int64_t>(p);
    default: throw std::logic_error(a.origin + ": integer_at on a " + dtype_name(a.dtype) + " array");
  }
}

void to_float(const RawArray& a, std::int64_t first, std::int64_t n, float* out) {
  const std::uint8_t* p = a.bytes.data() + first * dtype_bytes(a.dtype);
  switch (a.dtype) {
    case ArrayDtype::u8:
      for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(p[i]);
      return;
    case ArrayDtype::f16:
      for (std::int64_t i = 0; i < n; ++i) out[i] = half_to_float(load<std::uint16_t>(p + 2 * i));
      return;
    case ArrayDtype::bf16:
      for (std::int64_t i = 0; i < n; ++i)
        out[i] = std::bit_cast<float>(static_cast<std::uint32_t>(load<std::uint16_t>(p + 2 * i)) << 16);
      return;
    case ArrayDtype::f32: std::memcpy(out, p, static_cast<std::size_t>(n) * 4); return;
    case ArrayDtype::f64:
      for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(load<double>(p + 8 * i));
      return;
    default: throw std::logic_error(a.origin + ": to_float on a " + std::string(dtype_name(a.dtype)) + " array");
  }
}

}  // namespace codistill::data

// Element access for the CPU reference targets: HostElem<E> reads an element
// of type E as double and writes one from double, with bf16 and f16 stored
// as raw 16-bit patterns and converted through f32 with
// round-to-nearest-even. Plain C++: the CPU-only build has no CUDA types.
#pragma once

#include <cstdint>
#include <cstring>

#include "ffi/common/elem_type.h"

namespace tsm2 {

// bf16 and f16 are stored as raw 16-bit patterns; these convert through f32.
inline float Bf16ToFloat(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline uint16_t FloatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    exp = 113;
    while ((man & 0x400u) == 0) {
      man <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (ax >= 0x477ff000u) return sign | 0x7c00u;  // rounds to infinity
  if (ax < 0x33000001u) return sign;             // rounds to zero
  int exp = static_cast<int>(ax >> 23) - 127 + 15;
  uint32_t man = (ax & 0x7fffffu) | 0x800000u;
  int shift = 13;
  if (exp <= 0) {  // subnormal result
    shift = 14 - exp;
    exp = 0;
  }
  uint32_t q = man >> shift;
  const uint32_t rem = man & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  if (exp == 0) return sign | static_cast<uint16_t>(q);
  // q includes the implicit bit; a carry out of the mantissa bumps the exponent.
  return sign | static_cast<uint16_t>((static_cast<uint32_t>(exp) << 10) + (q - 0x400u));
}

template <ElemType E>
struct HostElem;
template <>
struct HostElem<ElemType::kF32> {
  static double Load(const void* p, int64_t i) { return static_cast<const float*>(p)[i]; }
  static void Store(void* p, int64_t i, double v) {
    static_cast<float*>(p)[i] = static_cast<float>(v);
  }
};
template <>
struct HostElem<ElemType::kF64> {
  static double Load(const void* p, int64_t i) { return static_cast<const double*>(p)[i]; }
  static void Store(void* p, int64_t i, double v) { static_cast<double*>(p)[i] = v; }
};
template <>
struct HostElem<ElemType::kBF16> {
  static double Load(const void* p, int64_t i) {
    return Bf16ToFloat(static_cast<const uint16_t*>(p)[i]);
  }
  static void Store(void* p, int64_t i, double v) {
    static_cast<uint16_t*>(p)[i] = FloatToBf16(static_cast<float>(v));
  }
};
template <>
struct HostElem<ElemType::kF16> {
  static double Load(const void* p, int64_t i) {
    return HalfToFloat(static_cast<const uint16_t*>(p)[i]);
  }
  static void Store(void* p, int64_t i, double v) {
    static_cast<uint16_t*>(p)[i] = FloatToHalf(static_cast<float>(v));
  }
};

}  // namespace tsm2

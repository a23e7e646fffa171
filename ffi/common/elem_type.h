// The element types the kernels take, and the facts about them that the
// planners, the launchers, the FFI handlers and the Python bindings share:
// the one table of item sizes, the accumulator each type sums in, and the
// numpy names Python passes. Plain C++ (no CUDA, no XLA).
#pragma once

#include <cstdint>
#include <string_view>
#include <type_traits>

namespace tsm2 {

enum class ElemType : int32_t { kF32, kF64, kBF16, kF16 };

// A distinct type per element type, so that the one dispatch
// (ffi/common/dispatch.h) can hand a compile-time element type to a generic
// lambda: f(ElemTag<E>{}), with decltype(e)::value == E inside.
template <ElemType E>
using ElemTag = std::integral_constant<ElemType, E>;

constexpr int ItemSize(ElemType t) {
  switch (t) {
    case ElemType::kF64:
      return 8;
    case ElemType::kF32:
      return 4;
    case ElemType::kBF16:
    case ElemType::kF16:
      return 2;
  }
  return 0;
}

// f64 accumulates in f64; f32, bf16 and f16 accumulate in f32 (never TF32).
constexpr int AccSize(int itemsize) { return itemsize == 8 ? 8 : 4; }
constexpr ElemType AccOf(ElemType t) { return t == ElemType::kF64 ? t : ElemType::kF32; }
// The C++ type of an accumulator element type (kF32 or kF64).
template <ElemType A>
using AccCType = std::conditional_t<A == ElemType::kF64, double, float>;

// The numpy dtype names (jnp.dtype(x).name) Python passes to the module.
constexpr const char* ElemTypeName(ElemType t) {
  switch (t) {
    case ElemType::kF32:
      return "float32";
    case ElemType::kF64:
      return "float64";
    case ElemType::kBF16:
      return "bfloat16";
    case ElemType::kF16:
      return "float16";
  }
  return "?";
}

inline constexpr ElemType kElemTypes[] = {ElemType::kF32, ElemType::kF64, ElemType::kBF16,
                                          ElemType::kF16};

// The element type named `name`, or false if the kernels take no such type.
inline bool ElemTypeFromName(std::string_view name, ElemType* out) {
  for (ElemType t : kElemTypes) {
    if (name == ElemTypeName(t)) {
      *out = t;
      return true;
    }
  }
  return false;
}

}  // namespace tsm2

// What every FFI handler needs besides its own decoding: names and
// descriptions of buffers for error messages, shape checks, and the macro
// that returns an ffi::Error early. XLA FFI headers only (no CUDA), so the
// CPU reference handlers use it too.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "xla/ffi/api/ffi.h"

namespace tsm2 {

namespace ffi = xla::ffi;

// Returns from the enclosing handler when `expr` (an ffi::Error) failed.
#define TSM2_FFI_RETURN_IF_ERROR(expr)                               \
  do {                                                               \
    if (::xla::ffi::Error tsm2_err_ = (expr); tsm2_err_.failure()) { \
      return tsm2_err_;                                              \
    }                                                                \
  } while (0)

inline const char* DTypeName(ffi::DataType t) {
  switch (t) {
    case ffi::DataType::F16:
      return "f16";
    case ffi::DataType::BF16:
      return "bf16";
    case ffi::DataType::F32:
      return "f32";
    case ffi::DataType::F64:
      return "f64";
    case ffi::DataType::S32:
      return "s32";
    case ffi::DataType::U32:
      return "u32";
    case ffi::DataType::U8:
      return "u8";
    case ffi::DataType::PRED:
      return "pred";
    default:
      return "unsupported";
  }
}

// Whether b is of type t and exactly `shape`.
inline bool HasShape(const ffi::AnyBuffer& b, ffi::DataType t,
                     std::initializer_list<int64_t> shape) {
  auto dims = b.dimensions();
  if (b.element_type() != t || dims.size() != shape.size()) return false;
  size_t i = 0;
  for (int64_t s : shape) {
    if (dims[i++] != s) return false;
  }
  return true;
}

// "f32[5,3]": how error messages name a buffer. Plain string building, no
// iostreams: a handler's messages must not depend on the host process's
// locale and stream state (an ostringstream here crashed inside a jax process
// on the GPU machine).
inline std::string DescribeBuffer(const ffi::AnyBuffer& x) {
  std::string out = std::string(DTypeName(x.element_type())) + "[";
  auto dims = x.dimensions();
  for (size_t i = 0; i < dims.size(); ++i) out += (i ? "," : "") + std::to_string(dims[i]);
  return out + "]";
}

}  // namespace tsm2

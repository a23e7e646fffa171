// The one dispatch from an XLA element type to the kernels' element types.
//
// Every handler that runs typed code, CPU reference or CUDA launcher, goes
// through DispatchElemType: f(ElemTag<E>{}) for the four float types, and an
// InvalidArgument naming the op and the type for anything else. The
// launchers below it are templates on ElemType and never switch on a type
// again.
#pragma once

#include <string>
#include <string_view>

#include "ffi/common/elem_type.h"
#include "ffi/common/ffi_helpers.h"
#include "xla/ffi/api/ffi.h"

namespace tsm2 {

template <typename F>
ffi::Error DispatchElemType(std::string_view op, ffi::DataType t, F&& f) {
  switch (t) {
    case ffi::DataType::F32:
      return f(ElemTag<ElemType::kF32>{});
    case ffi::DataType::F64:
      return f(ElemTag<ElemType::kF64>{});
    case ffi::DataType::BF16:
      return f(ElemTag<ElemType::kBF16>{});
    case ffi::DataType::F16:
      return f(ElemTag<ElemType::kF16>{});
    default:
      return ffi::Error::InvalidArgument(std::string(op) + ": unsupported dtype " + DTypeName(t) +
                                         " (f32, f64, bf16 or f16)");
  }
}

// The element type of a call's data and that of its accumulators (f32 or
// f64), both through DispatchElemType: f(ElemTag<E>{}, ElemTag<A>{}).
template <typename F>
ffi::Error DispatchElemAndAcc(std::string_view op, ffi::DataType t, ffi::DataType acc, F&& f) {
  return DispatchElemType(op, t, [&](auto elem) {
    return DispatchElemType(op, acc, [&](auto a) -> ffi::Error {
      constexpr ElemType kA = decltype(a)::value;
      if constexpr (kA == ElemType::kF32 || kA == ElemType::kF64) {
        return f(elem, a);
      } else {
        return ffi::Error::InvalidArgument(std::string(op) +
                                           ": the accumulator dtype must be f32 or f64");
      }
    });
  });
}

// Whether the kernels take t: the types DispatchElemType dispatches.
inline bool IsSupportedInput(ffi::DataType t) {
  return DispatchElemType("", t, [](auto) { return ffi::Error::Success(); }).success();
}

// The accumulator type of a supported input: f64 for f64, f32 otherwise.
inline ffi::DataType AccDataType(ffi::DataType t) {
  return t == ffi::DataType::F64 ? ffi::DataType::F64 : ffi::DataType::F32;
}

}  // namespace tsm2

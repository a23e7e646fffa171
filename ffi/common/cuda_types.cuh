// The CUDA type of each element type (ffi/common/elem_type.h): what the
// launchers instantiate the kernels with once the handler's one dispatch has
// fixed E.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "ffi/common/elem_type.h"

namespace tsm2 {

template <ElemType E>
struct CudaTypeOf;
template <>
struct CudaTypeOf<ElemType::kF32> {
  using type = float;
};
template <>
struct CudaTypeOf<ElemType::kF64> {
  using type = double;
};
template <>
struct CudaTypeOf<ElemType::kBF16> {
  using type = __nv_bfloat16;
};
template <>
struct CudaTypeOf<ElemType::kF16> {
  using type = __half;
};
template <ElemType E>
using CudaType = typename CudaTypeOf<E>::type;

}  // namespace tsm2

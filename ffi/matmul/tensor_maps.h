// Tensor maps (the descriptors sm_90's TMA copies read) for 2-byte row-major
// operands, made on the host before a launch. cuTensorMapEncodeTiled is a
// driver API call; it is reached through the runtime's entry-point query so
// that the library links only the CUDA runtime, as JAX's own plugins do.
#pragma once

#include <cuda.h>  // CUtensorMap and its enums (types only)
#include <cuda_runtime.h>

#include <cstdint>

namespace tsm2 {

// A [batch][rows][cols] array of 2-byte elements (bf16 or f16; `type` says
// which) as a 3-D tensor map whose boxes are box_rows x 64 elements (one
// 128-byte row each) in the 128-byte swizzle. Positions past the array read
// as zeros. Needs cols % 8 == 0 and a 16-byte aligned base (TMA's stride
// and address rules); every dimension below 2^31 (the kernels' coordinates
// are 32-bit). cudaErrorNotSupported when the driver has no TMA entry point.
inline cudaError_t EncodeHalfTensorMap(CUtensorMap* map, CUtensorMapDataType type, const void* base,
                                       int64_t batch, int64_t rows, int64_t cols, int box_rows) {
  using Encode =
      CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  static const Encode encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found;
    const bool ok = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                     cudaEnableDefault, &found) == cudaSuccess &&
                    found == cudaDriverEntryPointSuccess;
    return ok ? reinterpret_cast<Encode>(fn) : nullptr;
  }();
  if (encode == nullptr) return cudaErrorNotSupported;
  constexpr int64_t kMax = int64_t{1} << 31;
  if (cols % 8 != 0 || reinterpret_cast<uintptr_t>(base) % 16 != 0 || batch >= kMax ||
      rows >= kMax || cols >= kMax) {
    return cudaErrorInvalidValue;
  }
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows),
                              static_cast<cuuint64_t>(batch)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(cols) * 2,
                                 static_cast<cuuint64_t>(rows * cols) * 2};
  const cuuint32_t box[3] = {64, static_cast<cuuint32_t>(box_rows), 1}, unit[3] = {1, 1, 1};
  const CUresult r = encode(map, type, 3, const_cast<void*>(base), dims, strides, box, unit,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

}  // namespace tsm2

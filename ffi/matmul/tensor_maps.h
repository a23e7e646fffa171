// Tensor maps (the descriptors sm_90's TMA copies read) for row-major
// operands of bf16, f16 and f32, made on the host before a launch. cuTensorMapEncodeTiled is a
// driver API call; it is reached through the runtime's entry-point query so
// that the library links only the CUDA runtime, as JAX's own plugins do.
#pragma once

#include <cuda.h>  // CUtensorMap and its enums (types only)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace tsm2 {

using TensorMapEncoder = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                      const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                      const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                      CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// The driver's cuTensorMapEncodeTiled, or nullptr where it has none.
inline TensorMapEncoder GetTensorMapEncoder() {
  static const TensorMapEncoder encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found;
    const bool ok = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                     cudaEnableDefault, &found) == cudaSuccess &&
                    found == cudaDriverEntryPointSuccess;
    return ok ? reinterpret_cast<TensorMapEncoder>(fn) : nullptr;
  }();
  return encode;
}

template <typename T>
constexpr CUtensorMapDataType MapType() {
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16> ||
                    std::is_same_v<T, float> || std::is_same_v<T, double>,
                "bf16, f16, f32 or f64");
  return std::is_same_v<T, __half>   ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
         : std::is_same_v<T, float>  ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
         : std::is_same_v<T, double> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT64
                                     : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
}

// Whether EncodeRowTensorMap takes an array of these dimensions (its
// coordinates are 32-bit; rows of whole 16-byte vectors) and the driver can
// encode maps.
inline bool RowTensorMapFits(int itemsize, int64_t batch, int64_t rows, int64_t cols) {
  constexpr int64_t kMax = int64_t{1} << 31;
  return cols * itemsize % 16 == 0 && batch < kMax && rows < kMax && cols < kMax &&
         GetTensorMapEncoder() != nullptr;
}

// A [batch][rows][cols] array of `itemsize`-byte elements (`type` says
// which) as a 3-D tensor map whose boxes are box_rows x (128 / itemsize)
// elements (one 128-byte row each) in the 128-byte swizzle. Positions past
// the array read as zeros. Needs rows of whole 16-byte vectors and a 16-byte
// aligned base (TMA's stride and address rules); every dimension below 2^31
// (the kernels' coordinates are 32-bit). cudaErrorNotSupported when the
// driver has no TMA entry point.
inline cudaError_t EncodeRowTensorMap(CUtensorMap* map, CUtensorMapDataType type, int itemsize,
                                      const void* base, int64_t batch, int64_t rows, int64_t cols,
                                      int box_rows) {
  const TensorMapEncoder encode = GetTensorMapEncoder();
  if (encode == nullptr) return cudaErrorNotSupported;
  constexpr int64_t kMax = int64_t{1} << 31;
  if (cols * itemsize % 16 != 0 || reinterpret_cast<uintptr_t>(base) % 16 != 0 || batch >= kMax ||
      rows >= kMax || cols >= kMax) {
    return cudaErrorInvalidValue;
  }
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows),
                              static_cast<cuuint64_t>(batch)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(cols * itemsize),
                                 static_cast<cuuint64_t>(rows * cols * itemsize)};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(128 / itemsize),
                             static_cast<cuuint32_t>(box_rows), 1};
  const cuuint32_t unit[3] = {1, 1, 1};
  const CUresult r = encode(map, type, 3, const_cast<void*>(base), dims, strides, box, unit,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

}  // namespace tsm2

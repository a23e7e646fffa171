// Launches the end-of-iteration centroid update (kernels/kmeans_update.cuh)
// for x's element type.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "ffi/kmeans/kernels/kmeans_update.cuh"
#include "ffi/kmeans/launcher.h"

namespace tsm2 {
namespace {

template <typename T, typename A>
cudaError_t Launch(const DeviceKmeansUpdate& p, cudaStream_t stream) {
  // One element of c_new per thread when no cluster is empty.
  const int64_t blocks =
      std::clamp<int64_t>((p.k * p.d + kKmeansUpdateThreads - 1) / kKmeansUpdateThreads, 1, 1024);
  KmeansUpdateKernel<T, A><<<static_cast<unsigned>(blocks), kKmeansUpdateThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchKmeansUpdate(const DeviceKmeansUpdate& p, cudaStream_t stream) {
  if (p.k == 0 || p.d == 0) return cudaSuccess;
  switch (p.type) {
    case ElemType::kF32:
      return Launch<float, float>(p, stream);
    case ElemType::kF64:
      return Launch<double, double>(p, stream);
    case ElemType::kBF16:
      return Launch<__nv_bfloat16, float>(p, stream);
    case ElemType::kF16:
      return Launch<__half, float>(p, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace tsm2

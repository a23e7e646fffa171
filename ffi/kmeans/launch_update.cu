// Launches the end-of-iteration centroid update (kernels/kmeans_update.cuh)
// for each element type of x.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "ffi/common/cuda_types.cuh"
#include "ffi/common/kernel_utils.cuh"
#include "ffi/kmeans/kernels/kmeans_update.cuh"
#include "ffi/kmeans/launcher.h"

namespace tsm2 {
namespace {

template <ElemType E>
Status LaunchUpdate(const DeviceKmeansUpdate& p, cudaStream_t stream) {
  using T = CudaType<E>;
  if (p.k == 0 || p.d == 0) return Status{};
  // One element of c_new per thread when no cluster is empty.
  const int64_t blocks =
      std::clamp<int64_t>((p.k * p.d + kKmeansUpdateThreads - 1) / kKmeansUpdateThreads, 1, 1024);
  KmeansUpdateKernel<T, AccType<T>>
      <<<static_cast<unsigned>(blocks), kKmeansUpdateThreads, 0, stream>>>(p);
  TSM2_RETURN_IF_LAUNCH_FAILED("KmeansUpdateKernel");
  return Status{};
}

}  // namespace

template <>
Status LaunchKmeansUpdate<ElemType::kF32>(const DeviceKmeansUpdate& p, cudaStream_t stream) {
  return LaunchUpdate<ElemType::kF32>(p, stream);
}
template <>
Status LaunchKmeansUpdate<ElemType::kF64>(const DeviceKmeansUpdate& p, cudaStream_t stream) {
  return LaunchUpdate<ElemType::kF64>(p, stream);
}
template <>
Status LaunchKmeansUpdate<ElemType::kBF16>(const DeviceKmeansUpdate& p, cudaStream_t stream) {
  return LaunchUpdate<ElemType::kBF16>(p, stream);
}
template <>
Status LaunchKmeansUpdate<ElemType::kF16>(const DeviceKmeansUpdate& p, cudaStream_t stream) {
  return LaunchUpdate<ElemType::kF16>(p, stream);
}

}  // namespace tsm2

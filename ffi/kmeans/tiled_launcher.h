// The host side of the k-means step for any k, without XLA: the tiled
// assignment (DeviceKmeansAssign, LaunchKmeansAssign) and the sums by
// buckets of clusters or sorted rows (DeviceKmeansSums, LaunchKmeansSums), planned by
// tiled_plan.h for the current device. The FFI handlers
// (cuda_tiled_handler.cc) drive the kernels through these.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "ffi/common/elem_type.h"
#include "ffi/common/status.h"
#include "ffi/kmeans/tiled_plan.h"

namespace tsm2 {

// labels [n] (int32) and mind [n] (f32: the squared distance to the chosen
// centroid) of x [n, d] against c [k, d] (element type E: f32, bf16 or f16),
// given x_sq [n] (f32, ||x||^2 of each row). The workspace holds
// KmeansAssignPlanOf(...).workspace_bytes; a smaller one than the plan of
// this device wants means fewer splits of the centroid tiles.
struct DeviceKmeansAssign {
  const void* x = nullptr;
  const void* c = nullptr;
  const float* x_sq = nullptr;
  int32_t* labels = nullptr;
  float* mind = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  int64_t n = 0, d = 0, k = 0;
  KmeansPrecision precision = KmeansPrecision::kFloat32;
};

template <ElemType E>
Status LaunchKmeansAssign(const DeviceKmeansAssign& p, cudaStream_t stream);
template <>
Status LaunchKmeansAssign<ElemType::kF32>(const DeviceKmeansAssign&, cudaStream_t);
template <>
Status LaunchKmeansAssign<ElemType::kBF16>(const DeviceKmeansAssign&, cudaStream_t);
template <>
Status LaunchKmeansAssign<ElemType::kF16>(const DeviceKmeansAssign&, cudaStream_t);

// sums [k, d], counts [k] and inertia [] (accumulator type) of x [n, d]
// (element type E) with weights w [n], labels [n] (labels outside [0, k)
// count nowhere) and distances mind [n], by the plan (bucket, chunks,
// piece): the FFI attributes, which the CPU reference follows too. Where
// this device's shared memory does not hold the bucket, or the workspace
// the partials or the sort, the launcher falls back to a bucket plan of its
// own (the same sums, another order of addition).
struct DeviceKmeansSums {
  const void* x = nullptr;
  const void* w = nullptr;
  const int32_t* labels = nullptr;
  const void* mind = nullptr;
  void* sums = nullptr;
  void* counts = nullptr;
  void* inertia = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  int64_t n = 0, d = 0, k = 0;
  int64_t bucket = 0, chunks = 0;
  int64_t piece = 0;  // > 0: the sorted path
};

template <ElemType E>
Status LaunchKmeansSums(const DeviceKmeansSums& p, cudaStream_t stream);
template <>
Status LaunchKmeansSums<ElemType::kF32>(const DeviceKmeansSums&, cudaStream_t);
template <>
Status LaunchKmeansSums<ElemType::kF64>(const DeviceKmeansSums&, cudaStream_t);
template <>
Status LaunchKmeansSums<ElemType::kBF16>(const DeviceKmeansSums&, cudaStream_t);
template <>
Status LaunchKmeansSums<ElemType::kF16>(const DeviceKmeansSums&, cudaStream_t);

}  // namespace tsm2

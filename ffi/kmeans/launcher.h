// Host-side entry point of the fused Lloyd step (kernels/kmeans.cuh). Nothing
// here depends on XLA: the FFI handler (kmeans_handlers.cc) and the kernel
// lab (benchmarks/kmeans_lab.cu) both drive it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "ffi/matmul/launcher.h"

namespace tsm2 {

// One Lloyd iteration over x [n, d] (row-major, `type`) against c [k, d]
// (same type) with row weights w [n] (accumulator type: f64 for f64, f32
// otherwise). Writes labels [n] (int32), mind [n] (squared distance to the
// chosen centroid), sums [k, d] (sum of w * x per cluster), counts [k] (sum
// of w per cluster) and inertia (sum of w * mind), all in the accumulator
// type. Needs KmeansSupported(itemsize, d, k) (kmeans_plan.h).
struct DeviceKmeans {
  const void* x = nullptr;
  const void* c = nullptr;
  const void* w = nullptr;
  int32_t* labels = nullptr;
  void* mind = nullptr;
  void* sums = nullptr;
  void* counts = nullptr;
  void* inertia = nullptr;
  int64_t n = 0, d = 0, k = 0;
  ElemType type = ElemType::kF32;
};

// Partials the launch will write (blocks, or clusters of blocks where the
// plan splits d; kmeans_plan.h), given a workspace of `workspace_bytes`
// (KmeansWorkspaceBytes sizes it); queries the current device.
cudaError_t PlanKmeansStep(const DeviceKmeans& p, size_t workspace_bytes, int* owners);

// Launches the step and the fixed-order reduction of the partials on
// `stream`. No allocation, no synchronization (CUDA-graph safe).
cudaError_t LaunchKmeansStep(const DeviceKmeans& p, void* workspace, size_t workspace_bytes,
                             cudaStream_t stream);

// New centroids at the end of an iteration (kernels/kmeans_update.cuh):
// c_new = sums / counts per cluster, c_old where the count is not positive,
// after scikit-learn's rule has given each empty cluster one of the points
// farthest from their centroids (mind) and taken that point (x row, weight
// w, label) out of its own cluster. sums, counts, c_old, mind, w and c_new
// are in the accumulator type of x's `type`.
struct DeviceKmeansUpdate {
  const void* sums = nullptr;    // [k, d]
  const void* counts = nullptr;  // [k]
  const void* c_old = nullptr;   // [k, d]
  const void* mind = nullptr;    // [n]
  const void* x = nullptr;       // [n, d], `type`
  const void* w = nullptr;       // [n]
  const int32_t* labels = nullptr;
  void* c_new = nullptr;      // [k, d]
  void* workspace = nullptr;  // KmeansUpdateWorkspaceBytes(k), kmeans_plan.h
  int64_t n = 0, d = 0, k = 0;
  ElemType type = ElemType::kF32;
};

// Launches the update on `stream`: no allocation, no synchronization.
cudaError_t LaunchKmeansUpdate(const DeviceKmeansUpdate& p, cudaStream_t stream);

}  // namespace tsm2

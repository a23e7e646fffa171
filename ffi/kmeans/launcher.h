// The host side of the k-means targets without XLA: the fused Lloyd step
// (DeviceKmeans, planned once by PlanKmeansStep and run by LaunchKmeansStep)
// and the end-of-iteration centroid update (DeviceKmeansUpdate,
// LaunchKmeansUpdate). The FFI handlers (cuda_handler.cc) and the lab
// (benchmarks/lab/kmeans_lab.cu) drive the kernels through these.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "ffi/common/elem_type.h"
#include "ffi/common/status.h"
#include "ffi/kmeans/plan.h"
#include "ffi/kmeans/row_check.h"

namespace tsm2 {

// One Lloyd iteration over x [n, d] (row-major, element type E) against c [k, d]
// (same type) with row weights w [n] (accumulator type: f64 for f64, f32
// otherwise). Writes labels [n] (int32), mind [n] (squared distance to the
// chosen centroid), sums [k, d] (sum of w * x per cluster), counts [k] (sum
// of w per cluster) and inertia (sum of w * mind), all in the accumulator
// type. Needs KmeansSupported(itemsize, d, k) (plan.h). The workspace
// holds one partial (sums, counts, inertia) per block or cluster
// (KmeansWorkspaceBytes sizes it); a smaller one means fewer blocks.
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
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  // The checked step only (PlanKmeansStepChecked): rows that failed the
  // per-row distance check, int32 [], the worst ratio of a row's residual to
  // its threshold, f32 [], and (CHECK == 2) the device copy of the injection.
  int32_t* row_faults = nullptr;
  float* row_margin = nullptr;
  const KmeansInjection* inject = nullptr;
};

struct KmeansStepPlan;
// A resolved launch: builds its kernel's arguments and launches it.
using KmeansLaunchFn = Status (*)(const DeviceKmeans& p, const KmeansStepPlan& plan,
                                  cudaStream_t stream);

// Everything the step's launch needs, decided once by PlanKmeansStep.
struct KmeansStepPlan {
  KmeansStep step = KmeansStep::kCudaCores;
  KmeansLaunchFn launch = nullptr;  // the step kernel, over `owners` partials
  KmeansLaunchFn finish = nullptr;  // the fixed-order sum of the partials
  const char* kernel_name = "";
  int owners = 0;  // partials written: blocks, or clusters where the plan splits d
};

// Plans the step for element type E on the current device (launch_step.cuh;
// defined per element type in launch_step.cu).
template <ElemType E>
Status PlanKmeansStep(const DeviceKmeans& p, KmeansStepPlan* plan);
template <>
Status PlanKmeansStep<ElemType::kF32>(const DeviceKmeans&, KmeansStepPlan*);
template <>
Status PlanKmeansStep<ElemType::kF64>(const DeviceKmeans&, KmeansStepPlan*);
template <>
Status PlanKmeansStep<ElemType::kBF16>(const DeviceKmeans&, KmeansStepPlan*);
template <>
Status PlanKmeansStep<ElemType::kF16>(const DeviceKmeans&, KmeansStepPlan*);

// Plans the row-checked step (CHECK 1) or the step with fault injection
// (CHECK 2) for element type E (launch_step_checked.cu, launch_step_inject.cu).
template <ElemType E, int CHECK>
Status PlanKmeansStepChecked(const DeviceKmeans& p, KmeansStepPlan* plan);
#define TSM2_DECLARE_KMEANS_CHECKED(CHECK)                                                    \
  template <>                                                                                 \
  Status PlanKmeansStepChecked<ElemType::kF32, CHECK>(const DeviceKmeans&, KmeansStepPlan*);  \
  template <>                                                                                 \
  Status PlanKmeansStepChecked<ElemType::kF64, CHECK>(const DeviceKmeans&, KmeansStepPlan*);  \
  template <>                                                                                 \
  Status PlanKmeansStepChecked<ElemType::kBF16, CHECK>(const DeviceKmeans&, KmeansStepPlan*); \
  template <>                                                                                 \
  Status PlanKmeansStepChecked<ElemType::kF16, CHECK>(const DeviceKmeans&, KmeansStepPlan*);
TSM2_DECLARE_KMEANS_CHECKED(1)
TSM2_DECLARE_KMEANS_CHECKED(2)
#undef TSM2_DECLARE_KMEANS_CHECKED

// Runs `plan` on `stream`: the step and the fixed-order reduction of its
// partials. No allocation, no synchronization (CUDA-graph safe).
inline Status LaunchKmeansStep(const DeviceKmeans& p, const KmeansStepPlan& plan,
                               cudaStream_t stream) {
  if (plan.launch == nullptr || plan.finish == nullptr) {
    return TSM2_FAIL(cudaErrorInvalidValue, "LaunchKmeansStep: the plan has no kernel");
  }
  if (plan.owners > 0) TSM2_RETURN_IF_ERROR(plan.launch(p, plan, stream));
  return plan.finish(p, plan, stream);
}

// New centroids at the end of an iteration (kernels/kmeans_update.cuh):
// c_new = sums / counts per cluster, c_old where the count is not positive,
// after scikit-learn's rule has given each empty cluster one of the points
// farthest from their centroids (mind) and taken that point (x row, weight
// w, label) out of its own cluster. sums, counts, c_old, mind, w and c_new
// are in the accumulator type of x's element type. Passed to the kernel as
// it is (kernels/kmeans_update.cuh).
struct DeviceKmeansUpdate {
  const void* sums = nullptr;    // [k, d]
  const void* counts = nullptr;  // [k]
  const void* c_old = nullptr;   // [k, d]
  const void* mind = nullptr;    // [n]
  const void* x = nullptr;       // [n, d], element type E
  const void* w = nullptr;       // [n]
  const int32_t* labels = nullptr;
  void* c_new = nullptr;      // [k, d]
  void* workspace = nullptr;  // KmeansUpdateWorkspaceBytes(k), plan.h
  int64_t n = 0, d = 0, k = 0;
};

// Launches the update for x of element type E on `stream`: no allocation, no
// synchronization (launch_update.cu).
template <ElemType E>
Status LaunchKmeansUpdate(const DeviceKmeansUpdate& p, cudaStream_t stream);
template <>
Status LaunchKmeansUpdate<ElemType::kF32>(const DeviceKmeansUpdate&, cudaStream_t);
template <>
Status LaunchKmeansUpdate<ElemType::kF64>(const DeviceKmeansUpdate&, cudaStream_t);
template <>
Status LaunchKmeansUpdate<ElemType::kBF16>(const DeviceKmeansUpdate&, cudaStream_t);
template <>
Status LaunchKmeansUpdate<ElemType::kF16>(const DeviceKmeansUpdate&, cudaStream_t);

}  // namespace tsm2

// TypedLauncher<T>: PlanMatmul / LaunchMatmul for one element type. Defined in
// launch_matmul.cuh and instantiated once per dtype in launch_<dtype>.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "ffi/matmul/launcher.h"

namespace tsm2 {

template <typename T>
struct TypedLauncher {
  static cudaError_t Plan(const DeviceMatmul& p, Kernel f, size_t workspace_capacity,
                          MatmulPlan* plan);
  static cudaError_t Launch(const DeviceMatmul& p, const MatmulPlan& plan, void* ws,
                            cudaStream_t stream);
};

extern template struct TypedLauncher<float>;
extern template struct TypedLauncher<double>;
extern template struct TypedLauncher<__nv_bfloat16>;
extern template struct TypedLauncher<__half>;

}  // namespace tsm2

// Dispatch of PlanMatmul / LaunchMatmul on the element type.
#include "ffi/matmul/typed_launcher.h"

namespace tsm2 {

cudaError_t PlanMatmul(const DeviceMatmul& p, Kernel family, size_t ws, MatmulPlan* plan) {
  switch (p.type) {
    case ElemType::kF32:
      return TypedLauncher<float>::Plan(p, family, ws, plan);
    case ElemType::kF64:
      return TypedLauncher<double>::Plan(p, family, ws, plan);
    case ElemType::kBF16:
      return TypedLauncher<__nv_bfloat16>::Plan(p, family, ws, plan);
    case ElemType::kF16:
      return TypedLauncher<__half>::Plan(p, family, ws, plan);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchMatmul(const DeviceMatmul& p, const MatmulPlan& plan, void* workspace,
                         cudaStream_t stream) {
  switch (p.type) {
    case ElemType::kF32:
      return TypedLauncher<float>::Launch(p, plan, workspace, stream);
    case ElemType::kF64:
      return TypedLauncher<double>::Launch(p, plan, workspace, stream);
    case ElemType::kBF16:
      return TypedLauncher<__nv_bfloat16>::Launch(p, plan, workspace, stream);
    case ElemType::kF16:
      return TypedLauncher<__half>::Launch(p, plan, workspace, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace tsm2

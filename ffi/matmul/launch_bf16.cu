// The matmul planner and every kernel it can launch, instantiated for
// ElemType::kBF16 (one translation unit per element type, so that they compile
// in parallel).
#include "ffi/common/cuda_types.cuh"
#include "ffi/matmul/plan.cuh"

namespace tsm2 {

template <>
Status PlanMatmul<ElemType::kBF16>(const DeviceMatmul& p, Kernel family, MatmulPlan* plan) {
  return PlanMatmulWith<CudaType<ElemType::kBF16>>(p, family, plan);
}

}  // namespace tsm2

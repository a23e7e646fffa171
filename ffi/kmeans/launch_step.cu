// The k-means step's planner and every variant it can launch, instantiated
// for each element type (launch_step.cuh).
#include "ffi/common/cuda_types.cuh"
#include "ffi/kmeans/launch_step.cuh"

namespace tsm2 {

template <>
Status PlanKmeansStep<ElemType::kF32>(const DeviceKmeans& p, KmeansStepPlan* plan) {
  return PlanKmeansStepWith<CudaType<ElemType::kF32>>(p, plan);
}
template <>
Status PlanKmeansStep<ElemType::kF64>(const DeviceKmeans& p, KmeansStepPlan* plan) {
  return PlanKmeansStepWith<CudaType<ElemType::kF64>>(p, plan);
}
template <>
Status PlanKmeansStep<ElemType::kBF16>(const DeviceKmeans& p, KmeansStepPlan* plan) {
  return PlanKmeansStepWith<CudaType<ElemType::kBF16>>(p, plan);
}
template <>
Status PlanKmeansStep<ElemType::kF16>(const DeviceKmeans& p, KmeansStepPlan* plan) {
  return PlanKmeansStepWith<CudaType<ElemType::kF16>>(p, plan);
}

}  // namespace tsm2

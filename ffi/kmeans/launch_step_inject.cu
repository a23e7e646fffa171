// The k-means step with fault injection (CHECK 2) for each element type
// (launch_step.cuh, kernels/kmeans_row_check.cuh): its own translation unit,
// so that the checked step's kernels hold no injection code and build in
// parallel with it.
#include "ffi/common/cuda_types.cuh"
#include "ffi/kmeans/launch_step.cuh"

namespace tsm2 {

template <>
Status PlanKmeansStepChecked<ElemType::kF32, 2>(const DeviceKmeans& p, KmeansStepPlan* plan) {
  return PlanKmeansStepWith<CudaType<ElemType::kF32>, KmeansTuning, 2>(p, plan);
}
template <>
Status PlanKmeansStepChecked<ElemType::kF64, 2>(const DeviceKmeans& p, KmeansStepPlan* plan) {
  return PlanKmeansStepWith<CudaType<ElemType::kF64>, KmeansTuning, 2>(p, plan);
}
template <>
Status PlanKmeansStepChecked<ElemType::kBF16, 2>(const DeviceKmeans& p, KmeansStepPlan* plan) {
  return PlanKmeansStepWith<CudaType<ElemType::kBF16>, KmeansTuning, 2>(p, plan);
}
template <>
Status PlanKmeansStepChecked<ElemType::kF16, 2>(const DeviceKmeans& p, KmeansStepPlan* plan) {
  return PlanKmeansStepWith<CudaType<ElemType::kF16>, KmeansTuning, 2>(p, plan);
}

}  // namespace tsm2

// The row-checked k-means step (CHECK 1) for each
// element type (launch_step.cuh, kernels/kmeans_row_check.cuh).
#include "ffi/common/cuda_types.cuh"
#include "ffi/kmeans/launch_step.cuh"

namespace tsm2 {

template <>
Status PlanKmeansStepChecked<ElemType::kF32, 1>(const DeviceKmeans& p, KmeansStepPlan* plan) {
  return PlanKmeansStepWith<CudaType<ElemType::kF32>, KmeansTuning, 1>(p, plan);
}
template <>
Status PlanKmeansStepChecked<ElemType::kF64, 1>(const DeviceKmeans& p, KmeansStepPlan* plan) {
  return PlanKmeansStepWith<CudaType<ElemType::kF64>, KmeansTuning, 1>(p, plan);
}
template <>
Status PlanKmeansStepChecked<ElemType::kBF16, 1>(const DeviceKmeans& p, KmeansStepPlan* plan) {
  return PlanKmeansStepWith<CudaType<ElemType::kBF16>, KmeansTuning, 1>(p, plan);
}
template <>
Status PlanKmeansStepChecked<ElemType::kF16, 1>(const DeviceKmeans& p, KmeansStepPlan* plan) {
  return PlanKmeansStepWith<CudaType<ElemType::kF16>, KmeansTuning, 1>(p, plan);
}

}  // namespace tsm2

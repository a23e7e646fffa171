// The k-means step with fault injection (CHECK 2) for each element type
// (launch_step.cuh, kernels/kmeans_row_check.cuh): its own translation unit,
// so that the checked step's kernels hold no injection code and build in
// parallel with it.
#include "ffi/common/cuda_types.cuh"
#include "ffi/kmeans/launch_step.cuh"

namespace tsm2 {

TSM2_KMEANS_STEP_CHECKED(2)

}  // namespace tsm2

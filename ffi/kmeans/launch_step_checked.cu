// The row-checked k-means step (CHECK 1) for each
// element type (launch_step.cuh, kernels/kmeans_row_check.cuh).
#include "ffi/common/cuda_types.cuh"
#include "ffi/kmeans/launch_step.cuh"

namespace tsm2 {

TSM2_KMEANS_STEP_CHECKED(1)

}  // namespace tsm2

// The planner of tsm2_matmul: where the kernel for a call is chosen, once.
//
// The router (jax_tsm2/routing.py) has already picked the family; from it
// and the problem, PlanMatmulWith resolves one kernel instantiation and
// stores its launch function in the MatmulPlan, which LaunchMatmul then runs
// as it is:
//
//   TSM2S  -> SplitLauncher::PlanS (launch_split.cuh): the split plan
//             (split_plan.h SPlan), then the tensor-map, cluster,
//             tensor-core or CUDA-core kernel (kernels/small_left*.cuh)
//   TSM2T  -> SplitLauncher::PlanT: the split plan (TPlan), then the
//             tensor-core tile (kernels/tn_mma, tn_tf32, tn_half.cuh) or the
//             CUDA-core kernel (kernels/tn.cuh)
//   TSM2R,
//   TSM2L  -> PlanTiles (launch_tiles.cuh): the n-tile t2 = NTileFor(n),
//             then the R tile, the L tile or TSM2L's row-per-thread kernel
//             (tiles.h; kernels/tsm2.cuh, kernels/row_per_thread.cuh)
//
// Tune bundles the families' tuning structs (split_plan.h): production
// instantiates MatmulTuning, the lab programs their own variants.
#pragma once

#include "ffi/common/status.h"
#include "ffi/matmul/launch_split.cuh"
#include "ffi/matmul/launch_tiles.cuh"
#include "ffi/matmul/launcher.h"

namespace tsm2 {

struct MatmulTuning {
  using S = STuning;
  using T = TTuning;
};

template <typename T, typename Tune = MatmulTuning>
Status PlanMatmulWith(const DeviceMatmul& p, Kernel family, MatmulPlan* plan) {
  *plan = MatmulPlan{};
  plan->family = family;
  switch (family) {
    case Kernel::kTsm2s:
    case Kernel::kTsm2t:
      return SplitLauncher<T, typename Tune::S, typename Tune::T>::Plan(p, family, plan);
    case Kernel::kTsm2r:
    case Kernel::kTsm2l:
      return PlanTiles<T>(p, family, plan);
  }
  return TSM2_FAIL(cudaErrorInvalidValue, "unknown kernel family");
}

}  // namespace tsm2

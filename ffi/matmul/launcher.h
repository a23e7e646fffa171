// The host side of tsm2_matmul without XLA: the problem as the launchers
// take it (DeviceMatmul), the plan PlanMatmul makes for it (MatmulPlan), and
// LaunchMatmul, which runs that plan as it is. The FFI handler
// (cuda_handler.cc) and the lab programs (benchmarks/lab/) drive the kernels
// through these three.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "ffi/common/elem_type.h"
#include "ffi/common/status.h"
#include "ffi/matmul/kinds.h"
#include "ffi/matmul/split_plan.h"

namespace tsm2 {

// C[batch] = op(A[batch]) @ op(B[batch]), row-major, with op() given by
// `layout` (kinds.h); a batch stride of 0 shares that operand across the
// batch. C is in the operands' type, or f32 when out_f32 (bf16/f16 operands
// only). `workspace` holds the partial sums of contractions split between
// blocks; a smaller one makes the plan split less (never wrong, only slower).
struct DeviceMatmul {
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  int64_t batch = 1, m = 0, k = 0, n = 0;
  int64_t a_batch_stride = 0, b_batch_stride = 0;
  Layout layout = Layout::kNN;
  bool out_f32 = false;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

struct MatmulPlan;
// A resolved launch: builds its kernel's arguments from the problem and the
// plan and launches it on `stream`, with no further choice to make.
using MatmulLaunchFn = Status (*)(const DeviceMatmul& p, const MatmulPlan& plan,
                                  cudaStream_t stream);

// Everything a launch needs, decided once by PlanMatmul.
struct MatmulPlan {
  Kernel family = Kernel::kTsm2r;   // as the router chose it
  MatmulLaunchFn launch = nullptr;  // the kernel that computes C (or the split partial sums)
  MatmulLaunchFn finish = nullptr;  // S, T with splits: the pass that adds them; else null
  const char* kernel_name = "";     // the kernel `launch` runs, for messages and the lab
  int sm_count = 0;                 // of the device planned for
  int blocks = 0;                   // grid size (R, L: persistent)
  int n_tile = 0;                   // R, L: t2, columns of B and C per block (tiles.h kNTiles)
  int64_t units = 0;                // R, L: (tile, k-chunk) work units split evenly among blocks
  int threads = 0;                  // R, L: threads per block
  int stages = 0;                   // R, L: depth of the A ring, derived from the device
  int smem_bytes = 0;               // R, L: dynamic shared memory per block
  SplitPlan split;                  // S, T: output tiles and contraction splits (split_plan.h)
  bool vec_ok = false;              // S, T: the operands allow the kernel's 16-byte copies
  bool b_window = false;            // S: B's rows copied in 16-byte windows (small_left.cuh)
  // The row stream (kernels/row_stream.cuh): k per split, row groups per
  // split, rows between rows of one alignment (units and split.splits above).
  int64_t k_chunk = 0, row_groups = 0;
  int row_period = 1;
  size_t workspace_bytes = 0;  // of p.workspace the launch uses
};

// Plans problem p (m, k, n >= 1) of element type E for kernel family
// `family` on the current device (plan.cuh; defined per element type in
// launch_<type>.cu).
template <ElemType E>
Status PlanMatmul(const DeviceMatmul& p, Kernel family, MatmulPlan* plan);
template <>
Status PlanMatmul<ElemType::kF32>(const DeviceMatmul&, Kernel, MatmulPlan*);
template <>
Status PlanMatmul<ElemType::kF64>(const DeviceMatmul&, Kernel, MatmulPlan*);
template <>
Status PlanMatmul<ElemType::kBF16>(const DeviceMatmul&, Kernel, MatmulPlan*);
template <>
Status PlanMatmul<ElemType::kF16>(const DeviceMatmul&, Kernel, MatmulPlan*);

// Runs `plan` for the problem it was made for, on `stream`.
inline Status LaunchMatmul(const DeviceMatmul& p, const MatmulPlan& plan, cudaStream_t stream) {
  if (plan.launch == nullptr) {
    return TSM2_FAIL(cudaErrorInvalidValue, "LaunchMatmul: the plan has no kernel");
  }
  if (plan.workspace_bytes > p.workspace_bytes ||
      (plan.workspace_bytes > 0 && p.workspace == nullptr)) {
    return TSM2_FAIL(cudaErrorInvalidValue, "LaunchMatmul: the workspace is smaller than planned");
  }
  TSM2_RETURN_IF_ERROR(plan.launch(p, plan, stream));
  return plan.finish != nullptr ? plan.finish(p, plan, stream) : Status{};
}

}  // namespace tsm2

// Host-side entry points for the CUDA kernels. Nothing here depends on XLA,
// so the kernels can be driven from any C++ (the FFI handlers in
// cuda_handlers.cc are one user).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "ffi/matmul/kinds.h"

namespace tsm2 {

// C[batch] = op(A[batch]) @ op(B[batch]), row-major, with op() given by
// `layout` (matmul_kinds.h); a batch stride of 0 shares that operand across
// the batch. C is `type` unless out_f32 (bf16/f16 inputs only).
struct DeviceMatmul {
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  int64_t batch = 1, m = 0, k = 0, n = 0;
  int64_t a_batch_stride = 0, b_batch_stride = 0;
  ElemType type = ElemType::kF32;
  Layout layout = Layout::kNN;
  bool out_f32 = false;
};

// How one launch is laid out: filled by PlanMatmul, consumed by LaunchMatmul.
// Kept separate so the handler can allocate the workspace in between.
struct MatmulPlan {
  Kernel family = Kernel::kTsm2r;  // as chosen by the router
  int n_tile = 0;                  // R, L: t2, columns of B and C per block (power of two <= 64)
  int blocks = 0;                  // grid size (R, L: persistent)
  int64_t units = 0;               // R, L: (tile, k-chunk) work units split evenly among blocks
  int64_t splits = 1;              // S, T: contraction ranges per output tile (split_plans.h)
  int64_t split_len = 0;           // S, T: contraction rows per split
  size_t workspace_bytes = 0;      // partial sums of tiles split between blocks
};

// Fills `plan` for problem `p` (m, k, n >= 1) given a workspace of
// `workspace_capacity` bytes (see PartialBytesPerBlock). Queries the current
// device.
cudaError_t PlanMatmul(const DeviceMatmul& p, Kernel family, size_t workspace_capacity,
                       MatmulPlan* plan);

// Launches the product on `stream`; `workspace` must hold plan.workspace_bytes.
cudaError_t LaunchMatmul(const DeviceMatmul& p, const MatmulPlan& plan, void* workspace,
                         cudaStream_t stream);

// Reads `bytes` bytes at `x` once with 16-byte loads and writes one XOR word
// per block to out[0..blocks): the bandwidth ceiling of the benchmark harness.
cudaError_t LaunchStreamRead(const void* x, int64_t bytes, uint32_t* out, int64_t blocks,
                             cudaStream_t stream);

// Writes the GPU's %globaltimer (ns) to out[0] (low word) and out[1] (high
// word) once every earlier kernel on `stream` is done: the harness's timer.
cudaError_t LaunchDeviceClock(uint32_t* out, cudaStream_t stream);

}  // namespace tsm2

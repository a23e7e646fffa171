// The ABFT repair on the device: C[:, j] = A @ B[:, j] (accumulated in Acc,
// rounded to T) when a device-side flag says so, with no host round trip.
//
// XLA's GPU runtime runs a lax.cond by copying its predicate to the host and
// waiting; these two kernels read the flag themselves and return at once when
// it is 0, so a clean product pays two launches and nothing else.
// - AbftRepairRecomputeKernel: a warp per row (lanes along k, coalesced), B's
//   column staged in shared memory in chunks; writes the old column, the
//   recomputed one (exact) and |A||B[:, j]| (scale, for the caller's
//   per-entry rounding bound), and one flag per block: its rows came out
//   finite. Persistent grid (RepairBlocks), so the flags are few.
// - AbftRepairWriteKernel: every block reads all the flags, and writes the
//   column only if every row is finite (a NaN or Inf recomputation leaves C
//   as it was: the fault is then reported uncorrectable).
// Speed matters little (it runs only on a fault); the order of every sum is
// fixed (lane-strided, then a shuffle butterfly), so results are reproducible.
#pragma once

#include <cstdint>

#include "ffi/abft/plan.h"
#include "ffi/common/kernel_utils.cuh"
#include "ffi/common/pdl.cuh"

namespace tsm2 {

struct RepairArgs {
  const void* flag;  // s32 or pred scalar
  bool flag_bool;
  const int32_t* j;   // s32 scalar: the column
  const void* a;      // [m, k] T
  const void* b;      // [k, n] T
  const void* c;      // [m, n] T (the same buffer as c_out when XLA aliased them)
  void* c_out;        // [m, n] T
  void* old_col;      // [m] T
  void* exact;        // [m] Acc
  void* scale;        // [m] Acc
  int32_t* block_ok;  // [blocks]
  int64_t m, k, n;
  int blocks;  // of AbftRepairRecomputeKernel
};

// Whether to repair, and which column; the same answer for the whole grid.
__device__ __forceinline__ bool RepairWanted(const RepairArgs& p, int64_t* j) {
  const bool flag = p.flag_bool ? *static_cast<const uint8_t*>(p.flag) != 0
                                : *static_cast<const int32_t*>(p.flag) != 0;
  *j = *p.j;
  return flag && *j >= 0 && *j < p.n;
}

template <typename T, typename Acc>
__global__ void __launch_bounds__(kRepairThreads)
    AbftRepairRecomputeKernel(const __grid_constant__ RepairArgs p) {
  WaitForPrevious();
  AllowNextToStart();
  int64_t j = 0;
  if (!RepairWanted(p, &j)) return;
  __shared__ Acc bcol[kRepairChunk];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const T* a = static_cast<const T*>(p.a);
  const T* b = static_cast<const T*>(p.b);
  const T* c = static_cast<const T*>(p.c);
  bool finite = true;
  // The loop bounds depend on blockIdx only, so __syncthreads is safe inside.
  for (int64_t g = blockIdx.x; g * kRepairRowsPerBlock < p.m; g += gridDim.x) {
    const int64_t row0 = g * kRepairRowsPerBlock + warp * kRepairRowsPerWarp;
    Acc ex[kRepairRowsPerWarp], sc[kRepairRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRepairRowsPerWarp; ++r) ex[r] = sc[r] = 0;
    for (int64_t k0 = 0; k0 < p.k; k0 += kRepairChunk) {
      const int len = static_cast<int>(min(static_cast<int64_t>(kRepairChunk), p.k - k0));
      __syncthreads();  // the previous chunk is no longer read
      for (int t = threadIdx.x; t < len; t += kRepairThreads) {
        bcol[t] = Widen<Acc>(b[(k0 + t) * p.n + j]);
      }
      __syncthreads();
#pragma unroll
      for (int r = 0; r < kRepairRowsPerWarp; ++r) {
        const int64_t i = row0 + r;
        if (i >= p.m) break;
        const T* a_row = a + i * p.k + k0;
        for (int t = lane; t < len; t += 32) {
          const Acc x = Widen<Acc>(a_row[t]), y = bcol[t];
          ex[r] = fma(x, y, ex[r]);
          sc[r] = fma(fabs(x), fabs(y), sc[r]);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kRepairRowsPerWarp; ++r) {
#pragma unroll
      for (int d = 16; d > 0; d /= 2) {
        ex[r] += __shfl_xor_sync(0xffffffffu, ex[r], d);
        sc[r] += __shfl_xor_sync(0xffffffffu, sc[r], d);
      }
      const int64_t i = row0 + r;
      if (i < p.m) {
        finite = finite && isfinite(ex[r]);
        if (lane == 0) {
          static_cast<T*>(p.old_col)[i] = c[i * p.n + j];
          static_cast<Acc*>(p.exact)[i] = ex[r];
          static_cast<Acc*>(p.scale)[i] = sc[r];
        }
      }
    }
  }
  finite = __syncthreads_and(finite);
  if (threadIdx.x == 0) p.block_ok[blockIdx.x] = finite ? 1 : 0;
}

template <typename T, typename Acc>
__global__ void __launch_bounds__(kRepairThreads)
    AbftRepairWriteKernel(const __grid_constant__ RepairArgs p) {
  WaitForPrevious();
  AllowNextToStart();
  int64_t j = 0;
  if (!RepairWanted(p, &j)) return;
  bool ok = true;
  for (int t = threadIdx.x; t < p.blocks; t += kRepairThreads) ok = ok && p.block_ok[t] != 0;
  if (!__syncthreads_and(ok)) return;
  const Acc* exact = static_cast<const Acc*>(p.exact);
  T* c = static_cast<T*>(p.c_out);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kRepairThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kRepairThreads + threadIdx.x; i < p.m;
       i += stride) {
    FromAcc(exact[i], c + i * p.n + j);
  }
}

}  // namespace tsm2

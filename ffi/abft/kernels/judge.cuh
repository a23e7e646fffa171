// The ABFT judgement after the checksum pass over C, on the device: which
// columns fail, the repair of a single failing one, and the verdict, in four
// small kernels instead of the dozen XLA fusions (about 2.5 us each on an
// H100) that jax_tsm2.abft.correct lowers to.
// - AbftFlagKernel (one block): a column fails when a residual exceeds its
//   threshold or is not finite; counts the failing columns and finds the
//   worst one (largest residual over threshold, first on ties, non-finite
//   counting as infinite), as correct() does with jnp ops.
// - repair_column.cuh's two kernels, reading that state: recompute the worst
//   column from A and B when exactly one failed, and write it into C.
// - AbftVerdictKernel (one block): compares the recomputed column with the
//   old one entry by entry and writes every field of the Verdict.
// The reductions are in a fixed order, so verdicts are reproducible.
#pragma once

#include <cfloat>
#include <cstdint>

#include "ffi/abft/kernels/repair_column.cuh"
#include "ffi/abft/verdict_out.h"
#include "ffi/common/kernel_utils.cuh"
#include "ffi/common/pdl.cuh"

namespace tsm2 {

constexpr int kJudgeThreads = 1024;

// Where the four kernels keep their s32 state (plan.h: JudgeStateSize).
enum JudgeState : int { kJudgeFailing = 0, kJudgeColumn = 1, kJudgeSingle = 2 };

template <typename Acc>
__device__ __forceinline__ Acc TinyOf() {
  return sizeof(Acc) == 8 ? static_cast<Acc>(DBL_MIN) : static_cast<Acc>(FLT_MIN);
}

// Sum of `count` and (max score, its smallest index) over the block, to
// thread 0. Scores are >= 0 or +inf, never NaN.
template <typename Acc>
__device__ __forceinline__ void BlockCountArgmax(int* count, Acc* best, int64_t* at) {
  __shared__ int s_count[kJudgeThreads / 32];
  __shared__ Acc s_best[kJudgeThreads / 32];
  __shared__ int64_t s_at[kJudgeThreads / 32];
  auto merge = [](Acc& b, int64_t& i, Acc ob, int64_t oi) {
    if (ob > b || (ob == b && oi < i)) {
      b = ob;
      i = oi;
    }
  };
  for (int d = 16; d > 0; d /= 2) {
    *count += __shfl_xor_sync(0xffffffffu, *count, d);
    const Acc ob = __shfl_xor_sync(0xffffffffu, *best, d);
    const int64_t oi = __shfl_xor_sync(0xffffffffu, *at, d);
    merge(*best, *at, ob, oi);
  }
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) {
    s_count[warp] = *count;
    s_best[warp] = *best;
    s_at[warp] = *at;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kJudgeThreads / 32; ++w) {
      *count += s_count[w];
      merge(*best, *at, s_best[w], s_at[w]);
    }
  }
}

template <typename Acc>
__global__ void __launch_bounds__(kJudgeThreads)
    AbftFlagKernel(const Acc* __restrict__ resid, const Acc* __restrict__ threshold, int64_t n,
                   int32_t* __restrict__ state) {
  WaitForPrevious();
  AllowNextToStart();
  // kBatch columns' loads are in flight at once: one block waits on L2 a few times, not
  // once per column it owns.
  constexpr int kBatch = 8;
  int count = 0;
  Acc best = -1;
  int64_t at = 0;
  for (int64_t j0 = threadIdx.x; j0 < n; j0 += int64_t{kJudgeThreads} * kBatch) {
    Acc r0[kBatch], r1[kBatch], t[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int64_t j = j0 + int64_t{b} * kJudgeThreads;
      const bool in = j < n;
      r0[b] = in ? fabs(resid[j]) : Acc(0);
      r1[b] = in ? fabs(resid[n + j]) : Acc(0);
      t[b] = in ? threshold[j] : Acc(0);
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int64_t j = j0 + int64_t{b} * kJudgeThreads;
      if (j >= n) break;
      count += !(r0[b] <= t[b] && r1[b] <= t[b]);  // NaN fails
      Acc score = (isnan(r0[b]) || isnan(r1[b])) ? Acc(INFINITY)
                                                 : fmax(r0[b], r1[b]) / fmax(t[b], TinyOf<Acc>());
      if (!isfinite(score)) score = INFINITY;
      if (score > best) {
        best = score;
        at = j;
      }
    }
  }
  BlockCountArgmax(&count, &best, &at);
  if (threadIdx.x == 0) {
    state[kJudgeFailing] = count;
    state[kJudgeColumn] = static_cast<int32_t>(at);
    state[kJudgeSingle] = count == 1;
  }
}

struct VerdictArgs {
  const void* resid;  // [2, n] Acc
  const void* factor;
  const void* floor;  // Acc scalars: entry bound factor * scale + floor
  const void* old_col;
  const void* exact;
  const void* scale;
  const int32_t* state;
  int64_t m, n;
  VerdictOut verdict;
};

template <typename T, typename Acc>
__global__ void __launch_bounds__(kJudgeThreads)
    AbftVerdictKernel(const __grid_constant__ VerdictArgs p) {
  WaitForPrevious();
  AllowNextToStart();
  const int failing = p.state[kJudgeFailing];
  const int64_t j = p.state[kJudgeColumn];
  const bool single = p.state[kJudgeSingle] != 0;
  const T* old_col = static_cast<const T*>(p.old_col);
  const Acc* exact = static_cast<const Acc*>(p.exact);
  const Acc* scale = static_cast<const Acc*>(p.scale);
  const Acc factor = *static_cast<const Acc*>(p.factor), floor = *static_cast<const Acc*>(p.floor);
  int bad = 0;
  Acc worst = -1;
  int64_t at = 0;
  bool finite = true;
  if (single) {  // old_col, exact and scale were written only then
    for (int64_t i = threadIdx.x; i < p.m; i += kJudgeThreads) {
      const Acc diff = Widen<Acc>(old_col[i]) - exact[i];
      bad += !(fabs(diff) <= factor * scale[i] + floor);
      const Acc size = isfinite(diff) ? fabs(diff) : Acc(INFINITY);
      if (size > worst) {
        worst = size;
        at = i;
      }
      finite = finite && isfinite(exact[i]);
    }
  }
  finite = __syncthreads_and(finite);
  BlockCountArgmax(&bad, &worst, &at);
  if (threadIdx.x != 0) return;
  // As jax_tsm2.abft.correct assembles it from the same pieces.
  const bool nothing = failing == 0;
  const bool fixed = single && finite;
  const Acc residual = p.n > 0 ? static_cast<const Acc*>(p.resid)[j] : Acc(0);
  const Acc located = single && p.m > 0 ? Widen<Acc>(old_col[at]) - exact[at] : Acc(0);
  const VerdictOut& v = p.verdict;
  *v.errors_detected = single ? max(bad, 1) : failing;
  *v.corrected = fixed;
  *v.row = nothing || !single ? -1 : static_cast<int32_t>(at);
  *v.col = nothing ? -1 : static_cast<int32_t>(j);
  *static_cast<Acc*>(v.magnitude) = nothing ? Acc(0) : single ? located : residual;
  *v.uncorrectable = !nothing && !fixed;
}

}  // namespace tsm2

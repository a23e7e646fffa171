// The two kernels that follow the statistics-gathering row stream in
// tsm2_abft_rows (ffi/abft/row_check.h has the scheme):
//
// - AbftRowCheckKernel, a thread per row: adds the row's splits in split
//   order (as the plain product's split sum does), stores C's row, and
//   compares sum_j C_ij with the row's checksum against its threshold. A
//   flagged row is appended to the state's list. It replaces the plain
//   product's split sum, so a clean check costs no pass of its own.
// - AbftRowRepairKernel, a block per listed row: recomputes the row from A
//   and B (f64 sums for f32, bf16 and f16 data), stores it, and counts the
//   entries that had moved past their worst-case bound. The last block to
//   finish writes the verdict. On a clean product every block returns at
//   once and block 0 writes a clean verdict.
#pragma once

#include <cstdint>
#include <cstring>

#include "ffi/abft/row_check.h"
#include "ffi/abft/verdict_out.h"
#include "ffi/common/kernel_utils.cuh"
#include "ffi/common/pdl.cuh"
#include "ffi/matmul/kernels/row_stream.cuh"

namespace tsm2 {

constexpr int kRowCheckThreads = 256;
constexpr int kRowRepairThreads = 256;

struct RowCheckArgs {
  const void* partials;     // [splits][m][n] sums (Acc): C's row
  const void* stats;        // [splits][m][kRowStats] (Acc)
  const void* col_weights;  // [n] powers of two (Acc)
  void* c;                  // [m, n] (Acc: f32 for f32, bf16 and f16 data; f64 for f64)
  double model[kRowModelLen];
  RowCheckState* state;
  int64_t m, n, splits;
  int64_t inject_row, inject_col;  // kInject: flip bit inject_bit of C[row, col] as it is stored
  int inject_bit;
};

template <typename Acc>
__device__ __forceinline__ Acc FlipBit(Acc x, int bit) {
  using Bits = std::conditional_t<sizeof(Acc) == 8, unsigned long long, unsigned int>;
  Bits u;
  memcpy(&u, &x, sizeof(u));
  u ^= Bits{1} << bit;
  memcpy(&x, &u, sizeof(u));
  return x;
}

// N: the row stream's width (n <= N).
template <typename Acc, int N, bool kInject>
__global__ void __launch_bounds__(kRowCheckThreads)
    AbftRowCheckKernel(const __grid_constant__ RowCheckArgs p) {
  const Acc* part = static_cast<const Acc*>(p.partials);
  const Acc* stat = static_cast<const Acc*>(p.stats);
  const Acc* wt = static_cast<const Acc*>(p.col_weights);
  Acc* c = static_cast<Acc*>(p.c);
  const int64_t n1 = p.n, split_stride = p.m * n1, stat_stride = p.m * kRowStats;
  WaitForPrevious();        // a programmatic dependent of the row stream
  AllowNextToStart();       // the repair waits for this grid all the same
  double weight_sum = 2.0;  // RowThreshold's: the checksum's two parts weigh 1
  for (int64_t j = 0; j < p.n; ++j) weight_sum += Fmax1(static_cast<double>(wt[j]));
  for (int64_t i = blockIdx.x * int64_t{kRowCheckThreads} + threadIdx.x; i < p.m;
       i += int64_t{gridDim.x} * kRowCheckThreads) {
    Acc v[N];
    Acc st[kRowStatsUsed];
#pragma unroll
    for (int j = 0; j < N; ++j) v[j] = j < n1 ? part[i * n1 + j] : Acc(0);
#pragma unroll
    for (int q = 0; q < kRowStatsUsed; ++q) st[q] = stat[i * kRowStats + q];
    for (int64_t s = 1; s < p.splits; ++s) {
#pragma unroll
      for (int j = 0; j < N; ++j) {
        if (j < n1) v[j] += part[s * split_stride + i * n1 + j];
      }
#pragma unroll
      for (int q = 0; q < kRowStatsUsed; ++q) st[q] += stat[s * stat_stride + i * kRowStats + q];
    }
    // The row weighted as its checksum (powers of two: exact), in f64.
    double sum = 0.0, c_abs = 0.0, c_sq = 0.0;
    const double ch =
        static_cast<double>(st[kRowStatCheckHi]) + static_cast<double>(st[kRowStatCheckLo]);
#pragma unroll
    for (int j = 0; j < N; ++j) {
      if (j < p.n) {
        Acc x = v[j];
        if (kInject && i == p.inject_row && j == p.inject_col) x = FlipBit(x, p.inject_bit);
        c[i * p.n + j] = x;
        const double d = static_cast<double>(x) * static_cast<double>(wt[j]);
        sum += d;
        c_abs += Fabs(d);
        c_sq += d * d;
      }
    }
    const double t = RowThreshold(p.model, st[kRowStatAbs], st[kRowStatAbsCheck], st[kRowStatSq],
                                  c_abs, c_sq, ch, weight_sum);
    if (!(Fabs(sum - ch) <= t)) {
      const int slot = atomicAdd(&p.state->flagged, 1);
      if (slot < kRowCheckMaxRows) p.state->rows[slot] = static_cast<int32_t>(i);
    }
  }
}

struct RowRepairArgs {
  const void* a;  // [m, k]
  const void* b;  // [k, n], or [n, k] when b_t
  void* c;        // [m, n] (Acc)
  double model[kRowModelLen];
  RowCheckState* state;
  int64_t m, k, n;
  bool b_t;
  VerdictOut verdict;
};

template <typename Acc>
__device__ void WriteRowVerdict(const VerdictOut& v, int32_t errors, bool corrected, int32_t row,
                                int32_t col, double magnitude, bool uncorrectable) {
  *v.errors_detected = errors;
  *v.corrected = corrected;
  *v.row = row;
  *v.col = col;
  *static_cast<Acc*>(v.magnitude) = static_cast<Acc>(magnitude);
  *v.uncorrectable = uncorrectable;
}

// Adds v over the block; every thread gets the sum. `scratch` holds a value
// per warp.
__device__ __forceinline__ double BlockSum(double v, double* scratch) {
  for (int o = 16; o >= 1; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // scratch is free
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  double s = 0.0;
  for (int w = 0; w < kRowRepairThreads / 32; ++w) s += scratch[w];
  return s;
}

// N: the row stream's width (n <= N).
template <typename T, int N>
__global__ void __launch_bounds__(kRowRepairThreads)
    AbftRowRepairKernel(const __grid_constant__ RowRepairArgs p) {
  using Acc = AccType<T>;
  __shared__ double scratch[kRowRepairThreads / 32];
  __shared__ double exact[N], scale[N];
  WaitForPrevious();  // a programmatic dependent of the check
  RowCheckState* s = p.state;
  const int flagged = *reinterpret_cast<volatile int32_t*>(&s->flagged);
  if (flagged == 0 || flagged > kRowCheckMaxRows) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      WriteRowVerdict<Acc>(p.verdict, flagged, false, -1, -1, 0.0, flagged != 0);
    }
    return;
  }
  if (static_cast<int>(blockIdx.x) >= flagged) return;
  const int64_t i = s->rows[blockIdx.x];
  const T* a = static_cast<const T*>(p.a) + i * p.k;
  const T* b = static_cast<const T*>(p.b);
  // The row again, in f64 (double-rounding-free for every input type but
  // f64, whose recomputation errs like the product's own, within the bound).
  double sums[N], abs[N];
#pragma unroll
  for (int j = 0; j < N; ++j) sums[j] = abs[j] = 0.0;
  for (int64_t l = threadIdx.x; l < p.k; l += kRowRepairThreads) {
    const double x = static_cast<double>(ToAcc(a[l]));
#pragma unroll
    for (int j = 0; j < N; ++j) {
      if (j < p.n) {
        const double y = static_cast<double>(ToAcc(b[p.b_t ? j * p.k + l : l * p.n + j]));
        sums[j] = Fma(x, y, sums[j]);
        abs[j] = Fma(Fabs(x), Fabs(y), abs[j]);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < N; ++j) {
    if (j < p.n) {
      const double e = BlockSum(sums[j], scratch);
      const double sc = BlockSum(abs[j], scratch);
      if (threadIdx.x == 0) {
        exact[j] = e;
        scale[j] = sc;
      }
    }
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  Acc* c = static_cast<Acc*>(p.c) + i * p.n;
  int32_t faulty = 0, worst = 0;
  double moved = 0.0, worst_ratio = -1.0;
  for (int j = 0; j < p.n; ++j) {
    const Acc fresh = static_cast<Acc>(exact[j]);
    const double old = static_cast<double>(c[j]);
    const double d = old - static_cast<double>(fresh);
    const double bound = p.model[kRowEntryFactor] * scale[j] + p.model[kRowEntryFloor];
    if (!(Fabs(d) <= bound)) ++faulty;
    // Measured against its own bound: columns of other scales round by other amounts.
    const double ratio = EntryMove(d, bound);
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = j;
      moved = d;
    }
    c[j] = fresh;
  }
  s->worst_col[blockIdx.x] = worst;
  s->faulty[blockIdx.x] = faulty;
  s->moved[blockIdx.x] = moved;
  s->ratio[blockIdx.x] = worst_ratio;
  __threadfence();
  if (atomicAdd(&s->repaired, 1) != flagged - 1) return;
  __threadfence();
  // The last repair: every slot is written. Each flagged row holds at least
  // one fault (its entries, or its checksum).
  int32_t errors = 0;
  int best = 0;
  double best_size = -1.0;
  for (int r = 0; r < flagged; ++r) {
    const volatile RowCheckState* v = s;
    const int32_t f = v->faulty[r];
    errors += f > 0 ? f : 1;
    const double size = v->ratio[r];
    // Ties go to the first row, as the CPU reference has it, whatever the order of the slots.
    if (size > best_size || (size == best_size && v->rows[r] < v->rows[best])) {
      best_size = size;
      best = r;
    }
  }
  const volatile RowCheckState* v = s;
  WriteRowVerdict<Acc>(p.verdict, errors, true, v->rows[best], v->worst_col[best], v->moved[best],
                       false);
  s->repaired = 0;
}

}  // namespace tsm2

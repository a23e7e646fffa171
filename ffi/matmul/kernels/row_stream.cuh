// The row stream: C[m, n] = A[m, k] @ B[k, n] (or B[n, k].T) for a skinny
// B, with A read straight from global memory into registers.
//
// A warp takes R rows of A at a time and walks them along k, each lane
// loading 16-byte vectors of every row (a warp's load is 512 contiguous
// bytes of one row) and multiplying each element into the N sums of its
// row against B's row for that k, which the block holds in shared memory.
// There is no staging of A, no barrier while streaming, and one B load
// serves R rows. The N sums of each row are spread over the 32 lanes until
// the rows end; then a butterfly that halves the values at every exchange
// leaves each lane one (or a few) finished sums to store.
//
// Rows of any byte length. A row of `k * sizeof(T)` bytes need not start
// on a 16-byte boundary, so a warp reads the aligned vectors that cover it
// and knows where each element lands from the row's offset `s` within its
// first vector. The R rows a warp takes together are `period` rows apart,
// the distance after which rows start at the same offset again, so one `s`
// serves all of them and B's rows are indexed alike. Only a row's first and
// last vectors hold elements of other rows or of other splits of k; the
// steps that meet them check each element, the others do not.
//
// Splits of k. The block keeps B's rows for one range of k (a split) in
// shared memory, so k is split where B does not fit, and further where m
// alone leaves warps idle; each split's sums go to the workspace and
// split_reduce.cuh adds them in split order. Work units are (split, group
// of R rows), numbered split by split and dealt to blocks in equal
// contiguous ranges, so a block reloads B only when its range crosses into
// the next split.
//
// Row statistics (kStats, for the fused ABFT check of ffi/abft/row_check.h):
// beside B's rows the block stages, per row of B, the weighted sum
// s = sum_j w_j b_j (w_j a power of two per column, which balances columns
// of different scales), split into its rounding to the accumulator type and
// the rest, and the weights of three magnitudes; each row of A accumulates,
// per element, its checksum A_i . s (in two parts, so that s enters without
// its rounding), |a| times sum_j |w_j b_j|, |a| times |s| and a^2 times
// (sum_j (w_j b_j)^2 + s^2): the magnitudes the check's rounding bound needs.
// They are scalars per row, not columns of B, so the instantiation is the
// plain product's width. Sums and statistics always go to the workspace; the
// check's kernel adds the splits.
#pragma once

#include <cstdint>
#include <cstring>

#include "ffi/common/kernel_utils.cuh"
#include "ffi/matmul/row_stream_plan.h"

namespace tsm2 {

struct RowStreamArgs {
  const void* a;
  const void* b;
  void* c;
  void* partials;  // [splits][m][n] accumulators when splits > 1 (or kStats)
  int64_t m, k, n;
  int64_t k_chunk;  // elements of k per split (the last split may be shorter)
  int64_t splits;
  int64_t groups;  // row groups per split: ceil(m / (period * R)) * period
  int64_t units;   // splits * groups
  int period;      // rows between two rows that start at the same offset in a vector
  bool b_t;        // B stored [n, k] (layout NT)
  bool out_f32;    // C is f32 although T is bf16/f16
  // kStats only: [splits][m][kRowStats] accumulators of the row statistics,
  // the column weights ([n] powers of two, Acc), and two words the first
  // block zeroes for the check that follows.
  void* stats;
  const void* col_weights;
  int* zero_words;
};

// The row statistics kStats accumulates (see the top of the file).
enum RowStat : int {
  kRowStatAbs = 0,       // sum_l |a_l| sum_j |w_j b_lj|
  kRowStatAbsCheck = 1,  // sum_l |a_l| |s_l|
  kRowStatSq = 2,        // sum_l a_l^2 (sum_j (w_j b_lj)^2 + s_l^2)
  kRowStatCheckHi = 3,   // sum_l a_l hi(s_l): the checksum, first part
  kRowStatCheckLo = 4,   // sum_l a_l lo(s_l): the checksum, the rest
  kRowStatsUsed = 5,
  kRowStats = 8,  // per row in shared memory and the workspace: whole 16-byte units
};
static_assert(kRowStats == kRowStreamStatsPerRow, "the plan sizes the statistics alike");

template <int Bytes>
struct UnitType;
template <>
struct UnitType<4> {
  using type = uint32_t;
};
template <>
struct UnitType<8> {
  using type = uint2;
};
template <>
struct UnitType<16> {
  using type = uint4;
};

// Loads B's row j (row_stream_plan.h RowStreamBLayout) from shared memory.
template <typename T, int N>
__device__ __forceinline__ void LoadBRow(const char* smem, int64_t j, AccType<T> (&out)[N]) {
  constexpr RowStreamBLayout kB(sizeof(T), N);
  using U = typename UnitType<kB.unit>::type;
  const U* p = reinterpret_cast<const U*>(smem) + kB.UnitOf(j);
#pragma unroll
  for (int i = 0; i < kB.units_per_row; ++i) {
    const U raw = p[i];
    memcpy(reinterpret_cast<char*>(out) + i * kB.unit, &raw, kB.unit);
  }
}

// Adds x[0..V) over the warp, halving the values at each exchange: the
// lanes whose `o` bit is set keep the upper half and send the lower. After
// log2(V) exchanges (V <= 32) lane l holds value l >> (5 - log2 V), summed
// over lanes that differ only in the bits exchanged so far, and the rest of
// the exchanges add whole values; for V > 32, lane l ends holding values
// l * V / 32 + i. A fixed order of additions: the results do not depend on
// timing.
template <int V, typename Acc>
__device__ __forceinline__ void ReduceScatter(Acc (&x)[V], int lane) {
  int count = V;
#pragma unroll
  for (int o = 16; o >= 1; o >>= 1) {
    if (count > 1) {
      const bool upper = (lane & o) != 0;
      const int half = count / 2;
#pragma unroll
      for (int i = 0; i < V / 2; ++i) {
        if (i < half) {
          const Acc send = upper ? x[i] : x[i + half];
          const Acc keep = upper ? x[i + half] : x[i];
          x[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
        }
      }
      count = half;
    } else {
      x[0] += __shfl_xor_sync(0xffffffffu, x[0], o);
    }
  }
}

// R rows of A times B's rows in shared memory, for the elements of the
// vectors `av` (a warp step), `first_v` the step's first vector index of
// lane 0. With kChecked, elements outside [0, kc) of the split (the covering
// vectors' bytes of other rows or splits) are skipped.
template <typename T, int N, int R, int U, bool kChecked, bool kStats>
__device__ __forceinline__ void RowStreamStep(const char* bsm, const char* ssm,
                                              const uint4 (&av)[R][U], int64_t first_v, int lane,
                                              int s, int64_t kc, AccType<T> (&acc)[R][N],
                                              AccType<T> (&st)[R][kRowStatsUsed]) {
  using Acc = AccType<T>;
  constexpr int kV = kVec<T>;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    Acc a[R][kV];
#pragma unroll
    for (int r = 0; r < R; ++r) Unpack<T>(av[r][u], a[r]);
    const int64_t j0 = (first_v + u * 32 + lane) * kV - s;
#pragma unroll
    for (int e = 0; e < kV; ++e) {
      const int64_t j = j0 + e;
      if (kChecked && (j < 0 || j >= kc)) continue;
      Acc bv[N];
      LoadBRow<T, N>(bsm, j, bv);
#pragma unroll
      for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int c = 0; c < N; ++c) acc[r][c] = fma(a[r][e], bv[c], acc[r][c]);
      }
      if constexpr (kStats) {
        Acc w[kRowStats];
        LoadBRow<T, kRowStats>(ssm, j, w);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const Acc x = a[r][e], ax = x < Acc(0) ? -x : x;
          st[r][kRowStatAbs] = fma(ax, w[kRowStatAbs], st[r][kRowStatAbs]);
          st[r][kRowStatAbsCheck] = fma(ax, w[kRowStatAbsCheck], st[r][kRowStatAbsCheck]);
          st[r][kRowStatSq] = fma(x * x, w[kRowStatSq], st[r][kRowStatSq]);
          st[r][kRowStatCheckHi] = fma(x, w[kRowStatCheckHi], st[r][kRowStatCheckHi]);
          st[r][kRowStatCheckLo] = fma(x, w[kRowStatCheckLo], st[r][kRowStatCheckLo]);
        }
      }
    }
  }
}

// One instantiation per RowStreamShape (row_stream_plan.h): B's width N, R
// rows per warp, U vectors per row and lane, D steps in flight in registers
// or S stages in a shared-memory ring, M blocks per SM.
template <typename T, int N, int R, int U, int D, int S, int M, bool kStats = false>
__global__ void __launch_bounds__(kRowStreamThreads, M)
    Tsm2RowStreamKernel(const __grid_constant__ RowStreamArgs p) {
  using Acc = AccType<T>;
  constexpr RowStreamBLayout kB(sizeof(T), N);
  constexpr int kRing = RowStreamRingBytes(RowStreamShape{N, R, U, D, S, M});
  constexpr int kV = kVec<T>;
  constexpr int kStepV = 32 * U;  // vectors per row per warp step
  extern __shared__ __align__(16) char smem[];
  __shared__ int next_unit;
  char* bsm = smem + kRing;  // B's rows follow the rings
  // kStats: the rows' statistics follow B's rows of the longest split, laid
  // out as B's rows of width kRowStats are.
  constexpr RowStreamBLayout kS = RowStreamStatsLayout(sizeof(T));
  char* ssm = bsm + RowStreamStatsOffset(kB, p.k_chunk < p.k ? p.k_chunk : p.k);
  // This warp's ring (S > 0): stage, row, u, lane.
  uint4* wring = reinterpret_cast<uint4*>(smem) + (threadIdx.x / 32) * (S * R * U * 32);
  const T* a = static_cast<const T*>(p.a);
  const T* b = static_cast<const T*>(p.b);
  const int lane = threadIdx.x % 32;

  if constexpr (kStats) {
    if (blockIdx.x == 0 && threadIdx.x == 0) p.zero_words[0] = p.zero_words[1] = 0;
  }
  const int64_t u_begin = blockIdx.x * p.units / gridDim.x;
  const int64_t u_end = (blockIdx.x + 1) * p.units / gridDim.x;
  for (int64_t seg = u_begin; seg < u_end;) {
    const int64_t split = seg / p.groups;
    const int64_t seg_end = (split + 1) * p.groups < u_end ? (split + 1) * p.groups : u_end;
    const int64_t k0 = split * p.k_chunk;
    const int64_t kc = p.k - k0 < p.k_chunk ? p.k - k0 : p.k_chunk;

    // B's rows [k0, k0 + kc) into shared memory, zero past n (with kStats,
    // the rows' weighted sums and statistics beside them).
    __syncthreads();  // the previous split's rows are no longer read
    if (threadIdx.x == 0) next_unit = 0;
    const int64_t nb = p.n;
    for (int64_t i = threadIdx.x; i < kc * N; i += kRowStreamThreads) {
      const int64_t j = i / N;
      const int col = static_cast<int>(i % N);
      Acc v = Acc(0);
      if (col < nb) v = ToAcc(b[p.b_t ? col * p.k + k0 + j : (k0 + j) * nb + col]);
      reinterpret_cast<Acc*>(bsm + kB.UnitOf(j) * kB.unit)[col] = v;
    }
    if constexpr (kStats) {
      const Acc* wt = static_cast<const Acc*>(p.col_weights);
      for (int64_t j = threadIdx.x; j < kc; j += kRowStreamThreads) {
        // In f64, and for f64 data in double-double (TwoSum): the row's sum
        // is then kept to about twice the accumulator's precision.
        double hi = 0.0, lo = 0.0, abs = 0.0, sq = 0.0;
        for (int64_t col = 0; col < nb; ++col) {
          const double v = static_cast<double>(
              ToAcc(b[p.b_t ? col * p.k + k0 + j : (k0 + j) * nb + col]) * wt[col]);
          const double s = hi + v, bb = s - hi;
          lo += (hi - (s - bb)) + (v - bb);
          hi = s;
          abs += v < 0.0 ? -v : v;
          sq = fma(v, v, sq);
        }
        const Acc x_hi = static_cast<Acc>(hi);
        const double sum = hi + lo;
        Acc* w = reinterpret_cast<Acc*>(ssm + kS.UnitOf(j) * kS.unit);
        w[kRowStatAbs] = static_cast<Acc>(abs);
        w[kRowStatAbsCheck] = static_cast<Acc>(sum < 0.0 ? -sum : sum);
        w[kRowStatSq] = static_cast<Acc>(fma(sum, sum, sq));
        w[kRowStatCheckHi] = x_hi;
        w[kRowStatCheckLo] = static_cast<Acc>((hi - static_cast<double>(x_hi)) + lo);
        for (int q = kRowStatsUsed; q < kRowStats; ++q) w[q] = Acc(0);
      }
    }
    __syncthreads();

    // Each warp takes the segment's next free unit: units differ in length
    // only at the edges, but warps do not keep pace with each other.
    for (;;) {
      int64_t unit = 0;
      if (lane == 0) unit = seg + atomicAdd(&next_unit, 1);
      unit = __shfl_sync(0xffffffffu, unit, 0);
      if (unit >= seg_end) break;
      const int64_t g = unit - split * p.groups;
      const int64_t row0 = (g / p.period) * p.period * R + g % p.period;
      if (row0 >= p.m) continue;
      // The rows' common offset in their first vector, and their vectors.
      const T* first = a + row0 * p.k + k0;
      const int s = static_cast<int>(reinterpret_cast<uintptr_t>(first) % 16 / sizeof(T));
      const int64_t nv = (s + kc + kV - 1) / kV;
      const uint4* rows[R];
      bool valid[R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int64_t row = row0 + r * int64_t{p.period};
        valid[r] = row < p.m;
        rows[r] = reinterpret_cast<const uint4*>(a + (valid[r] ? row : row0) * p.k + k0 - s);
      }
      // Steps whose vectors all lie inside the split's range of every row.
      const int64_t full_lo = s > 0 ? 1 : 0;
      const int64_t full_hi = (s + kc) / kV - 1;  // last vector ending inside the range
      const int64_t steps = (nv + kStepV - 1) / kStepV;

      Acc acc[R][N];
      InitSums(acc, p.k);
      Acc st[R][kRowStatsUsed] = {};
      auto step_of = [&](int64_t step, const uint4(&av)[R][U]) {
        const int64_t v0 = step * kStepV;
        if (v0 >= full_lo && v0 + kStepV - 1 <= full_hi) {
          RowStreamStep<T, N, R, U, false, kStats>(bsm, ssm, av, v0, lane, s, kc, acc, st);
        } else {
          RowStreamStep<T, N, R, U, true, kStats>(bsm, ssm, av, v0, lane, s, kc, acc, st);
        }
      };
      if constexpr (S > 0) {
        // A ring of S stages in shared memory filled by cp.async: each lane
        // reads back only the vectors it copied, so no barrier is needed.
        auto issue = [&](int64_t step) {
          uint4* slot = wring + (step % S) * (R * U * 32);
#pragma unroll
          for (int u = 0; u < U; ++u) {
            const int64_t v = step * kStepV + u * 32 + lane;
#pragma unroll
            for (int r = 0; r < R; ++r) {
              const bool ok = valid[r] && v < nv;
              CpAsync16(slot + (r * U + u) * 32 + lane, ok ? rows[r] + v : rows[0], ok);
            }
          }
        };
#pragma unroll
        for (int d = 0; d < S - 1; ++d) {
          if (d < steps) issue(d);
          CpAsyncCommit();
        }
        for (int64_t step = 0; step < steps; ++step) {
          if (step + S - 1 < steps) issue(step + S - 1);
          CpAsyncCommit();
          CpAsyncWait<S - 1>();
          const uint4* slot = wring + (step % S) * (R * U * 32);
          uint4 av[R][U];
#pragma unroll
          for (int r = 0; r < R; ++r) {
#pragma unroll
            for (int u = 0; u < U; ++u) av[r][u] = slot[(r * U + u) * 32 + lane];
          }
          step_of(step, av);
        }
      } else {
        // A ring of D + 1 steps in registers: the loads of the next D steps
        // are in flight while a step is multiplied.
        uint4 ring[D + 1][R][U];
        auto load = [&](int64_t step, uint4(&dst)[R][U]) {
#pragma unroll
          for (int u = 0; u < U; ++u) {
            const int64_t v = step * kStepV + u * 32 + lane;
#pragma unroll
            for (int r = 0; r < R; ++r) {
              dst[r][u] = valid[r] && v < nv ? LoadStream16(rows[r] + v) : make_uint4(0, 0, 0, 0);
            }
          }
        };
#pragma unroll
        for (int d = 0; d < D; ++d) load(d, ring[d]);
        for (int64_t step0 = 0; step0 < steps; step0 += D + 1) {
#pragma unroll
          for (int q = 0; q <= D; ++q) {
            const int64_t step = step0 + q;
            if (step < steps) {
              if (step + D < steps) load(step + D, ring[(q + D) % (D + 1)]);
              step_of(step, ring[q]);
            }
          }
        }
      }

      constexpr int kValues = R * N;
      Acc x[kValues];
#pragma unroll
      for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int c = 0; c < N; ++c) x[r * N + c] = acc[r][c];
      }
      ReduceScatter<kValues>(x, lane);
      if constexpr (kStats) {
        // Every lane takes part in the butterfly; the lanes that hold a
        // finished statistic store it.
        constexpr int kStatValues = R * kRowStats;
        Acc y[kStatValues];
#pragma unroll
        for (int r = 0; r < R; ++r) {
#pragma unroll
          for (int q = 0; q < kRowStats; ++q) {
            y[r * kRowStats + q] = q < kRowStatsUsed ? st[r][q] : Acc(0);
          }
        }
        ReduceScatter<kStatValues>(y, lane);
        constexpr int kStatShare = kStatValues >= 32 ? 1 : 32 / kStatValues;
        static_assert(kStatValues <= 32, "one statistic per lane at most");
        const int idx = lane / kStatShare, r = idx / kRowStats, q = idx % kRowStats;
        const int64_t row = row0 + r * int64_t{p.period};
        if (lane % kStatShare == 0 && q < kRowStatsUsed && row < p.m) {
          static_cast<Acc*>(p.stats)[(split * p.m + row) * kRowStats + q] = y[0];
        }
      }
      constexpr int kHeld = kValues > 32 ? kValues / 32 : 1;
      constexpr int kShare = kValues >= 32 ? 1 : 32 / kValues;  // lanes holding one value
      if (lane % kShare != 0) continue;
#pragma unroll
      for (int i = 0; i < kHeld; ++i) {
        const int idx = kValues > 32 ? lane * kHeld + i : lane / kShare;
        const int r = idx / N, col = idx % N;
        const int64_t row = row0 + r * int64_t{p.period};
        if (row >= p.m || col >= p.n) continue;
        const int64_t o = row * p.n + col;
        if (p.splits > 1 || kStats) {
          static_cast<Acc*>(p.partials)[split * p.m * p.n + o] = x[i];
        } else if (p.out_f32) {
          static_cast<float*>(p.c)[o] = static_cast<float>(x[i]);
        } else {
          FromAcc(x[i], static_cast<T*>(p.c) + o);
        }
      }
    }
    seg = seg_end;
  }
}

}  // namespace tsm2

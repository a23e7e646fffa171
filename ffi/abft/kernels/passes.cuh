// The ABFT checksum passes (ffi/abft/checksum.h) at the read ceiling: the
// pass over A and the pass over B of tsm2_abft_encode, the pass over C of
// tsm2_abft_verify. Each reads its matrix once, as tsm2_colsums does
// (colsums.cuh: a lane per 16-byte vector of columns, kColsumsRowsInFlight
// rows in flight per thread, warps on interleaved rows, splits of rows over
// the blocks), and sums per column, in f64 (double-double for f64 data):
//
// - pass A (m x k): the signed sums s e_i a_il and s e_i rho_i a_il, s|a|,
//   (s a)^2 and the subnormal mass; finished into A's column values
//   (kAbftAStatSlots f64 per column), the pass over B's weights;
// - pass B (k x n): the reference checksums sum_l v_l b_lj, the terms'
//   1-norm, their squares and the flush mass; finished into `stats`;
// - pass C (m x n): the signed sums of C, s|c| and the squares of C (or of
//   its half-ulps for bf16/f16); finished into the residuals and thresholds.
//
// A row's weights come from its index (RowWeights: a hash and a ramp) in
// passes A and C, computed once per warp for rows of 32 lanes (each lane
// takes its row's by shuffle) and per thread otherwise; in pass B from A's
// column values: copied into shared memory with the row's data (rows of 32
// lanes), so that they arrive with it rather than an L2 round trip after it,
// or else read per row. Slots of a warp are added by a fixed butterfly, warps
// in warp order, splits in split order by a finish kernel (a warp per unit of
// 32 columns' slots for up to kAbftFinishUnitSplits splits, else a warp per
// column): results depend on the plan alone.
// The final values are written by whoever holds a column's total: the pass
// kernel itself when rows are not split, else the finish kernel.
//
// kInject (pass C only, tsm2_abft_verify_inject): the lane that loads
// C[inject_row, inject_col] flips bit inject_bit of it in its registers and
// stores the value back, before summing: a fault inside the kernel. The
// production instantiation (false) compiles none of it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "ffi/abft/checksum.h"
#include "ffi/abft/plan.h"
#include "ffi/common/kernel_utils.cuh"
#include "ffi/common/pdl.cuh"

namespace tsm2 {

struct AbftPassArgs {
  const void* data;        // [rows, cols] T: A, B or C
  void* data_out;          // pass C with injection: C, written back (aliases data)
  const double* a_values;  // pass B: A's column values [kAbftAStatSlots][rows]
  double* partials;        // [splits][slots][cols] when splits > 1
  double* a_out;           // pass A: A's column values [kAbftAStatSlots][cols]
  void* stats;             // pass B: result [kStatRows][cols]; pass C: operand (Acc)
  const void* model;       // pass C: [kModelLen] (Acc)
  void* resid;             // pass C: [2][cols] (Acc)
  void* threshold;         // pass C: [cols] (Acc)
  bool acc_f64;            // Acc is double, else float
  int64_t rows, cols;
  double inv_m;  // 1 / m for RowWeights (passes A and C)
  double scale;  // ChecksumScale(m)
  int64_t tile_cols, tiles, splits, split_len;
  int lanes;
  bool vec_ok;  // cols is a whole number of vectors and data is 16-byte aligned
  int64_t inject_row, inject_col;
  int inject_bit;
};

template <typename T>
inline constexpr bool kAbftDD = std::is_same_v<T, double>;

// Scale rows per pass (the signed sums come first, two ExtSums).
template <int kPass>
inline constexpr int kAbftScaleRows = kPass == kAbftPassC ? 2 : 3;

template <typename T>
__device__ __forceinline__ double TinyOfT() {
  if constexpr (std::is_same_v<T, double>) return 0x1p-1022;
  if constexpr (std::is_same_v<T, __half>) return 0x1p-14;
  return 0x1p-126;  // f32, bf16
}

__device__ __forceinline__ double Pow2(int e) {  // exact for e >= -1022
  return __hiloint2double((e + 1023) << 20, 0);
}

// What pass C squares: the entry, or for bf16/f16 half its ulp (HalfUlp in
// checksum.h, from the f32 exponent of the widened value).
template <typename T>
__device__ __forceinline__ double NormTermOf(float xf, double x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>) {
    constexpr int kP = std::is_same_v<T, __half> ? 11 : 8;
    constexpr int kEmin = std::is_same_v<T, __half> ? -14 : -126;
    const unsigned bits = __float_as_uint(xf);
    const int biased = static_cast<int>((bits >> 23) & 0xffu);
    if ((bits & 0x7fffffffu) == 0 || biased == 0xff) return 0.0;
    const int e = biased == 0 ? -127 : biased - 127;
    return Pow2((e > kEmin ? e : kEmin) - kP);
  } else {
    (void)xf;
    return x;
  }
}

// Row i's weights without the scale s: e_i and e_i rho_i (RowWeights's w1 / s and w2 / s,
// exactly, s being a power of two).
struct SignRamp {
  double sign, ramp;
};
__device__ __forceinline__ SignRamp SignRampOf(int64_t row, double inv_m) {
  const double sign = RowSign(row);
  return {sign, sign * (static_cast<double>(row + 1) * inv_m)};
}

// Rows row0 + u * stride (u < U) of this lane's column vector, element by
// element (rows that are not a whole number of vectors); rows at or past
// row_end and columns past cols read as zero.
template <typename T, int U>
__device__ __forceinline__ void LoadPassRows(const AbftPassArgs& p, int64_t row0, int64_t stride,
                                             int64_t row_end, int64_t col, uint4 (&raw)[U]) {
  const T* m = static_cast<const T*>(p.data);
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t row = row0 + u * stride;
    T e[kVec<T>];
#pragma unroll
    for (int c = 0; c < kVec<T>; ++c) {
      e[c] = row < row_end && col + c < p.cols ? m[row * p.cols + col + c] : T(0.0f);
    }
    memcpy(&raw[u], e, sizeof e);
  }
}

// kInject: if C[inject_row, inject_col] is among the loaded values, flip bit
// inject_bit of it there and in memory (the one thread that read it writes it).
template <typename T, int U>
__device__ __forceinline__ void PlantFault(const AbftPassArgs& p, int64_t row0, int64_t stride,
                                           int64_t row_end, int64_t col, uint4 (&raw)[U]) {
  const int64_t at = p.inject_col - col;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t row = row0 + u * stride;
    if (row < row_end && row == p.inject_row && at >= 0 && at < kVec<T>) {
      unsigned char bytes[16];
      memcpy(bytes, &raw[u], 16);
      const int byte = static_cast<int>(at) * static_cast<int>(sizeof(T)) + p.inject_bit / 8;
      bytes[byte] ^= static_cast<unsigned char>(1u << (p.inject_bit % 8));
      memcpy(&raw[u], bytes, 16);
      T e[kVec<T>];
      memcpy(e, &raw[u], sizeof e);
      static_cast<T*>(p.data_out)[row * p.cols + p.inject_col] = e[at];
    }
  }
}

// One column's totals: the two signed sums and the scale rows.
template <typename T, int kPass>
struct PassTotals {
  ExtSum<kAbftDD<T>> sig[2];
  double sc[kAbftScaleRows<kPass>];
};

template <typename Acc>
__device__ __forceinline__ void StoreSplitAcc(ExtSum<true> v, Acc* hi, Acc* lo) {
  v.Normalize();
  *hi = static_cast<Acc>(v.hi);
  *lo = static_cast<Acc>((v.hi - static_cast<double>(*hi)) + v.lo);
}

template <typename Acc>
__device__ __forceinline__ void StoreSplitAcc(ExtSum<false> v, Acc* hi, Acc* lo) {
  *hi = static_cast<Acc>(v.hi);
  *lo = static_cast<Acc>(v.hi - static_cast<double>(*hi));
}

template <typename T, typename Acc>
__device__ __forceinline__ void FinishB(const AbftPassArgs& p, int64_t col,
                                        const PassTotals<T, kAbftPassB>& t) {
  Acc* stats = static_cast<Acc*>(p.stats);
  const int64_t n = p.cols;
  StoreSplitAcc(t.sig[0], &stats[kStatRef1 * n + col], &stats[kStatRef1Lo * n + col]);
  StoreSplitAcc(t.sig[1], &stats[kStatRef2 * n + col], &stats[kStatRef2Lo * n + col]);
  stats[kStatAbs * n + col] = static_cast<Acc>(t.sc[0]);
  stats[kStatNorm * n + col] = static_cast<Acc>(GuardedNorm(t.sc[1], t.sc[0]));
  stats[kStatFlush * n + col] = static_cast<Acc>(t.sc[2]);
}

template <typename T, typename Acc>
__device__ __forceinline__ void FinishC(const AbftPassArgs& p, int64_t col,
                                        const PassTotals<T, kAbftPassC>& t) {
  const Acc* stats = static_cast<const Acc*>(p.stats);
  const Acc* model = static_cast<const Acc*>(p.model);
  const int64_t n = p.cols;
  const double c_abs = t.sc[0];
  const double thr = ColumnThreshold(model, static_cast<double>(stats[kStatAbs * n + col]),
                                     static_cast<double>(stats[kStatNorm * n + col]),
                                     static_cast<double>(stats[kStatFlush * n + col]), c_abs,
                                     GuardedNorm(t.sc[1], c_abs)) /
                     p.scale;
  static_cast<Acc*>(p.threshold)[col] = static_cast<Acc>(thr);
  const int hi_row[2] = {kStatRef1, kStatRef2}, lo_row[2] = {kStatRef1Lo, kStatRef2Lo};
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    ExtSum<kAbftDD<T>> d = t.sig[q];
    d.Normalize();
    double r;
    if (isinf(thr)) {  // a vacuous bound checks finiteness only (VerifyReference)
      r = d.hi * 0.0;
    } else {
      d.Add(-1.0, static_cast<double>(stats[hi_row[q] * n + col]));
      d.Add(-1.0, static_cast<double>(stats[lo_row[q] * n + col]));
      d.Normalize();
      r = d.hi / p.scale;
    }
    static_cast<Acc*>(p.resid)[q * n + col] = static_cast<Acc>(r);
  }
}

// Writes one column's final values (the pass's finish step).
template <typename T, int kPass>
__device__ __forceinline__ void FinishColumn(const AbftPassArgs& p, int64_t col,
                                             PassTotals<T, kPass>& t) {
  if constexpr (kPass == kAbftPassA) {
    const int64_t k = p.cols;
    double* out = p.a_out;
    t.sig[0].Normalize();
    t.sig[1].Normalize();
    out[0 * k + col] = t.sig[0].hi;
    out[1 * k + col] = t.sig[0].lo;
    out[2 * k + col] = t.sig[1].hi;
    out[3 * k + col] = t.sig[1].lo;
    out[4 * k + col] = t.sc[0];
    out[5 * k + col] = GuardedNorm(t.sc[1], t.sc[0]);
    out[6 * k + col] = t.sc[2];
  } else if constexpr (kPass == kAbftPassB) {
    if (p.acc_f64) {
      FinishB<T, double>(p, col, t);
    } else {
      FinishB<T, float>(p, col, t);
    }
  } else {
    if (p.acc_f64) {
      FinishC<T, double>(p, col, t);
    } else {
      FinishC<T, float>(p, col, t);
    }
  }
}

// A column's totals as partial-sum slots: the signed sums (two doubles each
// for double-double), then the scale rows.
template <typename T, int kPass>
inline constexpr int kAbftSlots = AbftPassSlots(static_cast<AbftPass>(kPass), kAbftDD<T>);

template <typename T, int kPass>
__device__ __forceinline__ void ToSlots(const PassTotals<T, kPass>& t,
                                        double (&s)[kAbftSlots<T, kPass>]) {
  int q = 0;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    s[q++] = t.sig[r].hi;
    if constexpr (kAbftDD<T>) s[q++] = t.sig[r].lo;
  }
#pragma unroll
  for (int r = 0; r < kAbftScaleRows<kPass>; ++r) s[q++] = t.sc[r];
}

// Adds slots (another part's totals) into t, as the sums' own merge does.
template <typename T, int kPass>
__device__ __forceinline__ void MergeSlots(PassTotals<T, kPass>& t,
                                           const double (&s)[kAbftSlots<T, kPass>]) {
  int q = 0;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    ExtSum<kAbftDD<T>> o;
    o.hi = s[q++];
    if constexpr (kAbftDD<T>) o.lo = s[q++];
    t.sig[r].Merge(o);
  }
#pragma unroll
  for (int r = 0; r < kAbftScaleRows<kPass>; ++r) t.sc[r] += s[q++];
}

// Rows in flight per thread beyond the ones being added: kAbftStages - 1
// stages of kColsumsRowsInFlight 16-byte rows each, in shared memory (cp.async),
// so that the bytes in flight do not cost registers: the f64 sums leave room
// for two blocks per SM, and 2 x 256 threads x 3 x 64 bytes is ~96 KB in
// flight per SM, several times what the latency of HBM asks for.
constexpr int kAbftStages = 4;
constexpr int kAbftStageBytes =
    kAbftStages * kColsumsRowsInFlight * kColsumsThreads * static_cast<int>(sizeof(uint4));

// Pass B's weights of a row as staged: v1h, v2h, alpha, nu, sub, and for f64
// data (double-double sums) the low parts v1l, v2l after v1h and v2h.
template <typename T>
inline constexpr int kAbftBWeights = kAbftDD<T> ? 7 : 5;

// The global slot (row of A's column values, FinishColumn's order) of staged weight j.
template <typename T>
__device__ __forceinline__ int AbftBWeightSlot(int j) {
  if constexpr (kAbftDD<T>) {
    return j;
  } else {
    return j < 2 ? 2 * j : j + 2;
  }
}

// Pass B's weights ring, after the data stages: for rows of 32 lanes (a warp's
// rows of a stage are its kColsumsRowsInFlight rows), each warp copies its
// rows' weights with the stage's data, so that a row's weights are in shared
// memory when its data is, instead of an L2 round trip per row after it.
template <typename T, int kPass>
constexpr int AbftWeightRingBytes() {
  return kPass == kAbftPassB ? kAbftStages * (kColsumsThreads / 32) * kColsumsRowsInFlight *
                                   kAbftBWeights<T> * static_cast<int>(sizeof(double))
                             : 0;
}

// Dynamic shared memory of a pass: the stages (and pass B's weights ring), or
// (rows not a whole number of vectors: synchronous loads) just the warps'
// reduction buffers, which reuse the stages' memory after the loop.
template <typename T>
constexpr int AbftReduceBytes() {
  return (kColsumsThreads / 32) * 32 * kVec<T> * 8 * (kAbftDD<T> ? 2 : 1);
}
template <typename T, int kPass>
constexpr int AbftPassSmemBytes(bool staged) {
  return staged && kAbftStageBytes + AbftWeightRingBytes<T, kPass>() > AbftReduceBytes<T>()
             ? kAbftStageBytes + AbftWeightRingBytes<T, kPass>()
             : AbftReduceBytes<T>();
}

template <typename T, int kPass, bool kInject>
__global__ void __launch_bounds__(kColsumsThreads)
    AbftPassKernel(const __grid_constant__ AbftPassArgs p) {
  constexpr int U = kColsumsRowsInFlight, V = kVec<T>, S = kAbftSlots<T, kPass>;
  constexpr int kScale = kAbftScaleRows<kPass>;
  // Passes A and C over f32, bf16 and f16 sum without the factor s (a power of two): the
  // products and squares of such values are exact in f64 with or without it and never
  // underflow, so the sums are bitwise the scaled ones, for half the f64 instructions.
  constexpr bool kUnscaled = !kAbftDD<T> && kPass != kAbftPassB;
  extern __shared__ __align__(16) unsigned char abft_smem[];
  WaitForPrevious();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int slots = kColsumsThreads / p.lanes;  // rows a block loads per instruction
  const int slot = threadIdx.x / p.lanes;
  const int64_t tile = blockIdx.x % p.tiles, split = blockIdx.x / p.tiles;
  const int64_t col = tile * p.tile_cols + static_cast<int64_t>(threadIdx.x % p.lanes) * V;
  const int64_t r_begin = split * p.split_len;
  const int64_t r_end = min(p.rows, r_begin + p.split_len);
  const int64_t stride = static_cast<int64_t>(slots);
  const int64_t step = stride * U;
  const double s = p.scale, tiny = TinyOfT<T>();

  ExtSum<kAbftDD<T>> sig[2][V];
  double sc[kScale][V];
#pragma unroll
  for (int e = 0; e < V; ++e) {
#pragma unroll
    for (int r = 0; r < kScale; ++r) sc[r][e] = 0.0;
  }

  // Adds rows base + u * stride (u < U), row u's vector given by row_of(u). Pass B: staged_w (a
  // std::bool_constant) says whether ws holds the rows' weights (kAbftBWeights
  // per row, row u at ws + u * kAbftBWeights), else they come from a_values.
  // Passes A and C: weights_of(u, row) gives the row's SignRamp.
  const float tiny_f = static_cast<float>(tiny);
  auto process = [&](int64_t base, auto row_of, auto staged_w, const double* ws, auto weights_of) {
    bool tiny_seen = false;  // pass A: a zero or subnormal among the rows
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t row = base + u * stride;
      if (row >= r_end) break;  // the rest of this thread's rows are past the split too
      AccType<T> xs[V];
      Unpack<T>(row_of(u), xs);
      if constexpr (kPass == kAbftPassB) {
        double v1h, v1l = 0.0, v2h, v2l = 0.0, alpha, nu, sub;
        if constexpr (decltype(staged_w)::value) {
          const double* w = ws + u * kAbftBWeights<T>;
          if constexpr (kAbftDD<T>) {
            v1h = w[0], v1l = w[1], v2h = w[2], v2l = w[3];
            alpha = w[4], nu = w[5], sub = w[6];
          } else {  // AddExt reads no low parts
            v1h = w[0], v2h = w[1], alpha = w[2], nu = w[3], sub = w[4];
          }
        } else {
          // A's column values for row `row` of B: L1/L2 hits shared by the lanes of a row.
          const double* w = p.a_values;
          const int64_t k = p.rows;
          v1h = __ldg(w + 0 * k + row), v1l = __ldg(w + 1 * k + row);
          v2h = __ldg(w + 2 * k + row), v2l = __ldg(w + 3 * k + row);
          alpha = __ldg(w + 4 * k + row), nu = __ldg(w + 5 * k + row);
          sub = __ldg(w + 6 * k + row);
        }
#pragma unroll
        for (int e = 0; e < V; ++e) {
          const double x = static_cast<double>(xs[e]), ax = Fabs(x);
          sig[0][e].AddExt(v1h, v1l, x);
          sig[1][e].AddExt(v2h, v2l, x);
          sc[0][e] = Fma(alpha, ax, sc[0][e]);
          const double t = nu * x;
          sc[1][e] = Fma(t, t, sc[1][e]);
          sc[2][e] = Fma(sub, ax, sc[2][e]);
          if (ax < tiny) sc[2][e] = Fma(alpha, ax, sc[2][e]);
        }
      } else if constexpr (kUnscaled) {
        // Sums of e_i x, e_i rho_i x, |x| and x^2 (or the half-ulp squared); s and s^2
        // are applied once, after the rows.
        const SignRamp w = weights_of(u, row);
        const double sign = w.sign, ramp = w.ramp;
#pragma unroll
        for (int e = 0; e < V; ++e) {
          const double x = static_cast<double>(xs[e]), ax = Fabs(x);
          sig[0][e].hi = Fma(sign, x, sig[0][e].hi);
          sig[1][e].hi = Fma(ramp, x, sig[1][e].hi);
          sc[0][e] += ax;
          if constexpr (kPass == kAbftPassA) {
            sc[1][e] = Fma(x, x, sc[1][e]);
            tiny_seen |= fabsf(static_cast<float>(xs[e])) < tiny_f;
          } else {
            const double t = NormTermOf<T>(static_cast<float>(xs[e]), x);
            sc[1][e] = Fma(t, t, sc[1][e]);
          }
        }
      } else {
        const SignRamp w = weights_of(u, row);
        const double w1 = s * w.sign, w2 = s * w.ramp;
#pragma unroll
        for (int e = 0; e < V; ++e) {
          const double x = static_cast<double>(xs[e]), ax = Fabs(x);
          sig[0][e].Add(w1, x);
          sig[1][e].Add(w2, x);
          sc[0][e] = Fma(s, ax, sc[0][e]);
          if constexpr (kPass == kAbftPassA) {
            const double t = s * x;
            sc[1][e] = Fma(t, t, sc[1][e]);
            if (ax < tiny) sc[2][e] = Fma(s, ax, sc[2][e]);
          } else {
            const double t = s * NormTermOf<T>(static_cast<float>(xs[e]), x);
            sc[1][e] = Fma(t, t, sc[1][e]);
          }
        }
      }
    }
    // Zeros and subnormals are rare in most data: one vote for all U rows, a branch the
    // warp skips as one. Each column's tiny values are added in row order, as ever.
    if constexpr (kUnscaled && kPass == kAbftPassA) {
      if (__any_sync(__activemask(), tiny_seen)) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
          if (base + u * stride >= r_end) break;
          AccType<T> xs[V];
          Unpack<T>(row_of(u), xs);
#pragma unroll
          for (int e = 0; e < V; ++e) {
            const float af = fabsf(static_cast<float>(xs[e]));
            if (af < tiny_f) sc[2][e] += static_cast<double>(af);
          }
        }
      }
    }
  };

  const int64_t first = r_begin + slot;
  if (p.vec_ok) {
    // Stage i holds rows first + i * step + u * stride; each thread reads back only the
    // slots it filled itself, so no barrier orders the data stages.
    uint4* stage = reinterpret_cast<uint4*>(abft_smem);
    const T* data = static_cast<const T*>(p.data);
    // Pass B's weights ring (rows of 32 lanes): lane c < U * kAbftBWeights of a warp copies
    // weight c % kAbftBWeights of its row c / kAbftBWeights into its warp's slice of the
    // stage, in the stage's group. The lanes of a warp read each other's copies: with
    // every lane on the same rows (slot == warp), a warp's loop is uniform, and
    // __syncwarp orders the copies with the reads.
    constexpr int kW = kPass == kAbftPassB ? kAbftBWeights<T> : 1;
    double* ring = reinterpret_cast<double*>(abft_smem + kAbftStageBytes);
    const int w_u = lane / kW;
    const bool w_copier = w_u < U;
    const int64_t w_src = static_cast<int64_t>(AbftBWeightSlot<T>(lane % kW)) * p.rows +
                          static_cast<int64_t>(w_u) * stride;
    auto run = [&](auto staged_w, auto shared_rows) {
      constexpr bool kStagedW = decltype(staged_w)::value;
      // Rows of 32 lanes (shared_rows): every lane of a warp is on the same rows, so the
      // warp computes their weights once, lane l those of row u = l % U of stage l / U of
      // a batch of 32 / U stages, and each lane takes a row's from its lane by shuffle.
      constexpr int kBatch = 32 / U;
      SignRamp batch{};
      int in_batch = 0;
      auto weights_of = [&](int u, int64_t row) {
        if constexpr (decltype(shared_rows)::value) {
          const double ramp = __shfl_sync(0xffffffffu, batch.ramp, in_batch * U + u);
          const int sign_hi = (__double2hiint(ramp) & static_cast<int>(0x80000000u)) | 0x3ff00000;
          return SignRamp{__hiloint2double(sign_hi, 0), ramp};
        } else {
          return SignRampOf(row, p.inv_m);
        }
      };
      auto issue = [&](int st, int64_t base) {
        if constexpr (kStagedW) {
          if (w_copier) {
            const bool valid = base + w_u * stride < r_end;
            CpAsync8(&ring[(st * (kColsumsThreads / 32) + warp) * U * kW + lane],
                     valid ? p.a_values + w_src + base : p.a_values, valid);
          }
        }
        // A stage whose rows all lie in the split is issued without a test per row (not in
        // pass B, whose registers the weights ring already fills).
        if constexpr (kPass != kAbftPassB) {
          if (col < p.cols && base + (U - 1) * stride < r_end) {
            uint4* dst = &stage[st * U * kColsumsThreads + threadIdx.x];
            const T* src = data + base * p.cols + col;
#pragma unroll
            for (int u = 0; u < U; ++u) {
              CpAsync16(dst + u * kColsumsThreads, src + u * stride * p.cols, true);
            }
            CpAsyncCommit();
            return;
          }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int64_t row = base + u * stride;
          const bool valid = row < r_end && col < p.cols;
          CpAsync16(&stage[(st * U + u) * kColsumsThreads + threadIdx.x],
                    valid ? data + row * p.cols + col : data, valid);
        }
        CpAsyncCommit();
      };
      static_assert((kAbftStages & (kAbftStages - 1)) == 0 && (kBatch & (kBatch - 1)) == 0,
                    "the ring indices wrap by a mask");
#pragma unroll
      for (int st = 0; st < kAbftStages - 1; ++st) issue(st, first + st * step);
      int st = 0;
      for (int64_t base = first; base < r_end; base += step) {
        if constexpr (kStagedW) __syncwarp();  // the warp is done reading the slice refilled next
        issue((st + kAbftStages - 1) & (kAbftStages - 1), base + (kAbftStages - 1) * step);
        if constexpr (decltype(shared_rows)::value) {
          if (in_batch == 0) {
            batch = SignRampOf(base + (lane % U) * stride + (lane / U) * step, p.inv_m);
          }
        }
        CpAsyncWait<kAbftStages - 1>();  // this stage's group has landed (groups land in order)
        if constexpr (kStagedW) __syncwarp();  // and so have the other lanes' weight copies
        // Each row is read from the stage as it is added, so that the stage's rows do not
        // all hold registers at once (the f64 sums leave few to spare).
        uint4* rows = &stage[st * U * kColsumsThreads + threadIdx.x];
        if constexpr (kInject) {
          uint4 cur[U];
#pragma unroll
          for (int u = 0; u < U; ++u) cur[u] = rows[u * kColsumsThreads];
          PlantFault<T, U>(p, base, stride, r_end, col, cur);
#pragma unroll
          for (int u = 0; u < U; ++u) rows[u * kColsumsThreads] = cur[u];
        }
        auto row_of = [&](int u) { return rows[u * kColsumsThreads]; };
        const double* ws = &ring[(st * (kColsumsThreads / 32) + warp) * U * kW];
        process(base, row_of, staged_w, ws, weights_of);
        st = (st + 1) & (kAbftStages - 1);
        in_batch = (in_batch + 1) & (kBatch - 1);
      }
      CpAsyncWait<0>();  // the zero-filled stages past the end, before the memory is reused
    };
    if constexpr (kPass == kAbftPassB) {
      if (p.lanes == 32) {
        run(std::true_type{}, std::false_type{});
      } else {
        run(std::false_type{}, std::false_type{});
      }
    } else {
      if (p.lanes == 32) {
        run(std::false_type{}, std::true_type{});
      } else {
        run(std::false_type{}, std::false_type{});
      }
    }
  } else {
    auto weights_of = [&](int, int64_t row) { return SignRampOf(row, p.inv_m); };
    for (int64_t base = first; base < r_end; base += step) {
      uint4 cur[U];
      LoadPassRows<T, U>(p, base, stride, r_end, col, cur);
      if constexpr (kInject) PlantFault<T, U>(p, base, stride, r_end, col, cur);
      process(base, [&](int u) { return cur[u]; }, std::false_type{}, nullptr, weights_of);
    }
  }
  AllowNextToStart();  // every load of this block has landed: the next kernel may be scheduled
  __syncthreads();     // every thread is done with the stages: the reduction reuses them
  if constexpr (kUnscaled) {
#pragma unroll
    for (int e = 0; e < V; ++e) {
      sig[0][e].hi *= s;
      sig[1][e].hi *= s;
      sc[0][e] *= s;
      sc[1][e] *= s * s;
      if constexpr (kPass == kAbftPassA) sc[2][e] *= s;
    }
  }

  // The slots of a warp (lanes lanes apart) by a butterfly: every lane of a
  // column ends with the same sums.
  for (int off = p.lanes; off < 32; off *= 2) {
#pragma unroll
    for (int e = 0; e < V; ++e) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        ExtSum<kAbftDD<T>> o;
        o.hi = __shfl_xor_sync(0xffffffffu, sig[r][e].hi, off);
        if constexpr (kAbftDD<T>) o.lo = __shfl_xor_sync(0xffffffffu, sig[r][e].lo, off);
        sig[r][e].Merge(o);
      }
#pragma unroll
      for (int r = 0; r < kScale; ++r) sc[r][e] += __shfl_xor_sync(0xffffffffu, sc[r][e], off);
    }
  }

  // Then the warps in order, one row of sums at a time: thread c <
  // tile_cols ends with column c's totals.
  constexpr int W = kColsumsThreads / 32;
  auto red = reinterpret_cast<double (*)[32 * V]>(abft_smem);
  auto red_lo = reinterpret_cast<double (*)[32 * V]>(abft_smem + W * 32 * V * sizeof(double));
  const bool owner = threadIdx.x < p.tile_cols;
  PassTotals<T, kPass> total;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (lane < p.lanes) {
#pragma unroll
      for (int e = 0; e < V; ++e) {
        red[warp][lane * V + e] = sig[r][e].hi;
        if constexpr (kAbftDD<T>) red_lo[warp][lane * V + e] = sig[r][e].lo;
      }
    }
    __syncthreads();
    if (owner) {
#pragma unroll
      for (int w = 0; w < W; ++w) {
        ExtSum<kAbftDD<T>> o;
        o.hi = red[w][threadIdx.x];
        if constexpr (kAbftDD<T>) o.lo = red_lo[w][threadIdx.x];
        if (w == 0) {
          total.sig[r] = o;
        } else {
          total.sig[r].Merge(o);
        }
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < kScale; ++r) {
    if (lane < p.lanes) {
#pragma unroll
      for (int e = 0; e < V; ++e) red[warp][lane * V + e] = sc[r][e];
    }
    __syncthreads();
    if (owner) {
      double sum = red[0][threadIdx.x];
#pragma unroll
      for (int w = 1; w < W; ++w) sum += red[w][threadIdx.x];
      total.sc[r] = sum;
    }
    __syncthreads();
  }

  const int64_t c = tile * p.tile_cols + threadIdx.x;
  if (threadIdx.x >= p.tile_cols || c >= p.cols) return;
  if (p.splits > 1) {
    double all[S];
    ToSlots(total, all);
#pragma unroll
    for (int q = 0; q < S; ++q) p.partials[(split * S + q) * p.cols + c] = all[q];
  } else {
    FinishColumn<T, kPass>(p, c, total);
  }
}

// Up to this many splits, AbftPassFinishUnitsKernel adds them; past it, a warp per column
// (AbftPassFinishKernel).
constexpr int kAbftFinishUnitSplits = 32;

// A column's totals come in units summed apart: the two signed sums (a hi and a lo slot
// each for double-double) and the scale rows.
template <int kPass>
inline constexpr int kAbftFinishUnits = 2 + kAbftScaleRows<kPass>;

// The splits' sum of each column's slots in split order, then its finish step. A warp per
// (32 columns, unit): every split's load of a lane's slot is in flight at once (coalesced
// over the columns), rather than one thread waiting on all of a column's slots in turn;
// the units meet in shared memory, where the first warp finishes the 32 columns. Each unit
// adds its splits in the same order as a merge of whole totals would, so the results do
// not depend on how the work is spread.
template <typename T, int kPass>
__global__ void __launch_bounds__(32 * kAbftFinishUnits<kPass>)
    AbftPassFinishUnitsKernel(const __grid_constant__ AbftPassArgs p) {
  constexpr int S = kAbftSlots<T, kPass>, kChunk = 8;
  constexpr bool kDD = kAbftDD<T>;
  __shared__ double unit_sum[S][32];
  WaitForPrevious();
  AllowNextToStart();
  const int lane = threadIdx.x % 32, unit = threadIdx.x / 32;
  // The unit's first slot (ToSlots' order) and whether it is a signed sum.
  const bool signed_sum = unit < 2;
  const int first = signed_sum ? unit * (kDD ? 2 : 1) : 2 * (kDD ? 2 : 1) + (unit - 2);
  for (int64_t c0 = static_cast<int64_t>(blockIdx.x) * 32; c0 < p.cols;
       c0 += static_cast<int64_t>(gridDim.x) * 32) {
    const int64_t c = c0 + lane;
    if (c < p.cols) {
      ExtSum<kDD> sig;
      double sc = 0.0;
      for (int64_t sp0 = 0; sp0 < p.splits; sp0 += kChunk) {
        double hi[kChunk], lo[kChunk];
#pragma unroll
        for (int j = 0; j < kChunk; ++j) {
          const bool in = sp0 + j < p.splits;
          const double* at = p.partials + ((sp0 + j) * S + first) * p.cols + c;
          hi[j] = in ? at[0] : 0.0;
          lo[j] = in && kDD && signed_sum ? at[p.cols] : 0.0;
        }
#pragma unroll
        for (int j = 0; j < kChunk; ++j) {
          if (sp0 + j >= p.splits) break;
          if (signed_sum) {
            ExtSum<kDD> o;
            o.hi = hi[j];
            if constexpr (kDD) o.lo = lo[j];
            sig.Merge(o);
          } else {
            sc += hi[j];
          }
        }
      }
      if (signed_sum) {
        unit_sum[first][lane] = sig.hi;
        if constexpr (kDD) unit_sum[first + 1][lane] = sig.lo;
      } else {
        unit_sum[first][lane] = sc;
      }
    }
    __syncthreads();
    if (unit == 0 && c < p.cols) {
      PassTotals<T, kPass> t;
      int q = 0;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        t.sig[r].hi = unit_sum[q++][lane];
        if constexpr (kDD) t.sig[r].lo = unit_sum[q++][lane];
      }
#pragma unroll
      for (int r = 0; r < kAbftScaleRows<kPass>; ++r) t.sc[r] = unit_sum[q++][lane];
      FinishColumn<T, kPass>(p, c, t);
    }
    __syncthreads();
  }
}

// The splits' fixed-order sum of each column's slots, then its finish step:
// a warp per column, lane l adding splits l, l + 32, ..., then a fixed
// shuffle tree.
template <typename T, int kPass>
__global__ void __launch_bounds__(256)
    AbftPassFinishKernel(const __grid_constant__ AbftPassArgs p) {
  constexpr int S = kAbftSlots<T, kPass>;
  WaitForPrevious();
  AllowNextToStart();
  const int lane = threadIdx.x % 32;
  const int64_t worker = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int64_t workers = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  for (int64_t c = worker; c < p.cols; c += workers) {  // whole warps iterate together
    PassTotals<T, kPass> t;
#pragma unroll
    for (int r = 0; r < kAbftScaleRows<kPass>; ++r) t.sc[r] = 0.0;
    for (int64_t sp = lane; sp < p.splits; sp += 32) {
      double part[S];
#pragma unroll
      for (int q = 0; q < S; ++q) part[q] = p.partials[(sp * S + q) * p.cols + c];
      MergeSlots(t, part);
    }
#pragma unroll
    for (int d = 16; d > 0; d /= 2) {
      double part[S];
      ToSlots(t, part);
#pragma unroll
      for (int q = 0; q < S; ++q) part[q] = __shfl_down_sync(0xffffffffu, part[q], d);
      if (lane < d) MergeSlots(t, part);
    }
    if (lane == 0) FinishColumn<T, kPass>(p, c, t);
  }
}

}  // namespace tsm2

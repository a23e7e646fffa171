// TSM2L on tensor cores: a tall A with rows of whole 16-byte vectors
// (k <= 64) times a small B, for bf16 and f16 (m16n8k16, f32 sums), f32
// (m16n8k8 TF32, three products of split operands: f32 accuracy, tf32.cuh)
// and f64 (DMMA of 16 rows, f64 sums, f64_mma.cuh). On CUDA cores an L row costs
// k * n FMAs for k + n elements moved, which binds past n of about 8 (2-byte
// types) or 16 (f32, f64); on tensor cores the same rows stream at the
// memory's pace.
//
// - A warp owns a 16-row tile at a time (the MMA's m), tiles dealt to the
//   warps of a persistent grid in turn; there is no block barrier after B is
//   in place.
// - Each lane copies exactly the bytes it will read, so a warp's ring of
//   stages needs no synchronization between lanes: lane (g, q) takes rows g
//   and g + 8 of the tile, and of each the 16-byte vectors q, q + 4, q + 8,
//   ... (rows of at most 32 bytes: the 8-byte piece q). The contraction's
//   order is free, so the MMA's k slots are mapped onto those vectors
//   (LMmaPhysK below) and B's fragments are built with the same map: a
//   lane's A fragments for two MMA steps are one vector it loaded. f64 runs
//   the 16 rows as two m8 products that share B's fragment.
// - B (k x n) is laid out once per block in shared memory as the lanes'
//   fragments in MMA order (f32: both TF32 parts), one 16-byte (f32) or
//   8-byte (bf16/f16, f64) load per fragment.
// - The ring's depth is the plan's (launch_l_mma.cuh): as many 16-row stages
//   per warp as keep the device's bytes in flight per SM.
// - C leaves from the accumulators: a lane holds two adjacent outputs of a row
//   per 8-column MMA tile; for 2-byte types the columns of each pair of MMA
//   tiles are interleaved (through B's fragments) so that a lane holds four
//   adjacent outputs. A quad of lanes thus writes 32 contiguous bytes of a
//   row: whole sectors. Where n leaves those stores misaligned (odd n), the
//   tile's rows, one contiguous span of C, go through shared memory instead.
// - f32: the hi*hi products are summed apart from the cross terms and added
//   last. Inf splits into hi = Inf and lo = NaN, so a tile whose cross sums
//   hold a NaN is recomputed with plain f32 FMAs from global memory (IEEE
//   results for NaN and Inf, slow, and only there), as tsm2_mma.cuh does.
#pragma once

#include <cstdint>
#include <type_traits>

#include "ffi/common/f64_mma.cuh"
#include "ffi/common/half_mma.cuh"
#include "ffi/common/kernel_utils.cuh"
#include "ffi/common/tf32.cuh"
#include "ffi/matmul/kernels/tile_io.cuh"
#include "ffi/matmul/tiles.h"

namespace tsm2 {

struct LMmaArgs {
  const void* a;
  const void* b;
  void* c;
  int64_t rows;   // batch * m: A and C are contiguous over the batch, B is shared
  int64_t k, n;   // k * itemsize is a multiple of 16
  int64_t tiles;  // 16-row tiles
  int stages;     // ring depth per warp (2 to kMaxStages)
  bool b_trans;   // B is given as n x k (layout NT)
  bool c_vec;     // C's rows take a lane's adjacent outputs as one store (n and C aligned);
                  // else the output is staged (C 16-byte aligned)
};

// KP: k padded (tiles.h LMmaKPad): whole vectors for every lane of a quad, or
// one 8-byte piece each of rows of at most 32 bytes; N8: MMA tiles of 8
// columns (even for 2-byte types, whose tiles go in pairs).
template <typename T, int KP, int N8>
struct LMmaConfig {
  static constexpr bool kTf32 = std::is_same_v<T, float>;
  static constexpr bool kF64 = std::is_same_v<T, double>;
  static constexpr bool kHalf = sizeof(T) == 2;  // columns of tile pairs interleaved
  static_assert(kTf32 || kF64 || kHalf, "bf16, f16, f32 and f64");
  using Acc = std::conditional_t<kF64, double, float>;
  static constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  static constexpr int kPiece = KP / 4;  // elements of a row one lane loads
  static_assert(KP * sizeof(T) == 32 || (KP % (4 * kVec) == 0 && KP <= kLMaxK),
                "k in 8-byte pieces or whole vectors of a quad");
  static_assert(!kHalf || N8 % 2 == 0, "2-byte types pair their MMA tiles");
  static constexpr int kVecs = kPiece / kVec;  // vectors a lane loads per row (0: 8 bytes)
  static constexpr int kSteps = kTf32 ? KP / 8 : kF64 ? KP / 4 : KP / 16;
  static constexpr int kThreads = kLMmaWarps * 32;
  static constexpr int kRowStride = LMmaRowStride(KP * static_cast<int>(sizeof(T)));
  static constexpr int kStageBytes = 16 * kRowStride;
  static constexpr int kFragBytes = kTf32 ? 16 : 8;
  static constexpr int kBBytes = kSteps * N8 * 32 * kFragBytes;
  static constexpr int kMinBlocks = LMmaMinBlocks(sizeof(T), KP, 8 * N8);
  static constexpr int kOutBytes = 16 * 8 * N8 * static_cast<int>(sizeof(T));  // a warp's staging
};

// The element of a row that lane q's value `v` is (v counts the lane's loaded
// elements in order): vector j of the lane is the row's vector q + 4 j, or
// its one piece the row's piece q.
template <typename Cfg>
__device__ __forceinline__ int LMmaPhysK(int q, int v) {
  if constexpr (Cfg::kVecs == 0) {
    return q * Cfg::kPiece + v;
  } else {
    return (q + 4 * (v / Cfg::kVec)) * Cfg::kVec + v % Cfg::kVec;
  }
}

// Column of C that MMA column `col` of MMA tile `t` holds: itself for f32
// and f64; for 2-byte types, pairs of tiles interleave their columns two at a
// time so that a lane's outputs of tiles 2p and 2p + 1 are four adjacent
// columns.
template <bool kHalf>
__device__ __forceinline__ int LMmaPhysN(int t, int col) {
  if constexpr (!kHalf) {
    return 8 * t + col;
  } else {
    return 16 * (t / 2) + 4 * (col / 2) + 2 * (t % 2) + col % 2;
  }
}

// The bits of x rounded to T (bf16 or f16).
template <typename T>
__device__ __forceinline__ uint32_t LMmaBits16(float x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  } else {
    return __half_as_ushort(__float2half_rn(x));
  }
}

template <typename T>
__device__ __forceinline__ float LMmaB(const LMmaArgs& p, int64_t kk, int64_t j) {
  if (kk >= p.k || j >= p.n) return 0.0f;
  const T* b = static_cast<const T*>(p.b);
  return ToAcc(b[p.b_trans ? j * p.k + kk : kk * p.n + j]);
}

// B's fragments, lane by lane in MMA order: for step s, tile t and lane
// (g, q), the values of B the lane's MMA operand holds at the k of lane q's
// A values of that step. f32: {hi(k0), hi(k0 + 1), lo(k0), lo(k0 + 1)}, with
// k0 = LMmaPhysK(q, 2 s); f64: the one element at LMmaPhysK(q, s); 2-byte
// types: two pairs of elements at LMmaPhysK(q, 4 s) and the two after.
template <typename T, typename Cfg, int N8>
__device__ __forceinline__ void LMmaBuildB(const LMmaArgs& p, unsigned char* image) {
  constexpr int kEntries = Cfg::kSteps * N8 * 32;
  for (int e = threadIdx.x; e < kEntries; e += Cfg::kThreads) {
    const int lane = e % 32, t = (e / 32) % N8, s = e / (32 * N8);
    const int g = lane / 4, q = lane % 4;
    const int j = LMmaPhysN<Cfg::kHalf>(t, g);
    if constexpr (Cfg::kF64) {
      const int64_t kk = LMmaPhysK<Cfg>(q, s);
      const double* b = static_cast<const double*>(p.b);
      const double v = kk < p.k && j < p.n ? b[p.b_trans ? j * p.k + kk : kk * p.n + j] : 0.0;
      reinterpret_cast<double*>(image)[e] = v;
    } else if constexpr (Cfg::kTf32) {
      const int k0 = LMmaPhysK<Cfg>(q, 2 * s);
      uint32_t h0, l0, h1, l1;
      SplitTf32(LMmaB<T>(p, k0, j), h0, l0);
      SplitTf32(LMmaB<T>(p, k0 + 1, j), h1, l1);
      reinterpret_cast<uint4*>(image)[e] = make_uint4(h0, h1, l0, l1);
    } else {
      const int k0 = LMmaPhysK<Cfg>(q, 4 * s);
      // The lower half of a word is the element of lower k.
      const uint32_t w0 = LMmaBits16<T>(LMmaB<T>(p, k0, j)) | LMmaBits16<T>(LMmaB<T>(p, k0 + 1, j))
                                                                  << 16;
      const uint32_t w1 =
          LMmaBits16<T>(LMmaB<T>(p, k0 + 2, j)) | LMmaBits16<T>(LMmaB<T>(p, k0 + 3, j)) << 16;
      reinterpret_cast<uint2*>(image)[e] = make_uint2(w0, w1);
    }
  }
}

// Lane (g, q)'s vectors (or piece) of rows g and g + 8 of `tile` into its
// stage; bytes past k or rows past the end are zero-filled (B is zero there
// too, but 0 * NaN is not zero).
template <typename T, typename Cfg>
__device__ __forceinline__ void LMmaCopyTile(const LMmaArgs& p, int64_t tile,
                                             unsigned char* stage) {
  const int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int row_bytes = static_cast<int>(p.k) * static_cast<int>(sizeof(T));
  const unsigned char* a = static_cast<const unsigned char*>(p.a);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = g + 8 * h;
    const int64_t row = tile * 16 + r;
    const unsigned char* src = a + row * row_bytes;
    unsigned char* dst = stage + r * Cfg::kRowStride;
    if constexpr (Cfg::kVecs == 0) {
      const bool in = row < p.rows && q * 8 < row_bytes;
      CpAsync8(dst + q * 8, in ? src + q * 8 : a, in);
    } else {
#pragma unroll
      for (int j = 0; j < Cfg::kVecs; ++j) {
        const int off = (q + 4 * j) * 16;
        const bool in = row < p.rows && off < row_bytes;
        CpAsync16(dst + off, in ? src + off : a, in);
      }
    }
  }
}

// Lane (g, q)'s outputs of the tile into rows of n elements from `out`: rows
// g and g + 8 (acc[t][0..1] and acc[t][2..3]) at the columns LMmaPhysN
// gives, as one store per row and tile (f32, f64: two outputs; 2-byte types:
// four over a pair of tiles) where kVec says n and `out` allow it.
template <typename T, typename Cfg, int N8, bool kVec>
__device__ __forceinline__ void LMmaPut(T* out, int64_t rows, int64_t n,
                                        const typename Cfg::Acc (&acc)[N8][4]) {
  const int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (g + 8 * h >= rows) continue;
    T* row = out + (g + 8 * h) * n;
    if constexpr (!Cfg::kHalf) {
#pragma unroll
      for (int t = 0; t < N8; ++t) {
        const int j = LMmaPhysN<false>(t, 2 * q);
        if constexpr (kVec) {  // n even: j < n means j + 1 < n
          if (j < n) {
            if constexpr (Cfg::kF64) {
              *reinterpret_cast<double2*>(row + j) = make_double2(acc[t][2 * h], acc[t][2 * h + 1]);
            } else {
              *reinterpret_cast<float2*>(row + j) = make_float2(acc[t][2 * h], acc[t][2 * h + 1]);
            }
          }
        } else {
          if (j < n) row[j] = acc[t][2 * h];
          if (j + 1 < n) row[j + 1] = acc[t][2 * h + 1];
        }
      }
    } else {
#pragma unroll
      for (int t = 0; t < N8; t += 2) {
        const int j = LMmaPhysN<true>(t, 2 * q);  // four adjacent columns from here
        const uint32_t w0 = LMmaBits16<T>(acc[t][2 * h]) | LMmaBits16<T>(acc[t][2 * h + 1]) << 16;
        const uint32_t w1 = LMmaBits16<T>(acc[t + 1][2 * h]) | LMmaBits16<T>(acc[t + 1][2 * h + 1])
                                                                   << 16;
        if constexpr (kVec) {  // n a multiple of 4: j < n means the four are in C
          if (j < n) *reinterpret_cast<uint2*>(row + j) = make_uint2(w0, w1);
        } else {
          uint16_t* bits = reinterpret_cast<uint16_t*>(row);
          if (j < n) bits[j] = static_cast<uint16_t>(w0);
          if (j + 1 < n) bits[j + 1] = static_cast<uint16_t>(w0 >> 16);
          if (j + 2 < n) bits[j + 2] = static_cast<uint16_t>(w1);
          if (j + 3 < n) bits[j + 3] = static_cast<uint16_t>(w1 >> 16);
        }
      }
    }
  }
}

// The tile's outputs into C. Rows of C that take a lane's adjacent outputs
// as one store (p.c_vec) get them straight from the sums: a quad writes 32
// contiguous bytes of a row. Other rows (odd n) would leave every store a
// scattered 4- or 2-byte piece; but a tile's rows are one contiguous span of
// C, 16 n elements from a 16-byte aligned start, so the warp puts them in
// its `staging` in shared memory and writes the span as 16-byte vectors.
template <typename T, typename Cfg, int N8>
__device__ __forceinline__ void LMmaStore(const LMmaArgs& p, int64_t tile, T* staging,
                                          const typename Cfg::Acc (&acc)[N8][4]) {
  const int64_t rows = p.rows - tile * 16 < 16 ? p.rows - tile * 16 : 16;
  T* c = static_cast<T*>(p.c) + tile * 16 * p.n;
  if (p.c_vec) {
    LMmaPut<T, Cfg, N8, true>(c, rows, p.n, acc);
    return;
  }
  LMmaPut<T, Cfg, N8, false>(staging, rows, p.n, acc);
  __syncwarp();
  const int lane = threadIdx.x % 32;
  const int64_t bytes = rows * p.n * static_cast<int64_t>(sizeof(T));
  const uint4* from = reinterpret_cast<const uint4*>(staging);
  uint4* to = reinterpret_cast<uint4*>(c);
  for (int64_t v = lane; v < bytes / 16; v += 32) to[v] = from[v];
  // The last tile's span may end mid-vector.
  const int64_t done = bytes / 16 * 16 / static_cast<int64_t>(sizeof(T));
  for (int64_t e = done + lane; e < rows * p.n; e += 32) c[e] = staging[e];
  __syncwarp();
}

// f32 with a NaN in a tile's cross sums: the lane's outputs again with plain
// FMAs from global memory, in k order. (The loops over the sums are unrolled:
// indexed at run time, the sums would live in local memory everywhere.)
template <typename Cfg, int N8>
__device__ __forceinline__ void LMmaExactSums(const LMmaArgs& p, int64_t tile,
                                              float (&acc)[N8][4]) {
  const int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const float* a = static_cast<const float*>(p.a);
  const float* b = static_cast<const float*>(p.b);
#pragma unroll
  for (int t = 0; t < N8; ++t) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t row = tile * 16 + g + 8 * (e / 2);
      const int64_t j = LMmaPhysN<false>(t, 2 * q + e % 2);
      if (row >= p.rows || j >= p.n) continue;
      float v = 0.0f;
      for (int64_t kk = 0; kk < p.k; ++kk) {
        v = fmaf(a[row * p.k + kk], b[p.b_trans ? j * p.k + kk : kk * p.n + j], v);
      }
      acc[t][e] = v;
    }
  }
}

// Calls step(s, a) for each MMA step s with lane (g, q)'s words 2 s and
// 2 s + 1 of rows g and g + 8, a[] = {(g, 2 s), (g + 8, 2 s), (g, 2 s + 1),
// (g + 8, 2 s + 1)}: the step's A fragment (f32: values 2 s and 2 s + 1;
// 2-byte types: values 4 s to 4 s + 3; f64: value s, words {0, 2} of row g
// and {1, 3} of row g + 8). A vector serves two steps and is loaded once for
// both.
template <typename Cfg, typename Step>
__device__ __forceinline__ void LMmaForSteps(const unsigned char* stage, Step&& step) {
  const int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const unsigned char* r0 = stage + g * Cfg::kRowStride;
  const unsigned char* r1 = r0 + 8 * Cfg::kRowStride;
  if constexpr (Cfg::kVecs == 0) {
    const uint2 v0 = *reinterpret_cast<const uint2*>(r0 + q * 8);
    const uint2 v1 = *reinterpret_cast<const uint2*>(r1 + q * 8);
    const uint32_t a[4] = {v0.x, v1.x, v0.y, v1.y};
    step(0, a);
  } else {
#pragma unroll
    for (int j = 0; j < Cfg::kVecs; ++j) {
      const uint4 v0 = *reinterpret_cast<const uint4*>(r0 + (q + 4 * j) * 16);
      const uint4 v1 = *reinterpret_cast<const uint4*>(r1 + (q + 4 * j) * 16);
      const uint32_t lo[4] = {v0.x, v1.x, v0.y, v1.y}, hi[4] = {v0.z, v1.z, v0.w, v1.w};
      step(2 * j, lo);
      step(2 * j + 1, hi);
    }
  }
}

// The products of one stage: sums from zero (every tile is all of k).
template <typename T, typename Cfg, int N8>
__device__ __forceinline__ void LMmaTile(const unsigned char* stage, const unsigned char* b_img,
                                         typename Cfg::Acc (&acc)[N8][4], bool& nan) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int t = 0; t < N8; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0;
  if constexpr (Cfg::kF64) {
    // IEEE products and sums: NaN and Inf come out as plain FMAs give them.
    const double* frags = reinterpret_cast<const double*>(b_img);
    LMmaForSteps<Cfg>(stage, [&](int s, const uint32_t (&a)[4]) {
      const double a0 = __hiloint2double(static_cast<int>(a[2]), static_cast<int>(a[0]));
      const double a1 = __hiloint2double(static_cast<int>(a[3]), static_cast<int>(a[1]));
#pragma unroll
      for (int t = 0; t < N8; ++t) {
        const double f = frags[(s * N8 + t) * 32 + lane];
        MmaF64(acc[t], a0, a1, f);
      }
    });
    nan = false;
  } else if constexpr (Cfg::kTf32) {
    float cross[N8][4];
#pragma unroll
    for (int t = 0; t < N8; ++t) cross[t][0] = cross[t][1] = cross[t][2] = cross[t][3] = 0.0f;
    const uint4* frags = reinterpret_cast<const uint4*>(b_img);
    LMmaForSteps<Cfg>(stage, [&](int s, const uint32_t (&a)[4]) {
      uint32_t ah[4], al[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) SplitTf32Trunc(__uint_as_float(a[e]), ah[e], al[e]);
#pragma unroll
      for (int t = 0; t < N8; ++t) {
        const uint4 f = frags[(s * N8 + t) * 32 + lane];
        MmaTf32(cross[t], al, f.x, f.y);
        MmaTf32(acc[t], ah, f.x, f.y);
        MmaTf32(cross[t], ah, f.z, f.w);
      }
    });
    bool bad = false;
#pragma unroll
    for (int t = 0; t < N8; ++t) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        bad |= cross[t][e] != cross[t][e];
        acc[t][e] += cross[t][e];
      }
    }
    nan = bad;
  } else {
    const uint2* frags = reinterpret_cast<const uint2*>(b_img);
    LMmaForSteps<Cfg>(stage, [&](int s, const uint32_t (&a)[4]) {
#pragma unroll
      for (int t = 0; t < N8; ++t) {
        const uint2 f = frags[(s * N8 + t) * 32 + lane];
        const uint32_t b[2] = {f.x, f.y};
        MmaHalf<T>(acc[t], a, b);
      }
    });
    nan = false;
  }
}

template <typename T, int KP, int N8>
__global__ void __launch_bounds__(kLMmaWarps * 32, (LMmaConfig<T, KP, N8>::kMinBlocks))
    Tsm2LMmaKernel(const __grid_constant__ LMmaArgs p) {
  using Cfg = LMmaConfig<T, KP, N8>;
  extern __shared__ __align__(16) char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>(smem_raw);
  LMmaBuildB<T, Cfg, N8>(p, smem);
  __syncthreads();
  const int warp = threadIdx.x / 32;
  unsigned char* ring =
      smem + Cfg::kBBytes + static_cast<int64_t>(warp) * p.stages * Cfg::kStageBytes;
  // The output staging (rows of C that are not whole stores per lane) after the rings.
  T* staging =
      reinterpret_cast<T*>(smem + Cfg::kBBytes + int64_t{kLMmaWarps} * p.stages * Cfg::kStageBytes +
                           warp * Cfg::kOutBytes);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kLMmaWarps;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kLMmaWarps + warp;
  const int64_t count = first < p.tiles ? (p.tiles - first + stride - 1) / stride : 0;
  // Stages 0 .. stages - 2 hold the first tiles; each step refills the stage
  // the step before read (`write`), then waits for its own (`read`).
  int write = 0;
  for (; write < p.stages - 1; ++write) {
    if (write < count) {
      LMmaCopyTile<T, Cfg>(p, first + write * stride, ring + write * Cfg::kStageBytes);
    }
    CpAsyncCommit();
  }
  int read = 0;
  int64_t tile = first;
  for (int64_t i = 0; i < count; ++i) {
    if (i + p.stages - 1 < count) {
      LMmaCopyTile<T, Cfg>(p, tile + (p.stages - 1) * stride, ring + write * Cfg::kStageBytes);
    }
    CpAsyncCommit();
    CpAsyncWaitAtMost(p.stages - 1);
    typename Cfg::Acc acc[N8][4];
    bool nan = false;
    LMmaTile<T, Cfg, N8>(ring + read * Cfg::kStageBytes, smem, acc, nan);
    if constexpr (Cfg::kTf32) {
      if (__any_sync(0xffffffffu, nan)) LMmaExactSums<Cfg, N8>(p, tile, acc);
    }
    LMmaStore<T, Cfg, N8>(p, tile, staging, acc);
    tile += stride;
    read = read + 1 == p.stages ? 0 : read + 1;
    write = write + 1 == p.stages ? 0 : write + 1;
  }
  CpAsyncWait<0>();
}

}  // namespace tsm2

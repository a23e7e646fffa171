// TSM2R on tensor cores: the R tile of kernels/tsm2.cuh with its arithmetic
// moved from CUDA-core FMAs to mma.sync, for bf16 and f16 (m16n8k16, f32
// sums) and for f32 (m16n8k8 TF32, three products of split operands, which
// keeps f32 accuracy: tf32.cuh). On the CUDA cores a thread spends t2 FMAs on
// every element of A it reads, so past t2 of about 8 (2-byte types) or 16-30
// (f32) the FMAs, not the memory, set the pace.
//
// What stays from the CUDA-core tile: the persistent grid over (row tile,
// k-chunk) units split evenly among blocks, the cp.async ring of A stages
// (LoadATile, rows of any byte length at the same address modulo 16 as in
// memory), the fixed-order fix-up of tiles split between blocks, and the
// output staged in shared memory and written as 16-byte vectors.
//
// What changes:
// - A warp owns 16 rows of the tile and all of a stage's k (no k-groups to
//   reduce). bf16/f16 rows of whole 16-byte vectors give their A fragments
//   to ldmatrix; other rows, f32, and the chunk that ends inside k are read
//   element by element, with elements past k set to zero (the stage holds
//   bytes of the neighbouring rows there, which must never be a term).
//   Moving each warp's bf16/f16 rows to 16-byte boundaries once a stage lands,
//   so that ldmatrix reads them too, took 1.08-1.13x the time of these pair
//   reads on the H200 (benchmarks/results/h200/stream_kernels_r_half_realign.json):
//   the extra shared-memory pass sits between the copy and the MMAs.
// - B is rearranged once per call (Tsm2MmaImageKernel) into the stage image
//   the MMA reads: per (batch entry, n-tile, k-chunk) a column-major block,
//   zero past k and n (f32: two planes, B's high and low TF32 parts), so that
//   the ring copies it with 16-byte cp.async and no stage splits or widens
//   B again. B of the CUDA-core tile is widened element by element in every
//   stage, which costs more instructions than the MMAs themselves.
// - Sums start at +0: k = 1 (a single product's signed zero) stays on the
//   CUDA cores (tiles.h UsesRMma).
// - f32: the tensor cores truncate as they accumulate, so each stage's
//   hi*hi products are summed from zero and added to the tile's sums with an
//   f32 add (a chain of kChunkK / 8 MMAs), the small cross terms in sums of
//   their own. Inf splits into hi = Inf and lo = NaN, so a block whose
//   cross sums hold a NaN recomputes its part of the tile with plain f32
//   FMAs from global memory (IEEE results for NaN and Inf, slow, and only
//   there), as tn_tf32.cuh does.
#pragma once

#include <cstdint>
#include <type_traits>

#include "ffi/common/half_mma.cuh"
#include "ffi/common/kernel_utils.cuh"
#include "ffi/common/tf32.cuh"
#include "ffi/matmul/kernels/tile_io.cuh"
#include "ffi/matmul/kernels/tsm2.cuh"
#include "ffi/matmul/tiles.h"

// Whether this compilation pass runs the tensor-map R tile's f32 products
// on warpgroup MMAs (sm_90a machine code: tsm2_mma_tma.cuh). The B image
// the tile reads is laid out to match, by the same pass.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TSM2_R_WGMMA_TF32 1
#else
#define TSM2_R_WGMMA_TF32 0
#endif

namespace tsm2 {

template <typename T, int NT, bool VecRows>
struct Tsm2MmaConfig {
  static constexpr bool kTf32 = std::is_same_v<T, float>;
  static_assert(sizeof(T) == 2 || kTf32, "bf16, f16 and f32");
  static_assert(NT % 8 == 0, "the n-tile is whole MMA columns");
  using Acc = float;
  static constexpr int kRows = kRMmaRows;
  static constexpr int kWarps = kRows / 16;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kChunkK = RMmaChunkK(sizeof(T));  // t1
  static constexpr int kSegBytes = kRMmaSegBytes;
  static constexpr bool kVecRows = VecRows;
  // Vectors copied per row and stage: one more where rows start mid-vector.
  static constexpr int kVecsPerRow = kSegBytes / 16 + (VecRows ? 0 : 1);
  static constexpr int kCopies = (kRows * kVecsPerRow + kThreads - 1) / kThreads;
  static constexpr int kBStride = RMmaBStride(sizeof(T));  // elements of a column of a plane
  static constexpr int kBColBytes = kBStride * static_cast<int>(sizeof(T));
  static constexpr int kBPlaneBytes = NT * kBColBytes;
  static constexpr int kBStageBytes = RMmaBStageBytes(sizeof(T), NT);
  static constexpr int kBVecs = kBStageBytes / 16;
  static constexpr int kBCopies = (kBVecs + kThreads - 1) / kThreads;
  static constexpr int kNTiles8 = NT / 8;
  static constexpr int kRedStride = NT | 1;
  static constexpr int kRedBytes = RReduceBytes(kRows, NT, sizeof(T));
  static constexpr int kMinBlocks = RMmaMinBlocks(sizeof(T), NT);
  static_assert(kBStageBytes % 16 == 0, "B stages keep 16-byte alignment");
  static_assert(kRows * kRedStride * 4 <= kRedBytes, "the fragments fit the output staging");
};

// B rearranged: block (batch entry, n-tile, chunk) writes its stage image,
// out[j][kk] = B[chunk * kChunkK + kk, n-tile * NT + j], zero past k and n;
// for f32 a plane of the high TF32 parts, then one of the low parts
// (tf32.cuh SplitTf32). Reads are coalesced in either layout through a
// transposing shared tile. The loops are unrolled so that a thread's loads
// are in flight together: one at a time, the 11 blocks of R f16 1454 x 1371 x
// 51 took 18 us (Nsight Compute) for 147 KB. kForTmaTile (images for
// tsm2_mma_tma.cuh's tile): f32, where that tile runs on warpgroup MMAs, as each
// plane's chunk of 32-k boxes of NT rows x 128 bytes in the 128-byte swizzle
// (16-byte chunk c of row j at c ^ (j % 8)), B^T K-major as wgmma reads it;
// f64 in the DMMA's fragment order.
constexpr int kImageThreads = 256;
template <typename T, int NT, bool kForTmaTile = false>
__global__ void __launch_bounds__(kImageThreads)
    Tsm2MmaImageKernel(const __grid_constant__ Tsm2Args p) {
  constexpr int kChunkK = RMmaChunkK(sizeof(T)), kStride = RMmaBStride(sizeof(T));
  constexpr bool kTf32 = std::is_same_v<T, float>, kF64 = std::is_same_v<T, double>;
  // Bits moved as they are: the image is B's own elements, rearranged.
  using Bits = std::conditional_t<kF64, uint64_t, std::conditional_t<kTf32, uint32_t, uint16_t>>;
  __shared__ Bits tile[NT][kChunkK + 2];
  const int64_t chunk = blockIdx.x % p.chunks;
  const int64_t rest = blockIdx.x / p.chunks;
  const int64_t n_tile = rest % p.n_tiles;
  const int64_t batch = rest / p.n_tiles;
  const Bits* b = static_cast<const Bits*>(p.b) + batch * p.b_batch_stride;
  const int64_t k0 = chunk * kChunkK, n0 = n_tile * NT;
  constexpr int kLoads = (NT * kChunkK + kImageThreads - 1) / kImageThreads;
  Bits v[kLoads];
#pragma unroll
  for (int i = 0; i < kLoads; ++i) {
    // NT: consecutive threads take consecutive k of a column of B (n x k);
    // NN: consecutive columns of a row of B (k x n).
    const int e = threadIdx.x + i * kImageThreads;
    const int kk = p.b_trans ? e % kChunkK : e / NT;
    const int j = p.b_trans ? e / kChunkK : e % NT;
    const int64_t gk = k0 + kk, gj = n0 + j;
    const bool in = e < NT * kChunkK && gk < p.k && gj < p.n;
    v[i] = in ? b[p.b_trans ? gj * p.k + gk : gk * p.n + gj] : Bits{0};
  }
#pragma unroll
  for (int i = 0; i < kLoads; ++i) {
    const int e = threadIdx.x + i * kImageThreads;
    if (e < NT * kChunkK) {
      tile[p.b_trans ? e / kChunkK : e % NT][p.b_trans ? e % kChunkK : e / NT] = v[i];
    }
  }
  __syncthreads();
  char* image = static_cast<char*>(const_cast<void*>(p.b_image)) +
                blockIdx.x * int64_t{RMmaBStageBytes(sizeof(T), NT)};
  if constexpr (kF64) {
    // Fragment order (tsm2_mma_tma.cuh MmaStageF64Swizzled): per k-step of 4
    // and n-tile, lane (g, q)'s B[4 s + q][8 t + g].
    static_assert(kForTmaTile, "f64 runs on the tensor-map tile only");
    constexpr int kN8 = NT / 8, kWords = RMmaBStageBytes(8, NT) / 8;
    uint64_t* out = reinterpret_cast<uint64_t*>(image);
    for (int e = threadIdx.x; e < kWords; e += kImageThreads) {
      const int lane = e % 32, t = e / 32 % kN8, s = e / (32 * kN8);
      out[e] = e < NT * kChunkK ? tile[8 * t + lane / 4][4 * s + lane % 4] : uint64_t{0};
    }
    return;
  }
  if constexpr (kTf32 && kForTmaTile && TSM2_R_WGMMA_TF32) {
    constexpr int kPlaneWords = NT * kChunkK;
    constexpr int kWords = RMmaBStageBytes(4, NT) / 4;
    uint32_t* out = reinterpret_cast<uint32_t*>(image);
    for (int e = threadIdx.x; e < kWords; e += kImageThreads) {
      uint32_t hi = 0, lo = 0;  // the stage's tail past both planes stays zero
      if (e < 2 * kPlaneWords) {
        const int w = e % kPlaneWords, box = w / (NT * 32), j = (w / 32) % NT, pos = w % 32;
        const int kk = box * 32 + ((pos / 4) ^ (j % 8)) * 4 + pos % 4;
        SplitTf32(__uint_as_float(tile[j][kk]), hi, lo);
      }
      out[e] = e < kPlaneWords ? hi : lo;
    }
    return;
  }
  constexpr int kPlanes = RMmaBPlanes(sizeof(T));
  Bits* out = reinterpret_cast<Bits*>(image);
  static_assert(kPlanes * NT * kStride * int{sizeof(Bits)} <= RMmaBStageBytes(sizeof(T), NT));
  constexpr int kStores = (NT * kStride + kImageThreads - 1) / kImageThreads;
#pragma unroll
  for (int i = 0; i < kStores; ++i) {
    const int e = threadIdx.x + i * kImageThreads;
    if (NT * kStride % kImageThreads != 0 && e >= NT * kStride) break;
    const int j = e / kStride, kk = e % kStride;
    const Bits x = kk < kChunkK ? tile[j][kk] : Bits{0};
    if constexpr (kTf32) {
      uint32_t hi = 0, lo = 0;  // padding stays zero in both planes
      if (kk < kChunkK) SplitTf32(__uint_as_float(x), hi, lo);
      out[e] = hi;
      out[NT * kStride + e] = lo;
    } else {
      out[e] = x;
    }
  }
}

// The stage image of unit uc's B into `stage`, as 16-byte cp.async copies.
template <typename Cfg>
__device__ __forceinline__ void CopyBImage(const Tsm2Args& p, const Cursor& uc, char* stage) {
  const int64_t batch = p.b_batch_stride == 0 ? 0 : uc.batch;
  const char* src = static_cast<const char*>(p.b_image) +
                    ((batch * p.n_tiles + uc.n_tile) * p.chunks + uc.chunk) * Cfg::kBStageBytes;
#pragma unroll
  for (int i = 0; i < Cfg::kBCopies; ++i) {
    const int q = threadIdx.x + i * Cfg::kThreads;
    if (Cfg::kBVecs % Cfg::kThreads == 0 || q < Cfg::kBVecs) {
      CpAsync16(stage + q * 16, src + q * 16, true);
    }
  }
}

// Two elements of a stage row as one 32-bit MMA operand register: the low
// half is element kk. Elements at or past `limit` are zero.
__device__ __forceinline__ uint32_t PairAt(const char* row, int kk, int limit) {
  const uint16_t* e = reinterpret_cast<const uint16_t*>(row) + kk;
  const uint32_t lo = kk < limit ? e[0] : 0u;
  const uint32_t hi = kk + 1 < limit ? e[1] : 0u;
  return lo | (hi << 16);
}

// acc += A fragment a (16 rows x 16 k) * B stage at k16 step s, for each
// 8-column n-tile. b_ld: this lane's ldmatrix address in the B stage (B
// columns (lane / 16) * 8 + lane % 8 of an n-tile pair, k offset
// ((lane / 8) % 2) * 8).
template <typename T, int kN8, int kBColBytes>
__device__ __forceinline__ void MmaK16(const uint32_t (&a)[4], const char* b_ld, int s,
                                       float (&acc)[kN8][4]) {
#pragma unroll
  for (int t = 0; t + 1 < kN8; t += 2) {
    uint32_t b[4];
    LdMatrixX4(b_ld + t * 8 * kBColBytes + s * 32, b);
    const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
    MmaHalf<T>(acc[t], a, b0);
    MmaHalf<T>(acc[t + 1], a, b1);
  }
  if constexpr (kN8 % 2 == 1) {
    constexpr int t = kN8 - 1;
    const int lane = threadIdx.x % 32;
    uint32_t b[2];
    LdMatrixX2(b_ld - (lane / 16) * 8 * kBColBytes + t * 8 * kBColBytes + s * 32, b);
    MmaHalf<T>(acc[t], a, b);
  }
}

// This lane's ldmatrix address in a B stage of column stride kBColBytes.
template <int kBColBytes>
__device__ __forceinline__ const char* BLdAddress(const char* b_st) {
  const int lane = threadIdx.x % 32;
  return b_st + ((lane / 16) * 8 + lane % 8) * kBColBytes + ((lane / 8) % 2) * 16;
}

// acc += A[warp's 16 rows, first `limit` k of the stage] * B stage.
// a_w: the stage byte of (the warp's first row, the chunk's first k);
// Whole: every k of the chunk is in A and rows are whole vectors (ldmatrix).
template <typename T, typename Cfg, bool Whole>
__device__ __forceinline__ void MmaStage(const char* a_w, int row_bytes, const char* b_st,
                                         int limit, float (&acc)[Cfg::kNTiles8][4]) {
  const int lane = threadIdx.x % 32;
  const int steps = Whole ? Cfg::kChunkK / 16 : (limit + 15) / 16;
  // ldmatrix addresses of A: rows lane % 16 at k offset (lane / 16) * 8.
  const char* a_ld = a_w + (lane % 16) * row_bytes + (lane / 16) * 16;
  const char* b_ld = BLdAddress<Cfg::kBColBytes>(b_st);
  // Element reads: the lane's rows lane / 4 and lane / 4 + 8, k pair 2 * (lane % 4).
  const char* a_r0 = a_w + (lane / 4) * row_bytes;
  const char* a_r1 = a_r0 + 8 * row_bytes;
  const int kp = 2 * (lane % 4);
#pragma unroll 2
  for (int s = 0; s < steps; ++s) {
    uint32_t a[4];
    if constexpr (Whole) {
      LdMatrixX4(a_ld + s * 32, a);
    } else {
      const int k0 = s * 16 + kp;
      a[0] = PairAt(a_r0, k0, limit);
      a[1] = PairAt(a_r1, k0, limit);
      a[2] = PairAt(a_r0, k0 + 8, limit);
      a[3] = PairAt(a_r1, k0 + 8, limit);
    }
    MmaK16<T, Cfg::kNTiles8, Cfg::kBColBytes>(a, b_ld, s, acc);
  }
}

// f32: acc += A[warp's 16 rows, `steps` k8 steps of the stage] * B stage in
// three TF32 products. This stage's hi*hi products are summed from zero and
// added to `acc` with f32 adds; hi*lo and lo*hi go into `cross`. Lane (g, t)
// takes A rows g and g + 8 at k t and t + 4 of each step (load_a(s, a) gives
// them as a[0..3] = (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4)), and B
// column g of each n-tile (both planes) at the same k. B's fragments come
// from one ldmatrix per n-tile: an 8 x 8 matrix of 16-bit elements is 8
// columns x 4 words, and lane (g, t) gets word t of column g, which is the
// TF32 fragment; the four matrices are the planes' k t and t + 4. With
// stage columns 68 words apart the eight addresses of a matrix hit distinct
// banks.
template <typename Cfg, typename LoadA>
__device__ __forceinline__ void MmaStageTf32With(int steps, LoadA&& load_a, const char* b_st,
                                                 float (&acc)[Cfg::kNTiles8][4],
                                                 float (&cross)[Cfg::kNTiles8][4]) {
  constexpr int kN8 = Cfg::kNTiles8;
  const int lane = threadIdx.x % 32;
  // Matrices 0-3: the high plane at k 0-3 and 4-7 of a step, then the low plane's.
  const char* b_ld =
      b_st + (lane / 16) * Cfg::kBPlaneBytes + (lane % 8) * Cfg::kBColBytes + ((lane / 8) % 2) * 16;
  float part[kN8][4];
#pragma unroll
  for (int j = 0; j < kN8; ++j) part[j][0] = part[j][1] = part[j][2] = part[j][3] = 0.0f;
#pragma unroll 2
  for (int s = 0; s < steps; ++s) {
    float a[4];
    load_a(s, a);
    uint32_t ah[4], al[4], bh[kN8][2], bl[kN8][2];
#pragma unroll
    for (int e = 0; e < 4; ++e) SplitTf32Trunc(a[e], ah[e], al[e]);
#pragma unroll
    for (int j = 0; j < kN8; ++j) {
      uint32_t b[4];
      LdMatrixX4(b_ld + j * 8 * Cfg::kBColBytes + s * 32, b);
      bh[j][0] = b[0], bh[j][1] = b[1], bl[j][0] = b[2], bl[j][1] = b[3];
    }
    // Three passes over the n-tiles, so that the two MMAs into one cross sum
    // are 2 kN8 MMAs apart instead of back to back.
#pragma unroll
    for (int j = 0; j < kN8; ++j) MmaTf32(cross[j], al, bh[j][0], bh[j][1]);
#pragma unroll
    for (int j = 0; j < kN8; ++j) MmaTf32(part[j], ah, bh[j][0], bh[j][1]);
#pragma unroll
    for (int j = 0; j < kN8; ++j) MmaTf32(cross[j], ah, bl[j][0], bl[j][1]);
  }
#pragma unroll
  for (int j = 0; j < kN8; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] += part[j][e];
  }
}

// The same over the first `limit` k of a cp.async stage: a_w is the stage
// byte of (the warp's first row, the chunk's first k), rows row_bytes apart
// (68 words for whole stages: conflict-free). Whole: every k of the chunk
// is in A.
template <typename Cfg, bool Whole>
__device__ __forceinline__ void MmaStageTf32(const char* a_w, int row_bytes, const char* b_st,
                                             int limit, float (&acc)[Cfg::kNTiles8][4],
                                             float (&cross)[Cfg::kNTiles8][4]) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const float* a_r0 = reinterpret_cast<const float*>(a_w + g * row_bytes);
  const float* a_r1 = reinterpret_cast<const float*>(a_w + (g + 8) * row_bytes);
  const int steps = Whole ? Cfg::kChunkK / 8 : (limit + 7) / 8;
  MmaStageTf32With<Cfg>(
      steps,
      [&](int s, float (&a)[4]) {
        const int k0 = s * 8 + t;
        if constexpr (Whole) {
          a[0] = a_r0[k0], a[1] = a_r1[k0], a[2] = a_r0[k0 + 4], a[3] = a_r1[k0 + 4];
        } else {
          a[0] = k0 < limit ? a_r0[k0] : 0.0f;
          a[1] = k0 < limit ? a_r1[k0] : 0.0f;
          a[2] = k0 + 4 < limit ? a_r0[k0 + 4] : 0.0f;
          a[3] = k0 + 4 < limit ? a_r1[k0 + 4] : 0.0f;
        }
      },
      b_st, acc, cross);
}

// f32 with a NaN in a block's cross sums (an Inf or NaN among the inputs):
// this lane's sums of the tile, over k in [k_begin, k_end), again with
// plain f32 FMAs from global memory, so that NaN and Inf come out as IEEE
// arithmetic gives them. (The loops over the sums are unrolled: indexed at
// run time, the sums would live in local memory everywhere.)
template <typename Cfg>
__device__ __forceinline__ void ExactSums(const Tsm2Args& p, const Cursor& uc, int64_t k_begin,
                                          int64_t k_end, float (&acc)[Cfg::kNTiles8][4]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float* a = static_cast<const float*>(p.a) + uc.batch * p.a_batch_stride;
  const float* b =
      static_cast<const float*>(p.b) + (p.b_batch_stride == 0 ? 0 : uc.batch) * p.b_batch_stride;
#pragma unroll
  for (int j = 0; j < Cfg::kNTiles8; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t row =
          static_cast<int64_t>(uc.row_tile) * Cfg::kRows + warp * 16 + lane / 4 + 8 * (e / 2);
      const int64_t col =
          static_cast<int64_t>(uc.n_tile) * (8 * Cfg::kNTiles8) + j * 8 + 2 * (lane % 4) + e % 2;
      if (row >= p.m || col >= p.n) continue;
      float v = 0.0f;
      for (int64_t kk = k_begin; kk < k_end; ++kk) {
        v = fmaf(a[row * p.k + kk], b[p.b_trans ? col * p.k + kk : kk * p.n + col], v);
      }
      acc[j][e] = v;
    }
  }
}

template <typename T, int NT, typename Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    Tsm2MmaKernel(const __grid_constant__ Tsm2Args p) {
  constexpr int kRows = Cfg::kRows, kN8 = Cfg::kNTiles8;
  extern __shared__ __align__(16) char smem[];
  const int stages = p.stages;
  char* a_stages = smem;
  char* b_stages = smem + stages * p.a_stage_bytes;
  char* red_bytes = b_stages + stages * Cfg::kBStageBytes;
  float* red = reinterpret_cast<float*>(red_bytes);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t u_begin = UnitBegin(blockIdx.x, p.units, p.blocks);
  const int64_t u_end = UnitBegin(blockIdx.x + 1, p.units, p.blocks);
  const int64_t count = u_end - u_begin;

  Cursor load_at = DecodeUnit(p, u_begin);
  Cursor comp_at = load_at;
  for (int s = 0; s < stages - 1; ++s) {
    if (s < count) {
      LoadATile<T, Cfg>(p, load_at, a_stages + s * p.a_stage_bytes);
      CopyBImage<Cfg>(p, load_at, b_stages + s * Cfg::kBStageBytes);
      Advance(p, load_at);
    }
    CpAsyncCommit();
  }

  float acc[kN8][4], cross[kN8][4];  // cross: f32's hi*lo + lo*hi
#pragma unroll
  for (int t = 0; t < kN8; ++t) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[t][e] = cross[t][e] = 0.0f;
  }

  for (int64_t it = 0; it < count; ++it) {
    CpAsyncWaitAtMost(stages - 2);
    __syncthreads();

    const int64_t ip = it + stages - 1;
    const int slot_next = static_cast<int>(ip % stages);
    if (ip < count) {
      LoadATile<T, Cfg>(p, load_at, a_stages + slot_next * p.a_stage_bytes);
      CopyBImage<Cfg>(p, load_at, b_stages + slot_next * Cfg::kBStageBytes);
      Advance(p, load_at);
    }
    CpAsyncCommit();

    const Cursor uc = comp_at;
    Advance(p, comp_at);
    const int slot = static_cast<int>(it % stages);
    const char* a_w = a_stages + slot * p.a_stage_bytes + Low4(TileStart<T, Cfg>(p, uc)) +
                      warp * 16 * p.a_row_bytes;
    const char* b_st = b_stages + slot * Cfg::kBStageBytes;
    const int64_t k_left = p.k - static_cast<int64_t>(uc.chunk) * Cfg::kChunkK;
    // Warps whose rows are all past m (the last row tile) have nothing to add.
    if (static_cast<int64_t>(uc.row_tile) * kRows + warp * 16 < p.m) {
      const int limit = static_cast<int>(k_left < Cfg::kChunkK ? k_left : Cfg::kChunkK);
      if constexpr (Cfg::kTf32) {
        if (k_left >= Cfg::kChunkK) {
          MmaStageTf32<Cfg, true>(a_w, p.a_row_bytes, b_st, limit, acc, cross);
        } else {
          MmaStageTf32<Cfg, false>(a_w, p.a_row_bytes, b_st, limit, acc, cross);
        }
      } else if (Cfg::kVecRows && k_left >= Cfg::kChunkK) {
        MmaStage<T, Cfg, true>(a_w, p.a_row_bytes, b_st, limit, acc);
      } else {
        MmaStage<T, Cfg, false>(a_w, p.a_row_bytes, b_st, limit, acc);
      }
    }

    if (uc.chunk == p.chunks - 1 || it == count - 1) {
      const bool begun_here = it >= uc.chunk;
      const bool whole = begun_here && uc.chunk == p.chunks - 1;
      // This lane's sums: rows r and r + 8 of its warp's 16, columns c, c + 1
      // of each 8-column n-tile.
      const int r = warp * 16 + lane / 4, c = 2 * (lane % 4);
      if constexpr (Cfg::kTf32) {
        // A NaN in the cross sums of rows below m: an Inf or NaN among the
        // inputs, which the split turned into NaN (see the top).
        bool poisoned = false;
#pragma unroll
        for (int t = 0; t < kN8; ++t) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int64_t row = static_cast<int64_t>(uc.row_tile) * kRows + r + 8 * (e / 2);
            poisoned |= row < p.m && isnan(cross[t][e]);
            acc[t][e] += cross[t][e];
            cross[t][e] = 0.0f;
          }
        }
        if (__syncthreads_or(poisoned)) {
          // This block's part of the tile: from its first chunk of it to this one.
          const int64_t first = begun_here ? 0 : uc.chunk - it;
          const int64_t end = (static_cast<int64_t>(uc.chunk) + 1) * Cfg::kChunkK;
          ExactSums<Cfg>(p, uc, first * Cfg::kChunkK, end < p.k ? end : p.k, acc);
        }
      }
      if (!whole) {
        float* part = static_cast<float*>(p.partials) +
                      (static_cast<int64_t>(blockIdx.x) * 2 + (begun_here ? 1 : 0)) * kRows * NT;
#pragma unroll
        for (int t = 0; t < kN8; ++t) {
          part[r * NT + t * 8 + c] = acc[t][0];
          part[r * NT + t * 8 + c + 1] = acc[t][1];
          part[(r + 8) * NT + t * 8 + c] = acc[t][2];
          part[(r + 8) * NT + t * 8 + c + 1] = acc[t][3];
        }
      } else {
        // Fragments to rows in shared memory, then a thread per row puts its
        // row into the output staging (the same buffer) and the block writes
        // the tile out.
        // (The previous tile's staging was last read before this iteration's
        // first barrier.)
#pragma unroll
        for (int t = 0; t < kN8; ++t) {
          red[r * Cfg::kRedStride + t * 8 + c] = acc[t][0];
          red[r * Cfg::kRedStride + t * 8 + c + 1] = acc[t][1];
          red[(r + 8) * Cfg::kRedStride + t * 8 + c] = acc[t][2];
          red[(r + 8) * Cfg::kRedStride + t * 8 + c + 1] = acc[t][3];
        }
        __syncthreads();
        WriteRTile<NT, kRows>(p, uc, red_bytes, [&](const OutLayout& o, int offc, int rows) {
          float row[NT];
          const int own = threadIdx.x;
          if (own < rows) {
#pragma unroll
            for (int j = 0; j < NT; ++j) row[j] = red[own * Cfg::kRedStride + j];
          }
          __syncthreads();  // every row is read before the staging overwrites it
          if (own < rows) PutRow<T, NT>(o, p.out_f32, red_bytes, own, offc, row);
        });
      }
#pragma unroll
      for (int t = 0; t < kN8; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
    }
  }
  CpAsyncWait<0>();
}

}  // namespace tsm2

// TSM2R on tensor cores with tensor-map copies (sm_90 and later), for rows
// of whole 16-byte vectors: the tile of tsm2_mma.cuh (128 rows x 256 bytes
// per stage, a warp per 16 rows, B's stage images, bf16/f16 MMAs or f32's
// three TF32 products with the exact recomputation where a NaN appears, the
// persistent grid over (row tile, k-chunk) units and the fixed-order fix-up)
// with its ring filled by the copy engines instead of by every thread's
// cp.async. f64 (DMMA) runs on this tile only: where its rows cannot be
// tensor-mapped, the CUDA-core tile takes it.
//
// Why: with cp.async each stage is 2,048 16-byte copies issued by the 256
// threads, and the block meets at a barrier every stage, so a stage is
// reused only once its slowest warp is done and every thread has issued its
// next copies. Nsight Compute showed that tile holding DRAM at 28-34% of
// its peak on the H200 with 200 KB of ring in flight per SM, stalled on
// shared-memory results and the barrier. Here one thread of a ninth warp
// issues a stage as two tensor-map boxes of A (128 rows x 128 bytes, the
// 128-byte swizzle) and one bulk copy of B's image, all completing on the
// stage's "full" mbarrier; each consumer thread arrives on the stage's
// "empty" mbarrier once its MMAs have read it, and the producer refills the
// slot when all 256 have. No warp waits for another except at a tile's end.
//
// Edges are the copies' job: rows past m and k past the row's end arrive as
// zeros (the boxes' out-of-bounds fill), and B's image is zero past k and n,
// so every stage is whole MMAs.
#pragma once

#include <cuda.h>  // CUtensorMap (a type only: nothing links libcuda)

#include <cstdint>
#include <type_traits>

#include "ffi/common/cluster_pipe.cuh"
#include "ffi/common/f64_mma.cuh"
#include "ffi/common/half_mma.cuh"
#include "ffi/common/tf32.cuh"
#include "ffi/common/wgmma.cuh"
#include "ffi/matmul/kernels/tsm2.cuh"
#include "ffi/matmul/kernels/tsm2_mma.cuh"
#include "ffi/matmul/tiles.h"

namespace tsm2 {

template <typename T, int NT>
struct Tsm2MmaTmaConfig {
  static constexpr bool kTf32 = std::is_same_v<T, float>;
  static constexpr bool kF64 = std::is_same_v<T, double>;
  static_assert(sizeof(T) == 2 || kTf32 || kF64, "bf16, f16, f32 and f64");
  using Acc = AccType<T>;
  static_assert(NT % 8 == 0, "the n-tile is whole MMA columns");
  static constexpr int kItem = static_cast<int>(sizeof(T));
  static constexpr int kRows = kRMmaRows;
  static constexpr int kConsumerWarps = kRows / 16;
  static constexpr int kConsumers = 32 * kConsumerWarps;
  static constexpr int kThreads = kConsumers + 32;   // and the producer's warp
  static constexpr int kChunkK = RMmaChunkK(kItem);  // t1
  static constexpr int kSegBytes = kRMmaSegBytes;
  static constexpr bool kVecRows = true;
  static constexpr int kBoxK = 128 / kItem;  // one 128-byte swizzled row
  static constexpr int kBoxBytes = kRows * 128;
  static constexpr int kAStageBytes = kChunkK / kBoxK * kBoxBytes;
  static constexpr int kBStride = RMmaBStride(kItem);
  static constexpr int kBColBytes = kBStride * kItem;
  static constexpr int kBPlaneBytes = NT * kBColBytes;
  static constexpr int kBStageBytes = RMmaBStageBytes(kItem, NT);
  static constexpr int kStageTx = kAStageBytes + kBStageBytes;  // bytes a stage's copies complete
  static constexpr int kNTiles8 = NT / 8;
  static constexpr int kRedStride = NT | 1;
  static constexpr int kRedBytes = RReduceBytes(kRows, NT, kItem);
  // Shared memory besides the ring: 1 KB to align it (the swizzle follows
  // address bits), a full and an empty mbarrier per stage, the output staging.
  static constexpr int kFixedBytes = 1024 + 16 * kMaxStages + kRedBytes;
  // f32 on warpgroup MMAs: B's stage image as K-major swizzled boxes
  // (Tsm2MmaImageKernel with kForTmaTile), a box per 32 k of NT rows x 128 bytes.
  static constexpr int kWgBoxBytes = NT * 128;
  static constexpr int kWgPlaneBytes = kChunkK / kBoxK * kWgBoxBytes;
  static_assert(!kTf32 || (2 * kWgPlaneBytes <= kBStageBytes && kBStageBytes % 1024 == 0),
                "both planes fit the stage image, whose ring slots are whole swizzle atoms");
  static_assert(kChunkK % kBoxK == 0 && kBoxBytes % 1024 == 0, "stages of whole swizzle atoms");
  static_assert(kBStageBytes % 16 == 0, "bulk copies of whole 16-byte vectors");
  static_assert(kRows * kRedStride * int{sizeof(Acc)} <= kRedBytes,
                "the fragments fit the output staging");
};

// The consumer warps' barrier (the producer's warp never joins it). Not
// bar.sync: that is barrier.sync.aligned, which needs each warp converged at
// the instruction, and a warp split by a per-row guard (the tail tile's rows
// past m) or by its mbarrier spin need not be; there an aligned barrier could
// release the block early, and the tail tile's copy-out then read staging
// that other warps had not yet filled (rows of C left unwritten).
template <int kConsumers>
__device__ __forceinline__ void ConsumerSync() {
  asm volatile("barrier.sync 1, %0;\n" ::"n"(kConsumers) : "memory");
}

// Whether `v` holds in any consumer thread (a barrier for them all; not
// aligned either, as above).
template <int kConsumers>
__device__ __forceinline__ bool ConsumerAny(bool v) {
  uint32_t any;
  asm volatile(
      "{\n"
      ".reg .pred p, q;\n"
      "setp.ne.u32 p, %1, 0;\n"
      "barrier.red.or.pred q, 1, %2, p;\n"
      "selp.u32 %0, 1, 0, q;\n"
      "}\n"
      : "=r"(any)
      : "r"(static_cast<uint32_t>(v)), "n"(kConsumers)
      : "memory");
  return any != 0;
}

// acc += A[the warp's 16 rows of the stage, all its k] * B stage. a_st: the
// stage's first box; rows are 128-byte box rows in the 128-byte swizzle
// (16-byte chunk c of row r at c ^ (r % 8)).
template <typename T, typename Cfg>
__device__ __forceinline__ void MmaStageSwizzled(const char* a_st, const char* b_st, int warp,
                                                 float (&acc)[Cfg::kNTiles8][4]) {
  const int lane = threadIdx.x % 32;
  // ldmatrix rows lane % 16 of the warp's 16, at k chunk lane / 16 of a step.
  const int row = warp * 16 + lane % 16;
  const char* a_row = a_st + row * 128;
  const int swz = row % 8;
  const char* b_ld = BLdAddress<Cfg::kBColBytes>(b_st);
#pragma unroll
  for (int s = 0; s < Cfg::kChunkK / 16; ++s) {
    constexpr int kStepsPerBox = Cfg::kBoxK / 16;
    const int chunk = (s % kStepsPerBox) * 2 + lane / 16;
    uint32_t a[4];
    LdMatrixX4(a_row + (s / kStepsPerBox) * Cfg::kBoxBytes + ((chunk ^ swz) * 16), a);
    MmaK16<T, Cfg::kNTiles8, Cfg::kBColBytes>(a, b_ld, s, acc);
  }
}

// f32: the same in three TF32 products (tsm2_mma.cuh MmaStageTf32With), in
// builds without the warpgroup MMAs below. A's fragments come from ldmatrix
// as bf16's do: an 8 x 8 matrix of 16-bit
// elements is 8 rows x 4 words, and lane (g, t) gets word t of row g, which
// is the TF32 fragment (matrices: rows 0-7 and 8-15 at k 0-3, then at k 4-7).
template <typename Cfg>
__device__ __forceinline__ void MmaStageTf32Swizzled(const char* a_st, const char* b_st, int warp,
                                                     float (&acc)[Cfg::kNTiles8][4],
                                                     float (&cross)[Cfg::kNTiles8][4]) {
  const int lane = threadIdx.x % 32;
  const int row = warp * 16 + lane % 16;
  const char* a_row = a_st + row * 128;
  const int swz = row % 8;
  MmaStageTf32With<Cfg>(
      Cfg::kChunkK / 8,
      [&](int s, float (&a)[4]) {
        constexpr int kStepsPerBox = Cfg::kBoxK / 8;
        const int chunk = (s % kStepsPerBox) * 2 + lane / 16;
        uint32_t w[4];
        LdMatrixX4(a_row + (s / kStepsPerBox) * Cfg::kBoxBytes + ((chunk ^ swz) * 16), w);
#pragma unroll
        for (int e = 0; e < 4; ++e) a[e] = __uint_as_float(w[e]);
      },
      b_st, acc, cross);
}

// f64: a 16-row DMMA (f64_mma.cuh) per n-tile and k-step of 4, the warp's
// rows g and g + 8. ldmatrix hands out 32-bit words, so a lane reads
// its elements of A (row g or g + 8, k q of the step) from the swizzled box
// itself; B's image is in fragment order (Tsm2MmaImageKernel), a conflict-free
// 8-byte load per lane and n-tile. The sums are IEEE f64 operations, so an
// Inf or NaN needs no recomputation.
template <typename Cfg>
__device__ __forceinline__ void MmaStageF64Swizzled(const char* a_st, const char* b_st, int warp,
                                                    double (&acc)[Cfg::kNTiles8][4]) {
  constexpr int kN8 = Cfg::kNTiles8, kPerBox = Cfg::kBoxK;  // elements of a box row
  const int lane = threadIdx.x % 32, q = lane % 4;
  const int r0 = warp * 16 + lane / 4;  // and r0 + 8, the same row of a swizzle atom
  const char* row0 = a_st + r0 * 128;
  const int swz = r0 % 8;
  const double* frags = reinterpret_cast<const double*>(b_st);
  // Two k-steps at a time: unrolled whole, the loads hoisted ahead of the
  // DMMAs spilled at 64 columns.
#pragma unroll 2
  for (int s = 0; s < Cfg::kChunkK / 4; ++s) {
    const int k = 4 * s + q, kb = k % kPerBox;
    const int off = k / kPerBox * Cfg::kBoxBytes + ((kb / 2) ^ swz) * 16 + kb % 2 * 8;
    const double a0 = *reinterpret_cast<const double*>(row0 + off);
    const double a1 = *reinterpret_cast<const double*>(row0 + 8 * 128 + off);
#pragma unroll
    for (int t = 0; t < kN8; ++t) {
      const double b = frags[(s * kN8 + t) * 32 + lane];
      MmaF64(acc[t], a0, a1, b);
    }
  }
}

#if TSM2_R_WGMMA_TF32
// f32 on sm_90a: the same three TF32 products as warpgroup MMAs, which take
// a warpgroup's 64 x NT x 8 products per instruction instead of mma.sync's
// 16 x 8 x 8. On mma.sync the tile ran R 20480 x 20480 x 64 in 1.11 ms on
// an H200 (145 TFLOP/s of TF32 products, a third of the memory floor); on
// warpgroup MMAs, in 0.71 ms. Each warp splits its A fragments (ldmatrix,
// as above) in registers and the warpgroup's MMAs read them from there and
// B's hi and lo planes from the stage image. A k-step's MMAs run while the
// warp loads and splits the next. `part` takes the stage's sums from zero,
// added to `acc` with f32 adds as in MmaStageTf32With, but with the cross
// terms in it too: a third set of sums does not fit beside the others at
// 64 columns (ptxas spilled), since a warp scheduler's 16,384 registers
// serve three of the block's nine warps. An Inf or NaN among the inputs
// then shows as a NaN in `acc`. The warpgroup's 64 rows are warp w's 16 at
// 16 w, the rows the epilogue expects.
template <typename Cfg>
__device__ __forceinline__ void WgmmaStageTf32(const char* a_st, const char* b_st, int warp,
                                               float (&acc)[Cfg::kNTiles8][4],
                                               float (&part)[Cfg::kNTiles8][4]) {
  constexpr int kSteps = Cfg::kBoxK / 8;  // k-steps of 8 per 128-byte box
  const int lane = threadIdx.x % 32;
  const int row = warp * 16 + lane % 16;
  const char* a_row = a_st + row * 128;
  const int swz = row % 8;
  const uint32_t b_hi = SmemAddr(b_st), b_lo = b_hi + Cfg::kWgPlaneBytes;
  uint32_t ah[2][4], al[2][4];
#pragma unroll
  for (int s = 0; s < Cfg::kChunkK / 8; ++s) {
    const int box = s / kSteps, ks = s % kSteps, buf = s % 2;
    uint32_t w[4];
    LdMatrixX4(a_row + box * Cfg::kBoxBytes + (((2 * ks + lane / 16) ^ swz) * 16), w);
#pragma unroll
    for (int e = 0; e < 4; ++e) SplitTf32Trunc(__uint_as_float(w[e]), ah[buf][e], al[buf][e]);
    WgmmaFence();
    const uint32_t off = box * Cfg::kWgBoxBytes + 32 * ks;
    WgmmaTf32RegARow(part, ah[buf], WgmmaDescSw128(b_hi + off), s > 0);
    WgmmaTf32RegARow(part, ah[buf], WgmmaDescSw128(b_lo + off), true);
    WgmmaTf32RegARow(part, al[buf], WgmmaDescSw128(b_hi + off), true);
    WgmmaCommit();
    // The previous step's products are done: its fragments may be overwritten.
    WgmmaWait<1>();
  }
  WgmmaWait<0>();
  WgmmaFenceTiles(part);
#pragma unroll
  for (int j = 0; j < Cfg::kNTiles8; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] += part[j][e];
  }
}
#endif

// The producer (one thread): every unit's stage into the ring, `stages`
// ahead of the consumers, as two tensor-map boxes of A and a bulk copy of
// B's stage image completing on the stage's full mbarrier.
template <typename Cfg>
__device__ __forceinline__ void ProduceStages(const Tsm2Args& p, const CUtensorMap* a_map,
                                              int64_t u_begin, int64_t count, char* a_ring,
                                              char* b_ring, uint32_t full, uint32_t empty) {
  constexpr int kRows = Cfg::kRows;
  const int stages = p.stages;
  PrefetchTensorMap(a_map);
  const uint64_t evict_first = L2EvictFirst();  // A is read once
  Cursor at = DecodeUnit(p, u_begin);
  int slot = 0;
  uint32_t phase = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (i >= stages) MbarWait(empty + 8 * slot, phase ^ 1);
    const uint32_t bar = full + 8 * slot;
    MbarArriveExpectTx(bar, Cfg::kStageTx);
    const uint32_t a_st = SmemAddr(a_ring + slot * Cfg::kAStageBytes);
    const int k0 = at.chunk * Cfg::kChunkK, r0 = at.row_tile * kRows;
    const int batch = p.a_batch_stride == 0 ? 0 : at.batch;
#pragma unroll
    for (int b = 0; b < Cfg::kChunkK / Cfg::kBoxK; ++b) {
      TmaLoad3d(a_st + b * Cfg::kBoxBytes, a_map, k0 + b * Cfg::kBoxK, r0, batch, bar, evict_first);
    }
    const int64_t b_batch = p.b_batch_stride == 0 ? 0 : at.batch;
    const char* image =
        static_cast<const char*>(p.b_image) +
        ((b_batch * p.n_tiles + at.n_tile) * p.chunks + at.chunk) * Cfg::kBStageBytes;
    BulkCopyToShared(SmemAddr(b_ring + slot * Cfg::kBStageBytes), image, Cfg::kBStageBytes, bar);
    Advance(p, at);
    if (++slot == stages) slot = 0, phase ^= 1;
  }
}

// A finished tile's sums, staged in `red` (row r's at r * kRedStride), out
// to C by the consumers. Not inlined: it needs a whole row in registers,
// which beside the main loop's sums made ptxas spill inside that loop (it
// has 168 registers a thread: a warp scheduler's 16,384 serve three of the
// block's nine warps).
template <typename T, int NT, typename Cfg>
__device__ __noinline__ void WriteStagedTile(const Tsm2Args& p, const Cursor& uc, char* red_bytes) {
  using Acc = typename Cfg::Acc;
  const Acc* red = reinterpret_cast<const Acc*>(red_bytes);
  WriteRTile<NT, Cfg::kRows>(
      p, uc, red_bytes, Cfg::kConsumers,
      [&](const OutLayout& o, int offc, int rows) {
        Acc row[NT];
        const int own = threadIdx.x;
        if (own < rows) {
#pragma unroll
          for (int j = 0; j < NT; ++j) row[j] = red[own * Cfg::kRedStride + j];
        }
        ConsumerSync<Cfg::kConsumers>();  // every row is read before the staging takes it
        if (own < rows) PutRow<T, NT>(o, p.out_f32, red_bytes, own, offc, row);
      },
      [] { ConsumerSync<Cfg::kConsumers>(); });
}

// The consumers (a warp per 16 rows): each stage's MMAs, then each finished
// tile's sums out through the output staging (or to the workspace where the
// tile is split between blocks).
template <typename T, int NT, typename Cfg>
__device__ __forceinline__ void ConsumeStages(const Tsm2Args& p, int64_t u_begin, int64_t count,
                                              const char* a_ring, const char* b_ring, uint32_t full,
                                              uint32_t empty, char* red_bytes) {
  constexpr int kRows = Cfg::kRows, kN8 = Cfg::kNTiles8;
  const int stages = p.stages;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  using Acc = typename Cfg::Acc;
  Acc* red = reinterpret_cast<Acc*>(red_bytes);
  // Warpgroup MMAs are the 128 threads' together: a warpgroup skips a stage
  // only where all its 64 rows are past m.
  constexpr bool kWgmma = Cfg::kTf32 && TSM2_R_WGMMA_TF32;
  const int first_row = kWgmma ? warp / 4 * 64 : warp * 16;
  constexpr int kCross = kWgmma ? 1 : kN8;
  Acc acc[kN8][4];
  float cross[kCross][4];                     // mma.sync's f32 hi*lo + lo*hi
  [[maybe_unused]] float stage_sums[kN8][4];  // warpgroup MMAs: a stage's sums
#pragma unroll
  for (int t = 0; t < kN8; ++t) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[t][e] = 0.0f;
  }
#pragma unroll
  for (int t = 0; t < kCross; ++t) {
#pragma unroll
    for (int e = 0; e < 4; ++e) cross[t][e] = 0.0f;
  }

  Cursor uc = DecodeUnit(p, u_begin);
  int slot = 0;
  uint32_t phase = 0;
  for (int64_t it = 0; it < count; ++it) {
    MbarWait(full + 8 * slot, phase);
    // Warps whose rows are all past m (the last row tile) have nothing to add.
    if (static_cast<int64_t>(uc.row_tile) * kRows + first_row < p.m) {
      const char* a_st = a_ring + slot * Cfg::kAStageBytes;
      const char* b_st = b_ring + slot * Cfg::kBStageBytes;
      if constexpr (kWgmma) {
#if TSM2_R_WGMMA_TF32
        WgmmaStageTf32<Cfg>(a_st, b_st, warp, acc, stage_sums);
#endif
      } else if constexpr (Cfg::kTf32) {
        MmaStageTf32Swizzled<Cfg>(a_st, b_st, warp, acc, cross);
      } else if constexpr (Cfg::kF64) {
        MmaStageF64Swizzled<Cfg>(a_st, b_st, warp, acc);
      } else {
        MmaStageSwizzled<T, Cfg>(a_st, b_st, warp, acc);
      }
    }
    // Every consumer thread arrives once it has read the stage: f64's
    // fragments are each lane's own loads, and one lane's arrival after a
    // __syncwarp() leaves compute-sanitizer's racecheck reporting them
    // against the producer's next copy into the slot.
    MbarArrive(empty + 8 * slot);
    if (++slot == stages) slot = 0, phase ^= 1;

    if (uc.chunk == p.chunks - 1 || it == count - 1) {
      const bool begun_here = it >= uc.chunk;
      const bool whole = begun_here && uc.chunk == p.chunks - 1;
      // This lane's sums: rows r and r + 8 of its warp's 16, columns c, c + 1
      // of each 8-column n-tile.
      const int r = warp * 16 + lane / 4, c = 2 * (lane % 4);
      if constexpr (Cfg::kTf32) {
        // A NaN in the cross sums (warpgroup MMAs: the sums) of rows below m:
        // an Inf or NaN among the inputs, which the split turned into NaN
        // (tsm2_mma.cuh).
        bool poisoned = false;
#pragma unroll
        for (int t = 0; t < kN8; ++t) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int64_t row = static_cast<int64_t>(uc.row_tile) * kRows + r + 8 * (e / 2);
            if constexpr (kWgmma) {
              poisoned |= row < p.m && isnan(acc[t][e]);
            } else {
              poisoned |= row < p.m && isnan(cross[t][e]);
              acc[t][e] += cross[t][e];
              cross[t][e] = 0.0f;
            }
          }
        }
        if (ConsumerAny<Cfg::kConsumers>(poisoned)) {
          // This block's part of the tile: from its first chunk of it to this one.
          const int64_t first = begun_here ? 0 : uc.chunk - it;
          const int64_t end = (static_cast<int64_t>(uc.chunk) + 1) * Cfg::kChunkK;
          ExactSums<Cfg>(p, uc, first * Cfg::kChunkK, end < p.k ? end : p.k, acc);
        }
      }
      if (!whole) {
        Acc* part = static_cast<Acc*>(p.partials) +
                    (static_cast<int64_t>(blockIdx.x) * 2 + (begun_here ? 1 : 0)) * kRows * NT;
#pragma unroll
        for (int t = 0; t < kN8; ++t) {
          part[r * NT + t * 8 + c] = acc[t][0];
          part[r * NT + t * 8 + c + 1] = acc[t][1];
          part[(r + 8) * NT + t * 8 + c] = acc[t][2];
          part[(r + 8) * NT + t * 8 + c + 1] = acc[t][3];
        }
      } else {
        // The previous tile's staging has been copied out (no barrier per
        // stage orders it here).
        ConsumerSync<Cfg::kConsumers>();
#pragma unroll
        for (int t = 0; t < kN8; ++t) {
          red[r * Cfg::kRedStride + t * 8 + c] = acc[t][0];
          red[r * Cfg::kRedStride + t * 8 + c + 1] = acc[t][1];
          red[(r + 8) * Cfg::kRedStride + t * 8 + c] = acc[t][2];
          red[(r + 8) * Cfg::kRedStride + t * 8 + c + 1] = acc[t][3];
        }
        ConsumerSync<Cfg::kConsumers>();
        WriteStagedTile<T, NT, Cfg>(p, uc, red_bytes);
      }
#pragma unroll
      for (int t = 0; t < kN8; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
    }
    Advance(p, uc);
  }
}

// a_map: A as [batch_a][m][k], boxes of kRows x 128 bytes in the 128-byte
// swizzle (tensor_maps.h EncodeRowTensorMap); a batch of 1 where A is shared.
template <typename T, int NT, typename Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    Tsm2MmaTmaKernel(const __grid_constant__ Tsm2Args p,
                     const __grid_constant__ CUtensorMap a_map) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(16) char smem_raw[];
  const uint32_t raw = SmemAddr(smem_raw);
  char* a_ring = smem_raw + (((raw + 1023u) & ~1023u) - raw);
  const int stages = p.stages;
  char* b_ring = a_ring + stages * Cfg::kAStageBytes;
  const uint32_t full = SmemAddr(b_ring + stages * Cfg::kBStageBytes), empty = full + 8 * stages;
  char* red_bytes = b_ring + stages * Cfg::kBStageBytes + 16 * stages;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t u_begin = UnitBegin(blockIdx.x, p.units, p.blocks);
  const int64_t count = UnitBegin(blockIdx.x + 1, p.units, p.blocks) - u_begin;

  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      MbarInit(full + 8 * s, 1);
      MbarInit(empty + 8 * s, Cfg::kConsumers);
    }
    MbarInitFence();
  }
  __syncthreads();

  // The producer's warp (one thread issues) and the consumers' warps meet
  // again only at the end, where every stage has been consumed.
  if (warp == Cfg::kConsumerWarps) {
    if (lane == 0) ProduceStages<Cfg>(p, &a_map, u_begin, count, a_ring, b_ring, full, empty);
  } else {
    ConsumeStages<T, NT, Cfg>(p, u_begin, count, a_ring, b_ring, full, empty, red_bytes);
  }
  __syncthreads();
#else
  __trap();  // the planner launches it on sm_90 and later only
#endif
}

}  // namespace tsm2

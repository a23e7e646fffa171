// TSM2S by tensor-map copies, for bf16 and f16 on sm_90: C[m, n] = A[m, k] @
// B[k, n], m <= 16, one block per column tile over the whole contraction: no
// cluster, no partial sums, the grid as many waves as it needs. The plan
// (split_plan.h STmaCols) picks 64-column tiles where 64 of them or more fit
// the cluster kernel's one wave (4096 x 4096: 64 blocks, as cuBLAS runs it),
// 128-column tiles beyond (256-byte runs of each row of B: at 8192 x 14336 a
// copy-only probe moved 128-byte runs at 94-97% of a plain read and 256-byte
// runs at its full speed; benchmarks/lab/s_lab.cu, probe cases).
//
// A stage is 16 KB of B (64 rows x 128 columns as two 64-column boxes, or
// 128 rows x 64 columns as one) plus the same rows' columns of A as 16 x 64
// boxes, all in the tensor map's 128-byte swizzle (chunk c of a 128-byte row
// r lands at c ^ (r % 8), which is what the ldmatrix addressing expects). One
// thread of a ninth warp issues them and they complete on the stage's "full"
// mbarrier; each consumer warp arrives on the stage's "empty" mbarrier when
// done, and the producer refills the slot once all eight have. No block-wide
// barrier per stage (the cp.async kernels wait on their slowest thread's
// copies and a __syncthreads every stage). Rows past k, columns past n and
// A's rows past m arrive as zeros (the boxes' out-of-bounds fill), so every
// edge is handled by the copies.
//
// Consumer warp w multiplies 32 columns (w % kWarpsN) over every kWK-th k16
// step of a stage (w / kWarpsN) with mma.sync m16n8k16; each stage's chain
// starts from zero and is added to the warp's running f32 sum, as in the
// other half-precision kernels. The kWK groups are added in a fixed order at
// the end (bitwise reproducible).
//
// What a launch costs beyond its stream of B matters at 4096 x 4096 (~13.5
// us, ~11 of them streaming): under XLA's command buffers PDL did not hide
// one kernel's start behind the last one's end (split_plan.h, STuning::kPdl
// and kTmaEarly), so the start is paid in full.
// The producer therefore prefetches the two tensor maps, sets up the ring and
// issues its first stages before the block barrier, and B's copies carry an
// L2 evict-first policy: B is read once, and without it the stream pushes
// out of L2 the lines read again at every launch (the kernel's code, A).
// Lab on an H100 without PDL (A and B rotated), bf16 m x 4096 x 4096,
// m = 1 / 8 / 16: 13.85 / 13.96 / 14.08 us before, 13.80 / 13.84 / 13.91
// with the prefetch, 13.68 / 13.76 / 13.87 also issuing early, 13.48 / 13.52
// / 13.55 also evicting B first. An evict-last policy on A did not help.
// A's copies and C's stores (st.global.cs) are evict-first too. Every block
// reads A's lines within a few stages of each other, and A is dead once the
// kernel ends; C is read at most by the next kernel, right after. At normal
// priority, the A's and C's of earlier launches pile up in L2, because the
// evict-first B goes before them, and once they fill ~32 MB the stream slows.
// The harness gives each of its 256 products its own A and C, and showed
// this as a growth with m: 13.4 / 13.8 / 14.0 us at m = 1 / 8 / 16.
// Lab without PDL, A and C rotated over 256 copies:
// - bf16 m x 4096 x 4096, m = 1 / 8 / 16:
//   - as before: 13.49 / 14.00 / 14.27 us;
//   - A evict-first: 13.48 / 13.60 / 14.22;
//   - A and C evict-first: 13.49 / 13.63 / 14.02.
// - m x 8192 x 14336, m = 1 / 8 / 16: 77.49 / 78.60 / 79.52 with A
//   evict-first, 77.44 / 77.97 / 78.56 with C too.
// - With 7 copies (A and C stay in L2) neither cost anything: within 0.1 us.
// - Warming A or C in L2 at the start made it worse (13.66-14.50).
//
// Harness (device clock), bf16, m = 1 / 8 / 16:
// - m x 4096 x 4096: 13.36 / 13.61 / 13.83 us against XLA's dot 14.31 /
//   14.50 / 15.11 and torch 13.87 / 13.80 / 16.67;
// - m x 8192 x 14336: 77.10 / 77.49 / 78.32 us (98.6-97.4% of the read
//   ceiling) against XLA's dot 79.21 / 79.59 / 81.63 and torch 79.65 /
//   78.88 / 79.22.
#pragma once

#include <cuda.h>  // CUtensorMap (a type only: nothing links libcuda)

#include <cstdint>

#include "ffi/common/cluster_pipe.cuh"
#include "ffi/common/half_mma.cuh"
#include "ffi/common/pdl.cuh"
#include "ffi/matmul/kernels/small_left_cluster.cuh"
#include "ffi/matmul/kernels/split_reduce.cuh"
#include "ffi/matmul/split_plan.h"

namespace tsm2 {

// kCols = 128: stages of 64 rows (two 64-column boxes of B, one box of A);
// kCols = 64: stages of 128 rows (one box of B, two of A). 16 KB of B either
// way; 8 warps split the columns into 32-column slices and a stage's k16
// steps between kWK groups.
template <int kCols>
struct STmaSmem {
  static constexpr int kConsumerWarps = 8, kThreads = 32 * (kConsumerWarps + 1);
  static constexpr int kRows = STmaRows(kCols), kStages = STmaStages(kCols);
  static constexpr int kBoxes = kCols / 64, kABoxes = kRows / 64;
  static constexpr int kBox = kRows * 128;  // one 64-column box of B: kRows rows of 128 bytes
  static constexpr int kBStage = kBoxes * kBox, kABox = 16 * 128, kAStage = kABoxes * kABox;
  static constexpr int kStageTx = kBStage + kAStage;  // bytes each stage's copies complete
  static constexpr int kWarpsN = kCols / 32, kWK = kConsumerWarps / kWarpsN;
  static constexpr int kK16PerWarp = kRows / 16 / kWK;
  static constexpr int kLdp = kCols + 8;  // row stride of the partial sums (floats)
  // 1 KB to align the first stage (the swizzle follows address bits), the
  // stages, and a full and an empty mbarrier per stage.
  static constexpr int kBytes = 1024 + kStages * (kBStage + kAStage) + 16 * kStages;
  static_assert(kCols == 64 || kCols == 128, "whole 64-column boxes, at most 4 column slices");
  static_assert(kRows % (16 * kWK) == 0, "whole k16 steps per group");
  static_assert(kWK * 16 * kLdp * 4 <= kStages * kBStage, "the partial sums fit in the ring");
};

// b_map: B as [batch_b][k][n], boxes of kRows x 64; a_map: A as
// [batch_a][m][k], boxes of 16 x 64; a batch of 1 where the operand is
// shared (p.a_batch_stride or p.b_batch_stride 0). Both 128-byte swizzled.
// early_dependents: SplitPlan::early_dependents (split_plan.h).
template <typename T, int kCols, typename Tune>
__global__ void __launch_bounds__(STmaSmem<kCols>::kThreads, 1)
    Tsm2STmaKernel(const __grid_constant__ SplitArgs p, const __grid_constant__ CUtensorMap b_map,
                   const __grid_constant__ CUtensorMap a_map, bool early_dependents) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using Sm = STmaSmem<kCols>;
  constexpr int S = Sm::kStages;
  extern __shared__ __align__(16) char smem_raw[];
  const uint32_t raw = SmemAddr(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  char* smem = smem_raw + (base - raw);
  const uint32_t ring = base, aring = base + S * Sm::kBStage;
  const uint32_t full = aring + S * Sm::kAStage, empty = full + 8 * S;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int tile = static_cast<int>(blockIdx.x % static_cast<uint32_t>(p.tiles_n));
  const int batch = static_cast<int>(blockIdx.x / static_cast<uint32_t>(p.tiles_n));
  const int col0 = tile * kCols;
  const int steps = static_cast<int>((p.k + Sm::kRows - 1) / Sm::kRows);
  // One thread of the last warp is the producer: it issues every stage's
  // copies, S ahead of the consumers.
  const bool producer = warp == Sm::kConsumerWarps && lane == 0;
  const int bb = p.b_batch_stride ? batch : 0, ab = p.a_batch_stride ? batch : 0;
  // B is read once, and A is dead after this kernel (see the file's comment).
  const uint64_t evict_first = L2EvictFirst();
  auto issue = [&](int it) {
    const int s = it % S;
    if (it >= S) MbarWait(empty + 8 * s, (it / S - 1) & 1);
    MbarArriveExpectTx(full + 8 * s, Sm::kStageTx);
    const int r0 = it * Sm::kRows;
#pragma unroll
    for (int b = 0; b < Sm::kBoxes; ++b) {
      TmaLoad3d(ring + s * Sm::kBStage + b * Sm::kBox, &b_map, col0 + 64 * b, r0, bb, full + 8 * s,
                evict_first);
    }
#pragma unroll
    for (int b = 0; b < Sm::kABoxes; ++b) {
      TmaLoad3d(aring + s * Sm::kAStage + b * Sm::kABox, &a_map, r0 + 64 * b, 0, ab, full + 8 * s,
                evict_first);
    }
  };
  // The producer sets up the ring and issues the first S stages before the
  // block barrier (see the file's comment).
  int issued = 0;
  if (producer) {
    PrefetchTensorMap(&b_map);
    PrefetchTensorMap(&a_map);
    for (int s = 0; s < S; ++s) {
      MbarInit(full + 8 * s, 1);
      MbarInit(empty + 8 * s, Sm::kConsumerWarps);
    }
    MbarInitFence();
    FenceProxyAsyncShared();  // the copies complete on the barriers just made
    if constexpr (Tune::kPdl) {
      // Launched as a programmatic dependent: the previous kernel's writes
      // (our operands, or readers of C) are settled only after this.
      WaitForPrevious();
    }
    for (; issued < S && issued < steps; ++issued) issue(issued);
  }
  __syncthreads();
  if constexpr (Tune::kPdl) {
    // Every thread waits too: the consumers' stores of C must follow the
    // previous kernel's reads of that buffer.
    WaitForPrevious();
  }

  float acc[4][4];  // four m16n8 accumulators
  InitSums(acc, p.k);
  const int wn = warp % Sm::kWarpsN, wk = warp / Sm::kWarpsN;
  if (warp == Sm::kConsumerWarps) {
    if (producer) {
      for (int it = issued; it < steps; ++it) issue(it);
      if (early_dependents) AllowNextToStart();
    }
  } else {
    // ldmatrix rows: lane l addresses row l % 8 of matrix l / 8; A's matrices
    // are (rows 0-7, k 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15), B's per
    // 16 columns h (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15,
    // n 8-15). k16 steps start on multiples of 16 rows, so a lane's row % 8
    // is lane % 8 at every step.
    const int lrow = lane % 8 + 8 * (lane / 8 % 2), lhi = lane / 16;
    int b_off[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      b_off[h] = wn / 2 * Sm::kBox + lrow * 128 + 16 * ((4 * (wn % 2) + 2 * h + lhi) ^ (lane % 8));
    }
    for (int it = 0; it < steps; ++it) {
      const int s = it % S;
      MbarWait(full + 8 * s, (it / S) & 1);
      const char* st = smem + s * Sm::kBStage;
      const char* as = smem + (aring - base) + s * Sm::kAStage;
      float part[4][4];
      InitSums(part, p.k);
#pragma unroll
      for (int q = 0; q < Sm::kK16PerWarp; ++q) {
        const int kr = 16 * (wk + Sm::kWK * q);
        const int c = kr % 64 / 8 + lhi;  // A's chunk in its 64-column box kr / 64
        uint32_t fa[4], fb[2][4];
        LdMatrixX4(as + kr / 64 * Sm::kABox + lrow * 128 + 16 * (c ^ (lrow % 8)), fa);
#pragma unroll
        for (int h = 0; h < 2; ++h) LdMatrixX4Trans(st + kr * 128 + b_off[h], fb[h]);
#pragma unroll
        for (int f = 0; f < 4; ++f) {
          const uint32_t frag[2] = {fb[f / 2][2 * (f % 2)], fb[f / 2][2 * (f % 2) + 1]};
          MmaHalf<T>(part[f], fa, frag);
        }
      }
      __syncwarp();
      if (lane == 0) MbarArrive(empty + 8 * s);
#pragma unroll
      for (int f = 0; f < 4; ++f) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[f][e] += part[f][e];
      }
    }
  }
  __syncthreads();  // every stage consumed: the ring takes the partial sums

  // m16n8 accumulators: lane holds rows lane / 4 and lane / 4 + 8, columns
  // 2 (lane % 4) and the next, of each n8 tile. Only the m real rows are kept.
  float* part_s = reinterpret_cast<float*>(smem);  // [kWK][16][kLdp]
  if (warp < Sm::kConsumerWarps) {
#pragma unroll
    for (int f = 0; f < 4; ++f) {
      const int j = 32 * wn + 8 * f + 2 * (lane % 4);
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int i = lane / 4 + 8 * hh;
        if (i < p.m) {
          *reinterpret_cast<float2*>(part_s + (wk * 16 + i) * Sm::kLdp + j) =
              make_float2(acc[f][2 * hh], acc[f][2 * hh + 1]);
        }
      }
    }
  }
  __syncthreads();
  // Group 0's sums plus group 1's, four columns per thread; n % 8 == 0 (the
  // plan's condition), so a quad is wholly inside or outside n.
  constexpr int kQuads = kCols / 4;
  for (int e = tid; e < p.m * kQuads; e += Sm::kThreads) {
    const int i = e / kQuads, j = 4 * (e % kQuads);
    if (col0 + j >= p.n) continue;
    float4 sum = *reinterpret_cast<const float4*>(part_s + i * Sm::kLdp + j);
#pragma unroll
    for (int g = 1; g < Sm::kWK; ++g) {
      const float4 v = *reinterpret_cast<const float4*>(part_s + (g * 16 + i) * Sm::kLdp + j);
      sum.x += v.x;
      sum.y += v.y;
      sum.z += v.z;
      sum.w += v.w;
    }
    const int64_t at = (batch * p.m + i) * p.n + col0 + j;
    // Evict-first (st.global.cs): see the file's comment.
    if (p.out_f32) {
      __stcs(reinterpret_cast<float4*>(static_cast<float*>(p.c) + at), sum);
    } else {
      __stcs(reinterpret_cast<uint2*>(static_cast<T*>(p.c) + at),
             make_uint2(PackPair<T>(sum.x, sum.y), PackPair<T>(sum.z, sum.w)));
    }
  }
#else
  __trap();  // planned only on sm_90 and later (split_plan.h SPlan)
#endif
}

}  // namespace tsm2

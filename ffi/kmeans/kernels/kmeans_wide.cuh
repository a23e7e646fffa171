// One Lloyd iteration of k-means for f32 rows of 260..4096 elements and
// k <= 16 on tensor cores, reading X once from DRAM: the same outputs as
// KmeansStepKernel (kmeans.cuh) and KmeansMmaStepKernel (kmeans_mma.cuh).
//
// Why a third step: at d = 4096 the CUDA-core step ran at 2.68 reads of X. A
// row (16 KB) and the centroids (256 KB) do not fit one SM together, so each
// block of a thread-block cluster owns 512 columns and the cluster walks
// tiles of 16 rows. Twelve warps a block:
// - a producer warp fills six 33 KB stages with one bulk copy per row (two
//   tiles in flight while four are worked on);
// - eight math warps keep the centroids in registers, already split into
//   TF32 hi and lo (64 columns a warp: 64 registers a lane). They run the
//   distances of tile j (mma m16n8k8, C x X^T as hi*hi + hi*lo + lo*hi, as
//   kmeans_mma) and leave their partial dots in shared memory; then the
//   sums of tile j - kLag (onehot^T x (w * X), exact one-hot, hi + lo of
//   w * x), which accumulate in registers for the block's columns. They
//   never wait for each other, only for data, labels and buffers;
// - tile j belongs to rank j % ncl. Two control warps (a row group each)
//   add the math warps' partials in warp order and send them to the tile's
//   owner (st.async, completing on the owner's mbarrier), and later turn
//   the owner's labels into the one-hot fragments of the sums;
// - the owner warp of the tile's rank adds the ranks' partials in rank
//   order, takes the argmin, sends every block the labels, bad-row flags
//   and weights, and writes labels, mind, counts and inertia. It labels
//   every ncl-th tile, so its ~500 mostly dependent instructions a tile
//   have ncl tiles' time. In a cluster of one block (d <= 512) that would
//   be every tile, so there each control warp labels its row group itself.
// No block waits on a cluster-wide barrier in the loop. The alternatives
// measured (every block labelling every row; a pair of rows of every tile
// labelled on each rank) were bound by the math warps' 8.7 KB pushes and
// then by the labelling warp: 1.76 and 1.61 ms against 1.45 at n = 2.5e5,
// d = 4096 on an H100.
//
// Stage rows are padded and the lanes' rows and columns permuted
// (KmeansWideRow) so that the distance and the sum reads both hit 32
// distinct banks.
//
// Non-finite data: rows whose ||x||^2 or w^2 ||x||^2 is not finite, and
// centroids whose ||c||^2 is not, get exact f32 dots over the whole row from
// global memory (by the labelling warp), and such rows leave the tensor-core
// sums for an exact add from global memory, as in kmeans_mma. Every block
// writes its columns of the cluster's partial sums; rank 0 adds the
// labelling warps' counts and inertia in rank and warp order.
//
// The checked step (CHECK > 0, kmeans_row_check.cuh) adds to each control
// warp's push its rows' x . s over the block's columns (CUDA-core FMAs from
// the stage; see the control warps), sent with ||x||^2; the warp that takes
// the argmin adds the ranks' parts in rank order and checks the row. The
// math warps' code is that of the plain step.
#pragma once

#include <cooperative_groups.h>

#include <cstdint>

#include "ffi/common/cluster_pipe.cuh"
#include "ffi/common/kernel_utils.cuh"
#include "ffi/common/tf32.cuh"
#include "ffi/common/trace.h"
#include "ffi/kmeans/kernels/kmeans.cuh"
#include "ffi/kmeans/kernels/kmeans_mma.cuh"
#include "ffi/kmeans/plan.h"

namespace tsm2 {

// CHECK: the row check (kmeans_row_check.cuh) adds each sender's x . s of
// its rows to the owner's inbox.
template <int CHECK = 0>
struct KmeansWideConfig {
  static constexpr int kCols = kKmeansWideCols;  // columns per block
  static constexpr int kRows = 16, kRowGroups = kRows / 8;
  // Rows 8 rg + t and 8 rg + t + 4 (rg: row group, t: mma fragment column)
  // are pair 4 rg + t: a control lane's two rows (KmeansWideRow).
  static constexpr int kRowPairs = kRows / 2;
  static constexpr int kMathWarps = 8, kMathThreads = 32 * kMathWarps;
  static constexpr int kCtrlWarps = kRowGroups;              // one per row group
  static constexpr int kProducer = kMathWarps + kCtrlWarps;  // the warp that issues the copies
  static constexpr int kOwner = kProducer + 1;  // the warp that labels this rank's tiles
  static constexpr int kThreads = 32 * (kOwner + 1);
  static constexpr int kColsPerWarp = kCols / kMathWarps;  // 64
  static constexpr int kPairs = kColsPerWarp / 16;         // 16-column chunks (two k-steps each)
  static constexpr int kNTiles = kColsPerWarp / 8;         // n8 tiles of the sums per warp
  static constexpr int kStages = 6;
  static constexpr int kMaxCl = kKmeansWideMaxCluster;
  // Rows of a stage are kCols + 4 floats apart: with the distances' row order
  // (KmeansWideRow) both the distance and the sum reads hit 32 distinct banks.
  static constexpr int kStride = kCols + 4;
  static constexpr int kXBytes = kRows * kStride * 4;
  static constexpr int kStageBytes = kXBytes + kRows * 4;  // X, then the rows' weights
  // A math warp's partial per tile: dots [row group][lane][q] (q: mma
  // accumulator) and ||x||^2 [row], two tiles deep.
  static constexpr int kDots = kRowGroups * 32 * 4;
  // What every block sends a tile's owner (rank tile % ncl), in the owner's
  // inbox: each pair's dots [pair][sender][g][q] (kRecFloats), and its rows'
  // ||x||^2 [sender][pair][i] (and x . s, the same, when checked): kInBytes
  // from each sender.
  static constexpr int kRecFloats = 32;
  static constexpr int kRowVals = CHECK > 0 ? 2 : 1;  // ||x||^2 (and x . s) per row
  static constexpr int kInBytes = kRowPairs * (kRecFloats + 2 * kRowVals) * 4;
  // The sums of a tile run kLag tiles after its distances, so its labels
  // have kLag - 1 tiles' distances to arrive in; the control warps' outputs
  // for them are kBufs deep.
  static constexpr int kLag = 3, kBufs = kLag + 1;
  static constexpr int kOffRed = kStages * kStageBytes;                  // [2][math warp][kDots]
  static constexpr int kOffRedX = kOffRed + 2 * kMathWarps * kDots * 4;  // [2][math warp][kRows]
  static constexpr int kOffRec = kOffRedX + 2 * kMathWarps * kRows * 4;  // [pair][sender][32]
  static constexpr int kOffRecX = kOffRec + kRowPairs * kMaxCl * kRecFloats * 4;  // [sender][16]
  // Labels from each owner, two of its tiles deep: [owner][2][pair] uint4.
  static constexpr int kOffLabIn = kOffRecX + kMaxCl * kRows * 4;
  // The control warps' outputs for the sums: [kBufs][k-step][lane].
  static constexpr int kOffOneHot = kOffLabIn + kMaxCl * 2 * kRowPairs * 16;
  static constexpr int kOffLab = kOffOneHot + kBufs * kRowGroups * 32 * 16;  // [kBufs][kRows]
  static constexpr int kOffBad = kOffLab + kBufs * kRows * 4;  // [kBufs][row group] row masks
  static constexpr int kOffCnt =
      kOffBad + kBufs * kRowGroups * 4;  // [owner, control warps][17]: counts, inertia
  static constexpr int kOffCsq = kOffCnt + ((1 + kCtrlWarps) * 17 + 1) * 4;  // [16]
  // mbarriers (kBar* their indices): red full, red empty [2]; the inbox's
  // full; its empty at each sender [owner]; lab full [owner][2]; lab empty
  // at each owner [2]; ready, free [kBufs]; landed, drained [kStages].
  static constexpr int kBarRecFull = 4, kBarRecEmpty = 5, kBarLabFull = kBarRecEmpty + kMaxCl;
  static constexpr int kBarLabEmpty = kBarLabFull + 2 * kMaxCl, kBarReady = kBarLabEmpty + 2;
  static constexpr int kBarStage = kBarReady + 2 * kBufs;
  static constexpr int kOffRecQ = kOffCsq + 16 * 4;  // [sender][16] x . s (checked)
  static constexpr int kOffBar = kOffRecQ + (kRowVals - 1) * kMaxCl * kRows * 4;
  static constexpr int kSmemBytes = kOffBar + (kBarStage + 2 * kStages) * 8;
  static_assert(kColsPerWarp == 64 && kPairs == 4 && kNTiles == 8, "lane column maps below");
  static_assert(kRowGroups == 2 && kCtrlWarps == 2, "bad-row masks of two row groups");
  static_assert(kStages >= kLag + 2, "kLag + 1 tiles worked on, at least one loading");
  static_assert(kOffRec % 16 == 0 && kOffLabIn % 16 == 0 && kOffRecX % 8 == 0 && kOffRecQ % 8 == 0,
                "16- and 8-byte st.async");
  static_assert((kStride * 4) % 16 == 0 && kStageBytes % 16 == 0, "16-byte bulk copies");
  static_assert(kOffBar % 8 == 0, "mbarriers are 8-byte aligned");
  static_assert(kSmemBytes <= kKmeansSmemLimit, "shared memory");
};
// Fragment index n = 2 t + i of an 8-wide mma dimension goes to t + 4 i,
// so that the 8 lanes of a 16-byte shared-memory access (g = 2 p, 2 p + 1;
// t = 0..3) reach 8 distinct bank groups of a stage whose rows are 129
// 16-byte chunks apart. The distances use it for the rows (B's n), the sums
// for the chunks of a row; and the control warps see a lane's two rows of
// a row group as t and t + 4.
__device__ __forceinline__ int KmeansWideRow(int n) { return 4 * (n & 1) + (n >> 1); }

// Calls f(acc, cluster, column) for each of this lane's sum accumulators.
// n-tile nt = 4 j + e holds, for fragment column n, the block column
// col_w + 32 j + 4 KmeansWideRow(n) + e: a lane's B values for n-tiles
// 4 j .. 4 j + 3 are one 16-byte chunk of a row.
template <int NT, typename F>
__device__ __forceinline__ void ForEachWideSum(float (&sacc)[NT][4], int g, int t, int col_w,
                                               F&& f) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      f(sacc[nt][q], g + 8 * (q / 2), col_w + 32 * (nt / 4) + 4 * (t + 4 * (q % 2)) + nt % 4);
    }
  }
}

// Phase-cycle hooks (ffi/common/trace.h; empty unless TSM2_TRACE). Slots
// 0-4: thread 0, a math warp; 5, 6, 9, 12: the first control warp; 7, 8, 13,
// 14: the owner warp; 10-11: the producer; 15: tiles.
#define KMW_MARK_IF(cond, slot) TSM2_TRACE_PHASE_IF(cond, slot)
#define KMW_MARK(slot) KMW_MARK_IF(threadIdx.x == 0, slot)
#define KMW_MARK_CTRL(slot) KMW_MARK_IF(threadIdx.x == 32 * Cfg::kMathWarps, slot)
#define KMW_MARK_PROD(slot) KMW_MARK_IF(threadIdx.x == 32 * Cfg::kProducer, slot)
#define KMW_MARK_OWN(slot) KMW_MARK_IF(threadIdx.x == 32 * Cfg::kOwner, slot)

template <int CHECK = 0, typename Cfg = KmeansWideConfig<CHECK>>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    KmeansWideStepKernel(const __grid_constant__ KmeansArgs p) {
  // Clusters, mbarriers and asynchronous stores: sm_90 and later (the
  // planner takes this step only there; device.h HasClusters).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kRows = Cfg::kRows, kCols = Cfg::kCols, kStages = Cfg::kStages;
  constexpr int kRG = Cfg::kRowGroups, kRP = Cfg::kRowPairs;
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int ncl = static_cast<int>(cluster.num_blocks());
  const int64_t owner = blockIdx.x / ncl, owners = gridDim.x / ncl;
  extern __shared__ __align__(16) char smem[];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;  // mma fragment coordinates
  const bool math = warp < Cfg::kMathWarps;
  const float* x = static_cast<const float*>(p.x);
  const float* cg_ = static_cast<const float*>(p.c);
  const float* wg = static_cast<const float*>(p.w);
  const int d = p.d, k = p.k;
  const int col0 = rank * kCols;                            // this block's first column of X
  const int col_w = (math ? warp : 0) * Cfg::kColsPerWarp;  // a math warp's first column

  float* red = reinterpret_cast<float*>(smem + Cfg::kOffRed);
  float* redx = reinterpret_cast<float*>(smem + Cfg::kOffRedX);
  float* recs = reinterpret_cast<float*>(smem + Cfg::kOffRec);
  float* recx = reinterpret_cast<float*>(smem + Cfg::kOffRecX);
  uint4* lab_in = reinterpret_cast<uint4*>(smem + Cfg::kOffLabIn);
  uint4* oh_s = reinterpret_cast<uint4*>(smem + Cfg::kOffOneHot);
  int* lab_s = reinterpret_cast<int*>(smem + Cfg::kOffLab);
  uint32_t* bad_s = reinterpret_cast<uint32_t*>(smem + Cfg::kOffBad);
  float* cnt_s = reinterpret_cast<float*>(smem + Cfg::kOffCnt);
  float* csq_part = reinterpret_cast<float*>(smem + Cfg::kOffCsq);
  // Tile j belongs to rank j % ncl, as its (j / ncl)-th: "u" below.
  //   red full / empty [j % 2]: the math warps' partials are in red / the
  //     control warps have read them;
  //   rec full (an owner's, every tile it owns): every rank's records
  //     landed in the inbox; rec empty [owner] (a sender's): that owner has
  //     read this block's records of its last tile;
  //   lab full [owner][u % 2] (a receiver's): the owner's labels landed;
  //     lab empty [u % 2] (an owner's): every block has read them;
  //   ready / free [j % kBufs]: the control warps' labels, one-hot and
  //     bad-row masks for the sums / the math warps are done with them;
  //   landed / drained [j % kStages]: the stage's tile / its sums are done.
  const uint32_t bars = SmemAddr(smem + Cfg::kOffBar);
  auto red_full = [&](int b) { return bars + 8 * b; };
  auto red_empty = [&](int b) { return bars + 16 + 8 * b; };
  const uint32_t rec_full = bars + 8 * Cfg::kBarRecFull;
  auto rec_empty = [&](int o) { return bars + 8 * (Cfg::kBarRecEmpty + o); };
  auto lab_full = [&](int o, int u) { return bars + 8 * (Cfg::kBarLabFull + 2 * o + u % 2); };
  auto lab_empty = [&](int u) { return bars + 8 * (Cfg::kBarLabEmpty + u % 2); };
  auto ready = [&](int b) { return bars + 8 * (Cfg::kBarReady + b); };
  auto freed = [&](int b) { return ready(b) + 8 * Cfg::kBufs; };
  auto landed = [&](int j) {
    return bars + 8 * (Cfg::kBarStage + static_cast<uint32_t>(j % kStages));
  };
  auto drained = [&](int j) { return landed(j) + 8 * kStages; };
  // A cluster of one block (d <= 512) exchanges nothing: st.async and remote
  // arrivals need a cluster of two blocks or more (compute-sanitizer rejects
  // them), and its control warps label their row groups themselves.
  const bool alone = ncl == 1;
  if (tid == 0) {
    for (int b = 0; b < 2; ++b) {
      MbarInit(red_full(b), Cfg::kMathWarps);
      MbarInit(red_empty(b), Cfg::kCtrlWarps);
      MbarInit(lab_empty(b), ncl * Cfg::kCtrlWarps);
    }
    MbarInit(rec_full, 1);
    for (int o = 0; o < ncl; ++o) {
      MbarInit(rec_empty(o), 1);
      for (int u = 0; u < 2; ++u) MbarInit(lab_full(o, u), Cfg::kCtrlWarps);
    }
    for (int b = 0; b < Cfg::kBufs; ++b) {
      MbarInit(ready(b), Cfg::kCtrlWarps);
      MbarInit(freed(b), Cfg::kMathWarps);
    }
    for (int b = 0; b < kStages; ++b) {
      MbarInit(landed(b), 1);
      MbarInit(drained(b), Cfg::kMathWarps);
    }
    MbarInitFence();
  }

  const int64_t t_begin = owner * p.tiles / owners, t_end = (owner + 1) * p.tiles / owners;
  // 32-bit tile counters: the loops' divisions by the depths stay cheap.
  const int ntiles = static_cast<int>(t_end - t_begin);
  TSM2_TRACE_PHASES_BEGIN();
  auto stage_of = [&](int j) { return smem + (j % kStages) * Cfg::kStageBytes; };
  const int cols = d - col0 < kCols ? d - col0 : kCols;  // >= 4: every rank has columns
  if (cols < kCols && math) {
    for (int e = tid; e < kStages * kRows * (kCols - cols); e += Cfg::kMathThreads) {
      const int r = e / (kCols - cols);
      reinterpret_cast<float*>(
          stage_of(r / kRows))[(r % kRows) * Cfg::kStride + cols + e % (kCols - cols)] = 0.0f;
    }
  }

  // ||c||^2 over this block's columns (math warps), summed over the ranks
  // by the owning control warp after the barrier, which also makes the
  // mbarriers' initialisation visible and guarantees every block of the
  // cluster runs before any distributed shared memory access.
  for (int c = warp; c < 16 && math; c += Cfg::kMathWarps) {
    float s = 0;
    if (c < k) {
      for (int e = col0 + lane; e < col0 + kCols && e < d; e += 32) {
        const float v = cg_[int64_t{c} * d + e];
        s = fma(v, v, s);
      }
    }
    s = SumLanes<32>(s);
    if (lane == 0) csq_part[c] = s;
  }
  cluster.sync();

  float* part = static_cast<float*>(p.partials) + owner * KmeansPartialElems(d, k);
  if (math) {
    // This lane's A fragments of the centroids, split once: k-step (s, h)
    // takes fragment column t from column 16 s + 4 t + 2 h of the warp's and
    // t + 4 from the next one, the order in which a lane reads its chunk of
    // a row; rows g and g + 8 are centroids g and g + 8.
    uint32_t chi[Cfg::kPairs][2][4], clo[Cfg::kPairs][2][4];
#pragma unroll
    for (int s = 0; s < Cfg::kPairs; ++s) {
      const int col = col0 + col_w + 16 * s + 4 * t;
      const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
      const float4 a =
          g < k && col < d ? *reinterpret_cast<const float4*>(cg_ + int64_t{g} * d + col) : zero;
      const float4 b = g + 8 < k && col < d
                           ? *reinterpret_cast<const float4*>(cg_ + int64_t{g + 8} * d + col)
                           : zero;
      SplitTf32(a.x, chi[s][0][0], clo[s][0][0]);
      SplitTf32(b.x, chi[s][0][1], clo[s][0][1]);
      SplitTf32(a.y, chi[s][0][2], clo[s][0][2]);
      SplitTf32(b.y, chi[s][0][3], clo[s][0][3]);
      SplitTf32(a.z, chi[s][1][0], clo[s][1][0]);
      SplitTf32(b.z, chi[s][1][1], clo[s][1][1]);
      SplitTf32(a.w, chi[s][1][2], clo[s][1][2]);
      SplitTf32(b.w, chi[s][1][3], clo[s][1][3]);
    }
    float sacc[Cfg::kNTiles][4] = {};  // this lane's sums (ForEachWideSum)

    for (int j = 0; j < ntiles + Cfg::kLag; ++j) {
      if (j < ntiles) {
        // Distances of tile j over this warp's columns.
        MbarWait(landed(j), static_cast<uint32_t>(j / kStages) & 1);
        KMW_MARK(0);
        const float* xs = reinterpret_cast<const float*>(stage_of(j));
        // hi*hi in prt[1], the two cross terms in prt[0]: a third accumulator
        // set would not fit the 168 registers ten warps leave a thread.
        float prt[2][kRG][4] = {};
        float xsq[kRG] = {};
#pragma unroll
        for (int s = 0; s < Cfg::kPairs; ++s) {
          uint32_t bh[kRG][4], bl[kRG][4];
#pragma unroll
          for (int rg = 0; rg < kRG; ++rg) {
            const int r = 8 * rg + KmeansWideRow(g);
            const float4 v =
                *reinterpret_cast<const float4*>(xs + r * Cfg::kStride + col_w + 16 * s + 4 * t);
            xsq[rg] = fma(v.x, v.x, xsq[rg]);
            xsq[rg] = fma(v.y, v.y, xsq[rg]);
            xsq[rg] = fma(v.z, v.z, xsq[rg]);
            xsq[rg] = fma(v.w, v.w, xsq[rg]);
            SplitTf32Trunc(v.x, bh[rg][0], bl[rg][0]);
            SplitTf32Trunc(v.y, bh[rg][1], bl[rg][1]);
            SplitTf32Trunc(v.z, bh[rg][2], bl[rg][2]);
            SplitTf32Trunc(v.w, bh[rg][3], bl[rg][3]);
          }
#pragma unroll
          for (int h = 0; h < 2; ++h) {
#pragma unroll
            for (int rg = 0; rg < kRG; ++rg) {
              MmaTf32(prt[0][rg], clo[s][h], bh[rg][2 * h], bh[rg][2 * h + 1]);
              MmaTf32(prt[0][rg], chi[s][h], bl[rg][2 * h], bl[rg][2 * h + 1]);
              MmaTf32(prt[1][rg], chi[s][h], bh[rg][2 * h], bh[rg][2 * h + 1]);
            }
          }
        }
        KMW_MARK(1);
        // This warp's partial into red slot j % 2, once the control warps
        // have read tile j - 2's: no wait for the other math warps.
        const int b = j % 2;
        if (j >= 2) MbarWait(red_empty(b), static_cast<uint32_t>(j / 2 - 1) & 1);
        float* rw = red + (b * Cfg::kMathWarps + warp) * Cfg::kDots;
        float* rx = redx + (b * Cfg::kMathWarps + warp) * kRows;
#pragma unroll
        for (int rg = 0; rg < kRG; ++rg) {
          float4 a;
          a.x = prt[1][rg][0] + prt[0][rg][0];
          a.y = prt[1][rg][1] + prt[0][rg][1];
          a.z = prt[1][rg][2] + prt[0][rg][2];
          a.w = prt[1][rg][3] + prt[0][rg][3];
          *reinterpret_cast<float4*>(rw + (rg * 32 + lane) * 4) = a;
          float xr = xsq[rg];
          xr += __shfl_xor_sync(0xffffffffu, xr, 1);
          xr += __shfl_xor_sync(0xffffffffu, xr, 2);
          if (t == 0) rx[8 * rg + KmeansWideRow(g)] = xr;
        }
        __syncwarp();
        if (lane == 0) MbarArrive(red_full(b));
        KMW_MARK(2);
      }
      if (j >= Cfg::kLag) {
        // Sums of tile j - kLag, with the control warps' labels.
        const int jj = j - Cfg::kLag;
        const int b = jj % Cfg::kBufs;
        MbarWait(ready(b), static_cast<uint32_t>(jj / Cfg::kBufs) & 1);
        KMW_MARK(3);
        const float* xs = reinterpret_cast<const float*>(stage_of(jj));
        const float* ws = reinterpret_cast<const float*>(stage_of(jj) + Cfg::kXBytes);
        const int64_t row0 = (t_begin + jj) * kRows;
        // k-step s covers rows 8 s + t (fragment row t) and 8 s + t + 4: the
        // rows whose labels control warp s's lane (g, t) holds.
#pragma unroll
        for (int s = 0; s < kRG; ++s) {
          const int r0 = 8 * s + t, r1 = r0 + 4;
          const float2 w2 = make_float2(ws[r0], ws[r1]);
          const uint4 o = oh_s[(b * kRG + s) * 32 + lane];
          const uint32_t oh[4] = {o.x, o.y, o.z, o.w};
#pragma unroll
          for (int jc = 0; jc < Cfg::kNTiles / 4; ++jc) {
            const int col = col_w + 32 * jc + 4 * KmeansWideRow(g);
            const float4 v0 = *reinterpret_cast<const float4*>(xs + r0 * Cfg::kStride + col);
            const float4 v1 = *reinterpret_cast<const float4*>(xs + r1 * Cfg::kStride + col);
            const float e0[4] = {v0.x, v0.y, v0.z, v0.w}, e1[4] = {v1.x, v1.y, v1.z, v1.w};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              uint32_t h0, l0, h1, l1;
              SplitTf32Trunc(w2.x * e0[e], h0, l0);
              SplitTf32Trunc(w2.y * e1[e], h1, l1);
              MmaTf32(sacc[4 * jc + e], oh, l0, l1);
              MmaTf32(sacc[4 * jc + e], oh, h0, h1);
            }
          }
        }
        const uint32_t bad_tile = bad_s[b * kRG] | bad_s[b * kRG + 1];
        for (int r = 0; r < kRows && bad_tile != 0; ++r) {
          if (!((bad_tile >> r) & 1u) || row0 + r >= p.n) continue;
          const int l = lab_s[b * kRows + r];
          const float* xr = x + (row0 + r) * d + col0;
          const float wr = wg[row0 + r];  // the tile's copy was zeroed
          ForEachWideSum(sacc, g, t, col_w, [&](float& a, int c, int col) {
            if (c == l && col0 + col < d) a = fma(wr, xr[col], a);
          });
        }
        __syncwarp();
        if (lane == 0) {
          MbarArrive(freed(b));
          MbarArrive(drained(jj));
        }
        KMW_MARK(4);
      }
    }
    // This block's columns of the cluster's partial sums.
    ForEachWideSum(sacc, g, t, col_w, [&](float& a, int c, int col) {
      if (c < k && col0 + col < d) part[int64_t{c} * d + col0 + col] = a;
    });
  } else if (warp == Cfg::kProducer) {
    // Tile t_begin + j into its stage once the math warps are done with tile
    // j - kStages: one bulk copy per row of this block's columns, completing
    // on the stage's landed mbarrier, so no math warp spends instructions on
    // addresses. Rows past n are not copied (the control warps zero them);
    // columns past d keep the zeros written above.
    for (int j = 0; j < ntiles && lane == 0; ++j) {
      // Tiles ahead of the math warps: back off rather than spin (a spinning
      // producer took issue slots from the math warps on its sub-partition).
      if (j >= kStages) MbarWaitBackoff(drained(j), static_cast<uint32_t>(j / kStages - 1) & 1);
      KMW_MARK_PROD(10);
      const int64_t row0 = (t_begin + j) * kRows;
      const int rows = p.n - row0 < kRows ? static_cast<int>(p.n - row0) : kRows;
      MbarArriveExpectTx(landed(j), static_cast<uint32_t>(rows * cols * 4));
      const uint32_t st = SmemAddr(stage_of(j));
      for (int r = 0; r < rows; ++r) {
        BulkCopyToShared(st + r * Cfg::kStride * 4, x + (row0 + r) * d + col0,
                         static_cast<uint32_t>(cols * 4), landed(j));
      }
      KMW_MARK_PROD(11);
    }
  } else {
    // The labels. Tile j belongs to rank j % ncl, whose owner warp labels
    // it: every ncl-th tile, so the warp has ncl tiles' time for each. A
    // warp that labelled a pair of rows of every tile instead ran ~400
    // mostly dependent instructions a tile and held the cluster back. In a
    // cluster of one block that would be every
    // tile, so there each control warp labels its row group itself.
    // Lane (g, t)'s row slot s = 2 pass + i is row 8 pass + t + 4 i: pass
    // 0 and 1 for the owner warp, pass rg for control warp rg.
    const bool owner_warp = warp == Cfg::kOwner;
    const int rg = owner_warp ? 0 : warp - Cfg::kMathWarps;
    const bool labelling = owner_warp != alone;
    // ||c||^2 of centroids g and g + 8, and which are not finite; the
    // checked step's sum_j ||c_j||^2 and row-check counts.
    float csq_lo = 0, csq_hi = 0;
    [[maybe_unused]] float csq_tot = 0, row_margin = 0;
    [[maybe_unused]] int row_faults = 0;
    uint32_t badc = 0;
    for (int c = 0; c < 16 && labelling; ++c) {
      float s = 0;
      for (int r = 0; r < ncl; ++r) {
        s += alone ? csq_part[c] : cluster.map_shared_rank(csq_part, r)[c];
      }
      badc |= c < k && !isfinite(s) ? (1u << c) : 0u;
      csq_lo = c == g ? s : csq_lo;
      csq_hi = c == g + 8 ? s : csq_hi;
      if constexpr (CHECK > 0) csq_tot += c < k ? s : 0.0f;
    }
    auto row_of = [&](int s) { return 8 * (s / 2) + t + 4 * (s % 2); };
    // The weights of tile j's rows for slots 2 pass0 .. (0 past n).
    auto weights_of = [&](int j, int pass0, auto& w) {
      const int64_t row0 = (t_begin + j) * kRows;
#pragma unroll
      for (int s = 0; s < int{sizeof(w) / sizeof(w[0])}; ++s) {
        const int64_t row = row0 + row_of(2 * pass0 + s);
        w[s] = j < ntiles && row < p.n ? wg[row] : 0.0f;
      }
    };

    // Labels of tile j's slots 2 pass0 .. 2 (pass0 + NP) - 1 from the
    // tile's dots: acc[pass][q] is (centroid g + 8 (q / 2), slot
    // 2 (pass0 + pass) + q % 2), xrow, qrow (x . s, checked step) and w per
    // slot. Out: idx (-1 past n), key, and bad: rows the tensor cores must
    // not see (non-finite ||x||^2 or w^2 ||x||^2, and rows past n).
    auto label = [&](int j, int pass0, auto& acc, const auto& xrow, const auto& qrow, const auto& w,
                     auto& idx, auto& key, auto& bad) {
      constexpr int NP = sizeof(acc) / sizeof(acc[0]), R = 2 * NP;
      const int64_t row0 = (t_begin + j) * kRows;
      uint32_t mine = 0;  // bit 8 pass + 2 t + i
#pragma unroll
      for (int s = 0; s < R; ++s) {
        bad[s] = !(isfinite(xrow[s]) && isfinite(w[s] * w[s] * xrow[s])) ||
                 row0 + row_of(2 * pass0 + s) >= p.n;
        if (bad[s]) mine |= 1u << (8 * (pass0 + s / 2) + 2 * t + s % 2);
      }
      const uint32_t bad_rows = __reduce_or_sync(0xffffffffu, g == 0 ? mine : 0u);
      if ((bad_rows | badc) != 0) {
        // Exact f32 dots of every (row, centroid) pair a bad one touches,
        // over the whole row from global memory, by the whole warp; the lane
        // that holds the pair takes it.
        for (int pc = 0; pc < 8 * NP * 16; ++pc) {
          const int bit = 8 * pass0 + pc / 16, c = pc % 16;
          const int64_t row = row0 + 8 * (bit / 8) + bit % 8 / 2 + 4 * (bit % 2);
          if (c >= k || row >= p.n || !(((bad_rows >> bit) & 1u) || ((badc >> c) & 1u))) {
            continue;
          }
          float sum = 0;
          for (int e = lane; e < d; e += 32)
            sum = fma(x[row * d + e], cg_[int64_t{c} * d + e], sum);
          sum = SumLanes<32>(sum);
#pragma unroll
          for (int q = 0; q < 4 * NP; ++q) {
            const int pass = q / 4, cq = g + 8 * (q % 4 / 2);
            if (bit == 8 * (pass0 + pass) + 2 * t + q % 2 && c == cq) acc[pass][q % 4] = sum;
          }
        }
      }
      // Argmin of each slot over the lane's centroids (g, g + 8), then over
      // g; the checked step's S (the slot's real distances) alongside.
      [[maybe_unused]] float dsum[R] = {};
#pragma unroll
      for (int s = 0; s < R; ++s) {
        key[s] = KmeansInf(0.0f);
        idx[s] = 16;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int c = 8 * h + g;
          if constexpr (CHECK > 0) {
            float dist;
            const float kc =
                KmeansCheckedKey<CHECK>(xrow[s], acc[s / 2][2 * h + s % 2], h ? csq_hi : csq_lo,
                                        c < k, row0 + row_of(2 * pass0 + s), c, p.check, dist);
            dsum[s] += dist;
            KmeansTakeMin(key[s], idx[s], kc, c);
          } else {
            KmeansTakeMin(key[s], idx[s],
                          KmeansKey(xrow[s], acc[s / 2][2 * h + s % 2], h ? csq_hi : csq_lo, c < k),
                          c);
          }
        }
      }
      KmeansMinOverFragmentRows(key, idx);
      if constexpr (CHECK > 0) {
        // S over the 8 lanes (g) of each slot, then its check by lane g = 0.
#pragma unroll
        for (int off = 4; off <= 16; off *= 2) {
#pragma unroll
          for (int s = 0; s < R; ++s) dsum[s] += __shfl_xor_sync(0xffffffffu, dsum[s], off);
        }
#pragma unroll
        for (int s = 0; s < R; ++s) {
          if (g == 0 && row0 + row_of(2 * pass0 + s) < p.n) {
            KmeansRowCheck(dsum[s], xrow[s], qrow[s], csq_tot, k, p.check, row_faults, row_margin);
          }
        }
      }
#pragma unroll
      for (int s = 0; s < R; ++s) {
        if (row0 + row_of(2 * pass0 + s) >= p.n) idx[s] = -1;
      }
    };
    // This warp's share of the outputs: labels, mind, counts, inertia.
    float inertia = 0, cnt[2] = {};  // cnt[h]: weight of cluster g + 8 h in this lane's rows
    auto write_outputs = [&](int j, int pass0, const auto& idx, const auto& key, const auto& w) {
      const int64_t row0 = (t_begin + j) * kRows;
#pragma unroll
      for (int s = 0; s < int{sizeof(idx) / sizeof(idx[0])}; ++s) {
        const int64_t row = row0 + row_of(2 * pass0 + s);
        if (row < p.n) {
          if (g == 0) {
            p.labels[row] = idx[s];
            static_cast<float*>(p.mind)[row] = KmeansMind(key[s]);
            inertia = fma(w[s], KmeansMind(key[s]), inertia);
          }
          cnt[0] += idx[s] == g ? w[s] : 0.0f;
          cnt[1] += idx[s] == g + 8 ? w[s] : 0.0f;
        }
      }
    };
    // label | bad << 8: what the owner sends for a row.
    auto label_word = [](int idx, bool bad) {
      return (static_cast<uint32_t>(idx) & 0xffu) | (bad ? 0x100u : 0u);
    };

    if (owner_warp && !alone) {
      // Tile j: the ranks' records, labels to every block, outputs; w from
      // weights_of.
      auto own = [&](int j, const float (&w)[4]) {
        const int u = j / ncl;
        if (lane == 0) MbarArriveExpectTx(rec_full, static_cast<uint32_t>(ncl * Cfg::kInBytes));
        MbarWait(rec_full, static_cast<uint32_t>(u) & 1);
        KMW_MARK_OWN(7);
        // Loads first (ranks past ncl re-read the last, unused), then added
        // in rank order.
        float acc[2][4] = {}, xrow[4] = {}, qrow[4] = {};
#pragma unroll
        for (int pass = 0; pass < 2; ++pass) {
          const int pr = 4 * pass + t;
          float4 a[Cfg::kMaxCl];
          float2 xx[Cfg::kMaxCl];
#pragma unroll
          for (int r = 0; r < Cfg::kMaxCl; ++r) {
            const int rr = min(r, ncl - 1);
            a[r] = *reinterpret_cast<const float4*>(
                recs + (pr * Cfg::kMaxCl + rr) * Cfg::kRecFloats + 4 * g);
            xx[r] = *reinterpret_cast<const float2*>(recx + rr * kRows + 2 * pr);
          }
#pragma unroll
          for (int r = 0; r < Cfg::kMaxCl; ++r) {
            if (r < ncl) {
              acc[pass][0] += a[r].x;
              acc[pass][1] += a[r].y;
              acc[pass][2] += a[r].z;
              acc[pass][3] += a[r].w;
              xrow[2 * pass] += xx[r].x;
              xrow[2 * pass + 1] += xx[r].y;
            }
          }
          if constexpr (CHECK > 0) {
            const float* recq = reinterpret_cast<const float*>(smem + Cfg::kOffRecQ);
            float2 qq[Cfg::kMaxCl];
#pragma unroll
            for (int r = 0; r < Cfg::kMaxCl; ++r) {
              qq[r] = *reinterpret_cast<const float2*>(recq + min(r, ncl - 1) * kRows + 2 * pr);
            }
#pragma unroll
            for (int r = 0; r < Cfg::kMaxCl; ++r) {
              if (r < ncl) {
                qrow[2 * pass] += qq[r].x;
                qrow[2 * pass + 1] += qq[r].y;
              }
            }
          }
        }
        __syncwarp();
        if (lane < ncl) MbarArriveRemote(MapRank(rec_empty(rank), lane));
        KMW_MARK_OWN(14);
        int idx[4];
        float key[4];
        bool bad[4];
        label(j, 0, acc, xrow, qrow, w, idx, key, bad);
        KMW_MARK_OWN(13);
        // Every block has read this rank's labels of its tile before last.
        if (u >= 2) MbarWait(lab_empty(u), static_cast<uint32_t>(u / 2 - 1) & 1);
        // To every block (lane (g, t) sends to rank g): both rows' words,
        // then the weights the sums use (0 for a bad row).
#pragma unroll
        for (int pass = 0; pass < 2; ++pass) {
          const int s = 2 * pass;
          const uint4 out = make_uint4(
              label_word(idx[s], bad[s]), label_word(idx[s + 1], bad[s + 1]),
              __float_as_uint(bad[s] ? 0.0f : w[s]), __float_as_uint(bad[s + 1] ? 0.0f : w[s + 1]));
          const uint4* dst = lab_in + (2 * rank + u % 2) * kRP + 4 * pass + t;
          if (g < ncl) StAsync16(MapRank(SmemAddr(dst), g), out, MapRank(lab_full(rank, u), g));
        }
        write_outputs(j, 0, idx, key, w);
        KMW_MARK_OWN(8);
      };
      float wnext[4];
      weights_of(rank, 0, wnext);
      for (int j = rank; j < ntiles; j += ncl) {
        float w[4];
#pragma unroll
        for (int s = 0; s < 4; ++s) w[s] = wnext[s];
        weights_of(j + ncl, 0, wnext);  // a tile ahead: global latency
        own(j, w);
      }
    } else if (!owner_warp) {
      // Control warp rg: the sums' buffers of every tile, and this block's
      // dots of row group rg for the tile's owner. This lane's pair is
      // 4 rg + t.
      const int pr = 4 * rg + t;
      // The checked step's x . s over this block's columns, s = sum_j c_j in
      // centroid order: lane l holds s at columns 4 l + 128 i .. + 3. The
      // control warps take it with CUDA-core FMAs from the stage, as
      // kmeans_mma does, rather than as a product column of the math warps:
      // those sit at the 168 registers twelve warps leave a thread and the
      // shared memory has no room for their partials, while these warps
      // mostly wait.
      [[maybe_unused]] float4 s_reg[4] = {};
      if constexpr (CHECK > 0) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int col = col0 + 4 * lane + 128 * i;
          for (int c = 0; c < k && col < d; ++c) {
            const float4 v = *reinterpret_cast<const float4*>(cg_ + int64_t{c} * d + col);
            s_reg[i].x += v.x;
            s_reg[i].y += v.y;
            s_reg[i].z += v.z;
            s_reg[i].w += v.w;
          }
        }
      }
      // x . s of tile jp's rows 8 rg + t and 8 rg + t + 4 over this block's
      // columns: each lane's 16 columns of the row group's 8 rows, then a
      // transposing butterfly (lane (g, t) ends with row 8 rg + g), in a
      // fixed order.
      [[maybe_unused]] auto row_dots = [&](int jp) {
        const float* xs = reinterpret_cast<const float*>(stage_of(jp));
        float q[8];
#pragma unroll
        for (int r = 0; r < 8; ++r) {
          q[r] = 0;
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            if (128 * i >= cols) continue;  // zeros in s and in the stage (d <= 384)
            const float4 v = *reinterpret_cast<const float4*>(xs + (8 * rg + r) * Cfg::kStride +
                                                              4 * lane + 128 * i);
            q[r] = fma(v.x, s_reg[i].x, q[r]);
            q[r] = fma(v.y, s_reg[i].y, q[r]);
            q[r] = fma(v.z, s_reg[i].z, q[r]);
            q[r] = fma(v.w, s_reg[i].w, q[r]);
          }
        }
        const bool hb = (lane >> 4) & 1, hc = (lane >> 3) & 1, hd = (lane >> 2) & 1;
        float a[4], b[2];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float send = hb ? q[i] : q[i + 4];
          a[i] = (hb ? q[i + 4] : q[i]) + __shfl_xor_sync(0xffffffffu, send, 16);
        }
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const float send = hc ? a[i] : a[i + 2];
          b[i] = (hc ? a[i + 2] : a[i]) + __shfl_xor_sync(0xffffffffu, send, 8);
        }
        float z = (hd ? b[1] : b[0]) + __shfl_xor_sync(0xffffffffu, hd ? b[0] : b[1], 4);
        z += __shfl_xor_sync(0xffffffffu, z, 1);
        z += __shfl_xor_sync(0xffffffffu, z, 2);
        return make_float2(__shfl_sync(0xffffffffu, z, 4 * t),
                           __shfl_sync(0xffffffffu, z, 4 * t + 16));
      };
      // Tile jj's labels into the buffers of the sums: words from
      // label_word and the weights the sums use, for rows t and t + 4 of
      // the row group.
      auto take_labels = [&](int jj, const uint32_t (&word)[2], const float (&wr)[2]) {
        int idx[2];
        uint32_t mine = 0;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          idx[i] = static_cast<int8_t>(word[i] & 0xffu);
          if ((word[i] >> 8) & 1u) mine |= 1u << (8 * rg + t + 4 * i);
        }
        const uint32_t bad_rows = __reduce_or_sync(0xffffffffu, g == 0 ? mine : 0u);
        // Buffers b3, once the math warps are done with tile jj - kBufs's.
        const int b3 = jj % Cfg::kBufs;
        if (jj >= Cfg::kBufs) MbarWait(freed(b3), static_cast<uint32_t>(jj / Cfg::kBufs - 1) & 1);
        float* ws = reinterpret_cast<float*>(stage_of(jj) + Cfg::kXBytes);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int r = 8 * rg + t + 4 * i;
          if (g == 0) {
            ws[r] = wr[i];
            lab_s[b3 * kRows + r] = idx[i];
          }
        }
        // One-hot fragments of k-step rg of the sums.
        oh_s[(b3 * kRG + rg) * 32 + lane] =
            make_uint4(idx[0] == g ? 0x3f800000u : 0u, idx[0] == g + 8 ? 0x3f800000u : 0u,
                       idx[1] == g ? 0x3f800000u : 0u, idx[1] == g + 8 ? 0x3f800000u : 0u);
        // Bad rows leave the tile (NaN * 0 is NaN; their weight is 0); the
        // sums take them from global memory. The fence orders the zeros
        // before the bulk copy that refills the stage.
        if (bad_rows != 0) {
          float* xs = reinterpret_cast<float*>(stage_of(jj));
          for (int r = 8 * rg; r < 8 * rg + 8; ++r) {
            if (!((bad_rows >> r) & 1u)) continue;
            for (int e = lane; e < kCols; e += 32) xs[r * Cfg::kStride + e] = 0.0f;
          }
          FenceProxyAsyncShared();
        }
        if (lane == 0) bad_s[b3 * kRG + rg] = bad_rows;
        __syncwarp();
        if (lane == 0) MbarArrive(ready(b3));
      };
      // Tile jj's labels from its owner.
      auto consume = [&](int jj) {
        const int o = jj % ncl, u = jj / ncl;
        if (lane == 0) {
          if (rg == 0) {
            MbarArriveExpectTx(lab_full(o, u), static_cast<uint32_t>(kRP * 16));
          } else {
            MbarArrive(lab_full(o, u));
          }
        }
        MbarWait(lab_full(o, u), static_cast<uint32_t>(u / 2) & 1);
        KMW_MARK_CTRL(5);
        const uint4 in = lab_in[(2 * o + u % 2) * kRP + pr];
        __syncwarp();
        if (lane == 0) MbarArriveRemote(MapRank(lab_empty(u), o));
        take_labels(jj, {in.x, in.y}, {__uint_as_float(in.z), __uint_as_float(in.w)});
        KMW_MARK_CTRL(6);
      };
      // Tile jp's dots of row group rg, the math warps' partials added in
      // warp order: to the tile's owner, or labelled here in a cluster of
      // one block (w: the weights of the row group's rows).
      auto push = [&](int jp, const float (&w)[2]) {
        const int b = jp % 2;
        MbarWait(red_full(b), static_cast<uint32_t>(jp / 2) & 1);
        KMW_MARK_CTRL(9);
        float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
        float2 xr = make_float2(0.f, 0.f);
#pragma unroll
        for (int mw = 0; mw < Cfg::kMathWarps; ++mw) {
          const float4 v = *reinterpret_cast<const float4*>(
              red + (b * Cfg::kMathWarps + mw) * Cfg::kDots + (rg * 32 + lane) * 4);
          const float* vx = redx + (b * Cfg::kMathWarps + mw) * kRows + 8 * rg + t;
          a.x += v.x;
          a.y += v.y;
          a.z += v.z;
          a.w += v.w;
          xr.x += vx[0];
          xr.y += vx[4];
        }
        __syncwarp();
        if (lane == 0) MbarArrive(red_empty(b));
        [[maybe_unused]] float2 qr = make_float2(0.f, 0.f);
        if constexpr (CHECK > 0) {
          // The stage of tile jp has landed (the math warps' distances are
          // done, and its sums, which refill it, wait for this warp's labels).
          MbarWait(landed(jp), static_cast<uint32_t>(jp / kStages) & 1);
          qr = row_dots(jp);
        }
        if (alone) {
          float acc[1][4] = {{a.x, a.y, a.z, a.w}};
          const float xrow[2] = {xr.x, xr.y}, qrow[2] = {qr.x, qr.y};
          int idx[2];
          float key[2];
          bool bad[2];
          label(jp, rg, acc, xrow, qrow, w, idx, key, bad);
          take_labels(jp, {label_word(idx[0], bad[0]), label_word(idx[1], bad[1])},
                      {bad[0] ? 0.0f : w[0], bad[1] ? 0.0f : w[1]});
          write_outputs(jp, rg, idx, key, w);
        } else {
          // The tile's owner has read this block's records of its previous tile.
          const int o = jp % ncl, u = jp / ncl;
          if (u >= 1) MbarWait(rec_empty(o), static_cast<uint32_t>(u - 1) & 1);
          const float* rec = recs + (pr * Cfg::kMaxCl + rank) * Cfg::kRecFloats + 4 * g;
          const float* rx = recx + rank * kRows + 2 * pr;
          const uint32_t bar = MapRank(rec_full, o);
          StAsync16(MapRank(SmemAddr(rec), o), a, bar);
          if (g == 0) StAsync8(MapRank(SmemAddr(rx), o), xr, bar);
          if constexpr (CHECK > 0) {
            const float* rq =
                reinterpret_cast<const float*>(smem + Cfg::kOffRecQ) + rank * kRows + 2 * pr;
            if (g == 0) StAsync8(MapRank(SmemAddr(rq), o), qr, bar);
          }
        }
        KMW_MARK_CTRL(12);
      };

      // The sums' buffers of tile j - kLag first: the math warps need them
      // as soon as they finish the distances of tile j.
      float wnext[2] = {};
      if (alone) weights_of(0, rg, wnext);
      for (int j = 0; j < ntiles + Cfg::kLag; ++j) {
        if (!alone && j >= Cfg::kLag) consume(j - Cfg::kLag);
        if (j < ntiles) {
          const float w[2] = {wnext[0], wnext[1]};
          if (alone) weights_of(j + 1, rg, wnext);  // a tile ahead: global latency
          push(j, w);
        }
      }
    }
    // This warp's counts and inertia, added over warps and ranks below.
    const float in = SumLanes<32>(inertia);
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // over t
      cnt[h] += __shfl_xor_sync(0xffffffffu, cnt[h], 1);
      cnt[h] += __shfl_xor_sync(0xffffffffu, cnt[h], 2);
    }
    float* mine = cnt_s + (owner_warp ? 0 : 1 + rg) * 17;
    if (t == 0) {
      mine[g] = cnt[0];
      mine[g + 8] = cnt[1];
    }
    if (lane == 0) mine[16] = in;
    if constexpr (CHECK > 0) KmeansRowCheckFlush(p.check, row_faults, row_margin);
  }
  // Every rank's counts are in; no mbarrier of the loop is used any more.
  cluster.sync();
  if (rank == 0 && tid <= k) {  // counts, then inertia (tid == k), in rank and warp order
    float tot = 0;
    for (int r = 0; r < ncl; ++r) {
      const float* c = alone ? cnt_s : cluster.map_shared_rank(cnt_s, r);
      for (int w = 0; w < 1 + Cfg::kCtrlWarps; ++w) tot += c[w * 17 + (tid < k ? tid : 16)];
    }
    part[int64_t{k} * d + tid] = tot;
  }
  TSM2_TRACE_PHASES_END(ntiles);
  // No block leaves while rank 0 may still read its counts.
  cluster.sync();
#else
  __trap();
#endif
}

}  // namespace tsm2

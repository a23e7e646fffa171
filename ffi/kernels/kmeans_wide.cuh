// One Lloyd iteration of k-means for f32 rows of 260..4096 elements and
// k <= 16 on tensor cores, reading X once from DRAM: the same outputs as
// KmeansStepKernel (kmeans.cuh) and KmeansMmaStepKernel (kmeans_mma.cuh).
//
// Why a third step: at d = 4096 the CUDA-core step ran at 2.68 reads of X. A
// row (16 KB) and the centroids (256 KB) do not fit one SM together, so each
// block of a thread-block cluster owns 512 columns and the cluster walks
// tiles of 16 rows:
// - the centroids live in registers, already split into TF32 hi and lo
//   (each of the 8 math warps owns 64 columns: 64 registers a lane), so
//   shared memory only streams X (six 33 KB stages: three tiles in flight
//   while three are worked on), which a producer warp fills with one bulk
//   copy per row, so the math warps spend no instructions on addresses;
// - the math warps run the distances of tile j (mma m16n8k8, C x X^T as
//   hi*hi + hi*lo + lo*hi, as kmeans_mma), add their partial dots in a fixed
//   order and push the block's partial into every block of the cluster with
//   st.async, which completes on the receiver's mbarrier; then they run the
//   sums of tile j - 2 (onehot^T x (w * X), exact one-hot, hi + lo of w * x),
//   which accumulate in registers for the block's columns;
// - meanwhile two control warps (a row group each) wait for tile j - 1's
//   partials from every rank, add them in rank order (so all blocks agree on
//   the labels bit for bit), free the senders' slots, and write labels,
//   mind, the one-hot fragments, counts and inertia. Their outputs are three
//   tiles deep, so they have two tiles' distances to finish in. They are
//   on the critical path as often as the math warps (benchmarks/NOTES.md,
//   session 22): keep their per-tile work short.
// No block waits on a cluster-wide barrier in the loop: versions with a
// cluster barrier per tile and the combine on two of the math warps took
// 2.68-4.21 ms at n = 2.5e5, d = 4096 on an H200; this one 1.76 ms on an
// H100 (the CUDA-core step 3.57; NOTES, sessions 20 and 22).
//
// Stage rows are padded and the lanes' rows and columns permuted
// (KmeansWideRow) so that the distance and the sum reads both hit 32
// distinct banks.
//
// Non-finite data: rows whose ||x||^2 or w^2 ||x||^2 is not finite, and
// centroids whose ||c||^2 is not, get exact f32 dots over the whole row
// from global memory (every block the same, in the same order), and such
// rows leave the tensor-core sums for an exact add from global memory, as in
// kmeans_mma. Rank 0 writes labels, mind, counts and inertia; every block
// writes its columns of the cluster's partial.
#pragma once

#include <cooperative_groups.h>

#include <cstdint>

#include "ffi/kernels/cluster_pipe.cuh"
#include "ffi/kernels/common.cuh"
#include "ffi/kernels/kmeans.cuh"
#include "ffi/kernels/kmeans_mma.cuh"
#include "ffi/kernels/tf32.cuh"
#include "ffi/kmeans_plan.h"

namespace tsm2 {

struct KmeansWideConfig {
  static constexpr int kCols = kKmeansWideCols;  // columns per block
  static constexpr int kRows = 16, kRowGroups = kRows / 8;
  static constexpr int kMathWarps = 8, kMathThreads = 32 * kMathWarps;
  static constexpr int kCtrlWarps = kRowGroups;              // one per row group
  static constexpr int kProducer = kMathWarps + kCtrlWarps;  // the warp that issues the copies
  static constexpr int kThreads = kMathThreads + 32 * kCtrlWarps + 32;
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
  // A block's partial per tile: dots [row group][lane][q] (q: mma
  // accumulator), then ||x||^2 of the rows.
  static constexpr int kDots = kRowGroups * 32 * 4;
  static constexpr int kSlot = kDots + kRows;
  static constexpr int kOffRed = kStages * kStageBytes;              // [math warp][kDots]
  static constexpr int kOffRedX = kOffRed + kMathWarps * kDots * 4;  // [math warp][kRows]
  static constexpr int kOffOut = kOffRedX + kMathWarps * kRows * 4;  // [kSlot]: this block's
  static constexpr int kOffSlot = kOffOut + kSlot * 4;               // [2][rank][kSlot]
  // The control warps' outputs for the sums, three tiles deep: [3][k-step][lane].
  static constexpr int kOffOneHot = kOffSlot + 2 * kMaxCl * kSlot * 4;
  static constexpr int kOffFix = kOffOneHot + 3 * kRowGroups * 32 * 16;  // [row][16]
  static constexpr int kOffLab = kOffFix + kRows * 16 * 4;               // [3][kRows]
  static constexpr int kOffBad = kOffLab + 3 * kRows * 4;                // [3][row group] row masks
  static constexpr int kOffCnt = kOffBad + 32;  // [row group][17]: counts, inertia
  static constexpr int kOffCsq = kOffCnt + kRowGroups * 17 * 4 + 8;  // [16]
  // mbarriers: full, empty x 2; ready, free x 3; landed, drained x kStages
  static constexpr int kOffBar = kOffCsq + 16 * 4;
  static constexpr int kSmemBytes = kOffBar + (10 + 2 * kStages) * 8;
  static_assert(kColsPerWarp == 64 && kPairs == 4 && kNTiles == 8, "lane column maps below");
  static_assert(kMathThreads == kDots, "one math thread per partial dot");
  static_assert(kRowGroups == 2, "bad-row masks of two row groups");
  static_assert(kStages >= 4, "three tiles worked on, at least one loading");
  static_assert((kSlot * 4) % 16 == 0 && kOffSlot % 16 == 0, "16-byte st.async");
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

#ifdef TSM2_KMW_TRACE
// Lab only: cycles per phase summed over blocks (slots 0-5: thread 0, a
// math warp; 6-9: the first control warp; 10-11: the producer; 15: tiles).
__device__ unsigned long long g_kmw_trace[16];
#define KMW_MARK_IF(cond, slot)                                 \
  do {                                                          \
    if (cond) {                                                 \
      const long long now_ = clock64();                         \
      tr_[slot] += static_cast<unsigned long long>(now_ - t0_); \
      t0_ = now_;                                               \
    }                                                           \
  } while (0)
#else
#define KMW_MARK_IF(cond, slot) \
  do {                          \
  } while (0)
#endif
#define KMW_MARK(slot) KMW_MARK_IF(threadIdx.x == 0, slot)
#define KMW_MARK_CTRL(slot) KMW_MARK_IF(threadIdx.x == 32 * Cfg::kMathWarps, slot)
#define KMW_MARK_PROD(slot) KMW_MARK_IF(threadIdx.x == 32 * Cfg::kProducer, slot)

template <typename Cfg = KmeansWideConfig>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    KmeansWideStepKernel(const __grid_constant__ KmeansArgs p) {
  constexpr int kRows = Cfg::kRows, kCols = Cfg::kCols, kStages = Cfg::kStages;
  constexpr int kRG = Cfg::kRowGroups;
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
  float* slots = reinterpret_cast<float*>(smem + Cfg::kOffSlot);
  uint4* oh_s = reinterpret_cast<uint4*>(smem + Cfg::kOffOneHot);
  float* fix = reinterpret_cast<float*>(smem + Cfg::kOffFix);
  int* lab_s = reinterpret_cast<int*>(smem + Cfg::kOffLab);
  uint32_t* bad_s = reinterpret_cast<uint32_t*>(smem + Cfg::kOffBad);
  float* csq_part = reinterpret_cast<float*>(smem + Cfg::kOffCsq);
  // Slot b's mbarriers. full: every rank's partial landed (the control
  // warp's arrival and ncl * kSlot * 4 bytes). empty: every rank's control
  // warp is done with this block's partial in its slot b. ready: the control
  // warp's labels, one-hot and bad-row mask for the math warps. free: the
  // math warps are done with them.
  const uint32_t bars = SmemAddr(smem + Cfg::kOffBar);
  auto full = [&](int b) { return bars + 8 * b; };
  auto empty = [&](int b) { return bars + 16 + 8 * b; };
  auto ready = [&](int b) { return bars + 32 + 8 * b; };
  auto freed = [&](int b) { return bars + 56 + 8 * b; };
  auto landed = [&](int j) { return bars + 80 + 8 * static_cast<uint32_t>(j % kStages); };
  auto drained = [&](int j) { return landed(j) + 8 * kStages; };
  if (tid == 0) {
    for (int b = 0; b < 2; ++b) {
      // A cluster of one block (d <= 512) fills its own slot with plain
      // stores and one arrival per math warp: st.async and remote arrivals
      // need a cluster of two blocks or more (compute-sanitizer rejects them).
      MbarInit(full(b), Cfg::kCtrlWarps + (ncl == 1 ? Cfg::kMathWarps : 0));
      MbarInit(empty(b), ncl * Cfg::kCtrlWarps);
    }
    for (int b = 0; b < 3; ++b) {
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
  // 32-bit tile counters: the loops' divisions by 2, 3 and kStages stay cheap.
  const int ntiles = static_cast<int>(t_end - t_begin);
#ifdef TSM2_KMW_TRACE
  unsigned long long tr_[16] = {};
  long long t0_ = clock64();
#endif
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
  // by the control warp after the barrier, which also makes the mbarriers'
  // initialisation visible and guarantees every block of the cluster runs
  // before any distributed shared memory access.
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

    for (int j = 0; j < ntiles + 2; ++j) {
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
            SplitTf32(v.x, bh[rg][0], bl[rg][0]);
            SplitTf32(v.y, bh[rg][1], bl[rg][1]);
            SplitTf32(v.z, bh[rg][2], bl[rg][2]);
            SplitTf32(v.w, bh[rg][3], bl[rg][3]);
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
#pragma unroll
        for (int rg = 0; rg < kRG; ++rg) {
          float4 a;
          a.x = prt[1][rg][0] + prt[0][rg][0];
          a.y = prt[1][rg][1] + prt[0][rg][1];
          a.z = prt[1][rg][2] + prt[0][rg][2];
          a.w = prt[1][rg][3] + prt[0][rg][3];
          *reinterpret_cast<float4*>(red + warp * Cfg::kDots + (rg * 32 + lane) * 4) = a;
          float xr = xsq[rg];
          xr += __shfl_xor_sync(0xffffffffu, xr, 1);
          xr += __shfl_xor_sync(0xffffffffu, xr, 2);
          if (t == 0) redx[warp * kRows + 8 * rg + KmeansWideRow(g)] = xr;
        }
        NamedBarrier(1, Cfg::kMathThreads);
        KMW_MARK(1);
        // The block's partial, warps added in order, staged here; then every
        // math thread sends a few of its 16-byte pieces to every rank's slot
        // j % 2 (one thread sending all of them took ~800 cycles), once
        // every rank's control warps are done with what this block put there
        // two tiles ago.
        float* out = reinterpret_cast<float*>(smem + Cfg::kOffOut);
        {
          float v = 0;
#pragma unroll
          for (int w = 0; w < Cfg::kMathWarps; ++w) v += red[w * Cfg::kDots + tid];
          out[tid] = v;
          if (tid < kRows) {
            float xv = 0;
#pragma unroll
            for (int w = 0; w < Cfg::kMathWarps; ++w) xv += redx[w * kRows + tid];
            out[Cfg::kDots + tid] = xv;
          }
        }
        const int b = j % 2;
        const uint32_t use = static_cast<uint32_t>(j / 2);
        if (use > 0) MbarWait(empty(b), (use - 1) & 1);
        NamedBarrier(1, Cfg::kMathThreads);  // out complete
        KMW_MARK(2);
        if (ncl == 1) {
          float4* slot = reinterpret_cast<float4*>(slots + b * Cfg::kMaxCl * Cfg::kSlot);
          for (int q = tid; q < Cfg::kSlot / 4; q += Cfg::kMathThreads) {
            slot[q] = reinterpret_cast<const float4*>(out)[q];
          }
          __syncwarp();
          if (lane == 0) MbarArrive(full(b));
        } else {
          constexpr int kPieces = Cfg::kSlot / 4;
          const uint32_t mine = SmemAddr(slots + (b * Cfg::kMaxCl + rank) * Cfg::kSlot);
          for (int pc = tid; pc < ncl * kPieces; pc += Cfg::kMathThreads) {
            const int r = pc / kPieces, q = pc % kPieces;
            StAsync16(MapRank(mine + 16 * q, r), *reinterpret_cast<const float4*>(out + 4 * q),
                      MapRank(full(b), r));
          }
        }
        KMW_MARK(5);
      }
      if (j >= 2) {
        // Sums of tile j - 2, with the control warps' labels.
        const int jj = j - 2;
        const int b = jj % 3;
        MbarWait(ready(b), static_cast<uint32_t>(jj / 3) & 1);
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
              SplitTf32(w2.x * e0[e], h0, l0);
              SplitTf32(w2.y * e1[e], h1, l1);
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
    // A control warp: row group rg of every tile. ||c||^2 of centroids g
    // and g + 8, and which are not finite.
    const int rg = warp - Cfg::kMathWarps;
    float csq_lo = 0, csq_hi = 0;
    uint32_t badc = 0;
    for (int c = 0; c < 16; ++c) {
      float s = 0;
      for (int r = 0; r < ncl; ++r) {
        s += ncl == 1 ? csq_part[c] : cluster.map_shared_rank(csq_part, r)[c];
      }
      badc |= c < k && !isfinite(s) ? (1u << c) : 0u;
      csq_lo = c == g ? s : csq_lo;
      csq_hi = c == g + 8 ? s : csq_hi;
    }
    // Rank 0: cnt[h] is the weight of cluster g + 8 h in this lane's rows.
    float inertia = 0, cnt[2] = {};
    for (int j = 0; j < ntiles; ++j) {
      const int b = j % 2;
      const uint32_t use = static_cast<uint32_t>(j / 2);
      const int64_t row0 = (t_begin + j) * kRows;
      // This row group's weights, loaded while the partials are awaited and
      // put into the stage for the sums.
      const int64_t wrow = row0 + 8 * rg + lane;
      const float wl = lane < 8 && wrow < p.n ? wg[wrow] : 0.0f;
      if (lane == 0) {
        if (rg == 0 && ncl > 1) {
          MbarArriveExpectTx(full(b), static_cast<uint32_t>(ncl * Cfg::kSlot * 4));
        } else {
          MbarArrive(full(b));
        }
      }
      KMW_MARK_CTRL(9);
      MbarWait(full(b), use & 1);
      KMW_MARK_CTRL(6);
      // The ranks' partials in rank order: acc[q] is (centroid g + 8 (q / 2),
      // row 8 rg + t + 4 (q % 2)) (KmeansWideRow), xrow[i] row 8 rg + t + 4 i.
      const float* ts = slots + b * Cfg::kMaxCl * Cfg::kSlot;
      float acc[4] = {}, xrow[2] = {};
#pragma unroll
      for (int r = 0; r < Cfg::kMaxCl; ++r) {
        if (r >= ncl) break;
        const float4 a =
            *reinterpret_cast<const float4*>(ts + r * Cfg::kSlot + (rg * 32 + lane) * 4);
        const float* xx = ts + r * Cfg::kSlot + Cfg::kDots + 8 * rg + t;
        acc[0] += a.x;
        acc[1] += a.y;
        acc[2] += a.z;
        acc[3] += a.w;
        xrow[0] += xx[0];
        xrow[1] += xx[4];
      }
      __syncwarp();
      // Rank `lane`'s partial is read.
      if (ncl == 1 && lane == 0) MbarArrive(empty(b));
      if (ncl > 1 && lane < ncl) MbarArriveRemote(MapRank(empty(b), lane));
      // Buffers b3 for the sums, once the math warps are done with tile j - 3's.
      const int b3 = j % 3;
      KMW_MARK_CTRL(7);
      if (j >= 3) MbarWait(freed(b3), static_cast<uint32_t>(j / 3 - 1) & 1);
      KMW_MARK_CTRL(8);
      float* ws = reinterpret_cast<float*>(stage_of(j) + Cfg::kXBytes);
      if (lane < 8) ws[8 * rg + lane] = wl;
      // Rows the tensor cores must not see: non-finite ||x||^2 or w^2 ||x||^2,
      // and rows past n (not copied: what the stage held before).
      uint32_t mine = 0;
      float wr[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int r = 8 * rg + t + 4 * i;
        wr[i] = __shfl_sync(0xffffffffu, wl, t + 4 * i);
        if (!(isfinite(xrow[i]) && isfinite(wr[i] * wr[i] * xrow[i])) || row0 + r >= p.n) {
          mine |= 1u << r;
        }
      }
      const uint32_t bad_rows = __reduce_or_sync(0xffffffffu, g == 0 ? mine : 0u);
      if ((bad_rows | badc) != 0) {
        // Exact f32 dots of every (row, centroid) pair a bad one touches,
        // over the whole row from global memory: every block gets the same.
        for (int pr = 0; pr < 8 * 16; ++pr) {
          const int r = 8 * rg + pr / 16, c = pr % 16;
          if (c >= k || row0 + r >= p.n || !(((bad_rows >> r) & 1u) || ((badc >> c) & 1u))) {
            continue;
          }
          float s = 0;
          for (int e = lane; e < d; e += 32) {
            s = fma(x[(row0 + r) * d + e], cg_[int64_t{c} * d + e], s);
          }
          s = SumLanes<32>(s);
          if (lane == 0) fix[r * 16 + c] = s;
        }
        __syncwarp();
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int c = g + 8 * (q / 2), r = 8 * rg + t + 4 * (q % 2);
          if (c < k && (((bad_rows >> r) & 1u) || ((badc >> c) & 1u))) acc[q] = fix[r * 16 + c];
        }
      }
      // Argmin of rows 8 rg + t + 4 i over the lane's centroids (g, g + 8),
      // then over g, the two rows' shuffle chains interleaved.
      float key[2];
      int idx[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        key[i] = KmeansInf(0.0f);
        idx[i] = 16;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int c = 8 * h + g;
          KmeansTakeMin(key[i], idx[i],
                        KmeansKey(xrow[i], acc[2 * h + i], h ? csq_hi : csq_lo, c < k), c);
        }
      }
      KmeansMinOverFragmentRows(key, idx);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int rt = 8 * rg + t + 4 * i;
        const int64_t row = row0 + rt;
        if (row >= p.n) idx[i] = -1;
        if (g == 0) lab_s[b3 * kRows + rt] = idx[i];
        if (rank == 0 && row < p.n) {
          if (g == 0) {
            p.labels[row] = idx[i];
            static_cast<float*>(p.mind)[row] = KmeansMind(key[i]);
            inertia = fma(wr[i], KmeansMind(key[i]), inertia);
          }
          cnt[0] += idx[i] == g ? wr[i] : 0.0f;
          cnt[1] += idx[i] == g + 8 ? wr[i] : 0.0f;
        }
      }
      // One-hot fragments of k-step rg of the sums: rows t and t + 4 of the
      // row group, whose labels this lane holds.
      oh_s[(b3 * kRG + rg) * 32 + lane] =
          make_uint4(idx[0] == g ? 0x3f800000u : 0u, idx[0] == g + 8 ? 0x3f800000u : 0u,
                     idx[1] == g ? 0x3f800000u : 0u, idx[1] == g + 8 ? 0x3f800000u : 0u);
      // Bad rows leave the tile (NaN * 0 is NaN); the sums take them from
      // global memory. The fence orders the zeros before the bulk copy that
      // refills the stage.
      if (bad_rows != 0) {
        __syncwarp();  // ws written
        float* xs = reinterpret_cast<float*>(stage_of(j));
        for (int r = 8 * rg; r < 8 * rg + 8; ++r) {
          if (!((bad_rows >> r) & 1u)) continue;
          for (int e = lane; e < kCols; e += 32) xs[r * Cfg::kStride + e] = 0.0f;
          if (lane == 0) ws[r] = 0.0f;
        }
        FenceProxyAsyncShared();
      }
      if (lane == 0) bad_s[b3 * kRG + rg] = bad_rows;
      __syncwarp();
      if (lane == 0) MbarArrive(ready(b3));
    }
    if (rank == 0) {  // this row group's counts and inertia, added below in order
      float* cnt_s = reinterpret_cast<float*>(smem + Cfg::kOffCnt);
      const float in = SumLanes<32>(inertia);
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // over t
        cnt[h] += __shfl_xor_sync(0xffffffffu, cnt[h], 1);
        cnt[h] += __shfl_xor_sync(0xffffffffu, cnt[h], 2);
      }
      if (t == 0) {
        cnt_s[rg * 17 + g] = cnt[0];
        cnt_s[rg * 17 + g + 8] = cnt[1];
      }
      if (lane == 0) cnt_s[rg * 17 + 16] = in;
    }
  }
  __syncthreads();
  if (rank == 0 && tid <= k) {  // counts, then inertia (tid == k)
    const float* cnt_s = reinterpret_cast<const float*>(smem + Cfg::kOffCnt);
    float tot = 0;
    for (int r = 0; r < kRG; ++r) tot += cnt_s[r * 17 + (tid < k ? tid : 16)];
    part[int64_t{k} * d + tid] = tot;
  }
#ifdef TSM2_KMW_TRACE
  for (int q = 0; q < 15; ++q) {
    if (tr_[q] != 0) atomicAdd(&g_kmw_trace[q], tr_[q]);
  }
  if (tid == 0) atomicAdd(&g_kmw_trace[15], static_cast<unsigned long long>(ntiles));
#endif
  // No block leaves while another may still arrive on its mbarriers or read
  // its ||c||^2 partials.
  cluster.sync();
}

}  // namespace tsm2

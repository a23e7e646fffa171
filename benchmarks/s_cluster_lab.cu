// S lab: "cluster split-K", a candidate kernel for C[m, n] = A[m, k] @ B[k, n]
// with bf16 inputs, m <= 16 and a large row-major B (n contiguous), timed
// beside a plain read of B and the library's S plan.
//
// Why this design. The strips kernel (ffi/kernels/small_left_strip.cuh until
// session 15)
// gives each block a 32-column strip of B: 64 bytes per row, so DRAM sees
// short runs, and all 128 strips re-read the whole of A from the L2. Here a
// block owns NC = 256 columns (512-byte runs of each row of B) and only one
// KC-th of the contraction, so the grid is still one wave (4096 x 4096: 16
// column tiles x 8 = 128 blocks) and each block reads only its own k-range of
// A. The KC blocks of a column tile form a thread-block cluster; their
// partial sums meet through distributed shared memory, in rank order
// (deterministic), with no workspace and no second kernel.
//
// A block streams its k/KC x NC slice of B through a STAGES-deep cp.async
// ring (ROWS rows per stage, the whole block copying, B's first stage
// issued before anything else; A's k-range follows as its own cp.async
// group, then the rest of the prologue). Stage rows are 16-byte chunks with
// chunk c of row r stored at c ^ (r % 8), so the 8 rows x 16 bytes that one
// ldmatrix.trans matrix reads fall in 8 distinct bank groups. A sits in
// shared memory as 16 rows (rows m..15 zero) of an odd number of 16-byte
// chunks, for the same reason. The product is mma.sync m16n8k16 (bf16 in,
// f32 accumulators): warp w covers columns [32w, 32w + 32) (4 n8 tiles).
// Each stage's k16 chain starts from zero and is added to the running sum
// with an f32 add, as in tn_half.cuh.
//
// Build (no GPU needed) and run:
//   nvcc -O3 -std=c++17 -arch=sm_90 --expt-relaxed-constexpr -I. -Xptxas -v \
//     benchmarks/s_cluster_lab.cu ffi/launch_stream.cu -o build/labs/s_cluster_lab
//   build/labs/s_cluster_lab [filter] [k] [n]    # filter: comma-separated substrings
// Knobs of the first variant: -DSC_NC=256 -DSC_KC=8 -DSC_ROWS=32 -DSC_STAGES=4
// -DSC_WK=1 (warps splitting a stage's rows) -DSC_A_AFTER=1 (B stages issued
// before A) -DSC_RX=0 (relaxed last barrier); -DSC_SWEEP=0 drops the other built-in variants
// (2: the unsplit sweep; 3: the copy-only probes, RunProbes, before the usual m loop);
// -DSC_PDL=1 launches the lab's kernels with programmatic dependent launch (the library does by
// default; -DTSM2_S_CLUSTER_PDL=0 turns it off there). SC_TRACE=1 in the
// environment adds a per-block timeline of one launch of each kernel (SM,
// start, first stage, loop, cluster exchange, stores, exit: TraceLaunch),
// the library's through the TSM2_S_CLUSTER_MARK hook. SC_A_ROTATE=1 gives
// every launch its own copy of A too, as the harness does (the library's
// kernels only: "lib S").
#include <cooperative_groups.h>
#include <cuda.h>  // CUtensorMap and its enums (types only: nothing links libcuda)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "benchmarks/lab_common.cuh"
#include "ffi/common/cluster_pipe.cuh"
#include "ffi/common/kernel_utils.cuh"
#include "ffi/matmul/kernels/tn_half.cuh"

// The library kernel's timeline hook (small_left_cluster.cuh): thread 0 of
// each block writes its SM and %globaltimer at the four marks into
// g_lib_trace, laid out as BlockTrace::Store's words, when it is set.
__constant__ uint64_t* g_lib_trace = nullptr;
__device__ __forceinline__ void LibMark(int i) {
  if (g_lib_trace == nullptr || threadIdx.x != 0) return;
  uint64_t* out = g_lib_trace + static_cast<uint64_t>(blockIdx.x) * 8;
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  out[1 + i] = t;
  if (i == 0) {
    uint32_t sm;
    asm volatile("mov.u32 %0, %%smid;\n" : "=r"(sm));
    out[0] = sm;
  }
}
#define TSM2_S_CLUSTER_MARK(i) LibMark(i)
#include "ffi/matmul/launch_split.cuh"

#ifndef SC_NC
#define SC_NC 256
#endif
#ifndef SC_KC
#define SC_KC 8
#endif
#ifndef SC_ROWS
#define SC_ROWS 32
#endif
#ifndef SC_STAGES
#define SC_STAGES 4
#endif
#ifndef SC_WK
#define SC_WK (SC_NC >= 256 ? 1 : 256 / SC_NC)
#endif
#ifndef SC_A_AFTER
#define SC_A_AFTER 1
#endif
#ifndef SC_RX  // the main variant's last cluster barrier arrives relaxed
#define SC_RX 0
#endif
#ifndef SC_GRID1D  // a 1-D grid (clusters of consecutive blocks), as the library launches
#define SC_GRID1D 0
#endif
#ifndef SC_A_STAGE  // A's slice in a ring beside B's, one kRows piece per stage (not whole)
#define SC_A_STAGE 0
#endif
#ifndef SC_ARGS_PAD  // extra bytes of kernel parameters (unused)
#define SC_ARGS_PAD 0
#endif
#ifndef SC_SMEM_PAD  // extra bytes of dynamic shared memory (unused)
#define SC_SMEM_PAD 0
#endif
#ifndef SC_SWEEP
#define SC_SWEEP 1
#endif
#ifndef SC_PDL  // launch with programmatic stream serialization (overlaps the previous launch)
#define SC_PDL 0
#endif

namespace {

namespace cg = cooperative_groups;
using bf16 = __nv_bfloat16;
using tsm2::ClusterArriveRelaxed;
using tsm2::ClusterWait;
using tsm2::CpAsync16;
using tsm2::CpAsyncCommit;
using tsm2::CpAsyncWait;
using tsm2::LdMatrixX4;
using tsm2::LdMatrixX4Trans;
using tsm2::MmaHalf;

constexpr double kPeakGbs = 3080.0;  // H100 80GB HBM3, our read ceiling

struct ScArgs {
  const bf16* a;  // [m][k]
  const bf16* b;  // [k][n]
  bf16* c;        // [m][n]
  int m, k, n;
  uint64_t* trace = nullptr;  // kTraceWords per block when set (TraceLaunch)
#if SC_ARGS_PAD
  char pad[SC_ARGS_PAD] = {};  // unused: the library's SplitArgs is larger
#endif
};

// Per-block timeline of one launch (lab only): SM, then %globaltimer (ns) at
// six marks: entry, first stage landed, main loop done, partial sums shared
// (first cluster barrier), own outputs written, exit.
constexpr int kTraceWords = 8, kMarks = 6;
__device__ __forceinline__ uint64_t GlobalTimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}
struct BlockTrace {
  uint64_t t[kMarks] = {};
  __device__ __forceinline__ void Mark(const ScArgs& p, int i) {
    if (p.trace && threadIdx.x == 0) t[i] = GlobalTimer();
  }
  __device__ __forceinline__ void Store(const ScArgs& p) {
    if (!p.trace || threadIdx.x != 0) return;
    uint32_t sm;
    asm volatile("mov.u32 %0, %%smid;\n" : "=r"(sm));
    uint64_t* out = p.trace + (blockIdx.y * gridDim.x + blockIdx.x) * kTraceWords;
    out[0] = sm;
    for (int i = 0; i < kMarks; ++i) out[1 + i] = t[i];
  }
};

// NC columns per block, KC blocks (one cluster) per column tile, ROWS rows of
// B per stage, STAGES stages, WK warps sharing each 32-column slice (they
// split a stage's k16 steps), B stages issued before A's copy (A_AFTER).
// RX: the last cluster barrier arrives relaxed (see the kernel).
template <int NC_, int KC_, int ROWS_, int STAGES_, int WK_, int A_AFTER_ = 1, int RX_ = 0>
struct ScCfg {
  static constexpr int kNC = NC_, kKC = KC_, kRows = ROWS_, kStages = STAGES_, kWK = WK_;
  static constexpr int kAAfter = A_AFTER_, kRelaxedExit = RX_;
  static constexpr int kWarpsN = kNC / 32;
  static constexpr int kWarps = kWarpsN * kWK;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kChunksPerRow = kNC / 8;                  // 16-byte chunks of a B row
  static constexpr int kRowsPerPass = kThreads / kChunksPerRow;  // rows one copy pass covers
  static constexpr int kStageElems = kRows * kNC;
  static constexpr int kRingBytes = kStages * kStageElems * 2;
  static constexpr int kLdp = kNC + 8;  // row stride of the partial sums (floats)
  static constexpr int kPartBytes = kWK * 16 * kLdp * 4;
  static constexpr int kRedCols = kNC / kKC;  // columns each rank reduces and writes
  static constexpr int kK16PerWarp = kRows / 16 / kWK;
  static_assert(kNC % 64 == 0, "the swizzle needs at least 8 chunks per row");
  static_assert(kKC >= 1 && kKC <= 16, "cluster size");
  static_assert(kThreads <= 1024 && kThreads % kChunksPerRow == 0, "whole rows per copy pass");
  static_assert(kRows % kRowsPerPass == 0, "whole passes per stage");
  static_assert(kRows % 16 == 0 && (kRows / 16) % kWK == 0, "k16 steps split evenly");
  static_assert(kRedCols % 4 == 0, "float4 reduction");
  static_assert(kStages >= 2 && kAAfter >= 1 && kAAfter <= kStages - 1, "prologue order");
  static_assert(kPartBytes <= kRingBytes, "the partial sums reuse the ring");

  static int ASlice(int k) { return k / kKC; }  // contraction rows per block
  static int Lda(int k) { return SC_A_STAGE ? kRows + 8 : ASlice(k) + 8; }
  static int SmemBytes(const ScArgs& p) {
    return kRingBytes + (SC_A_STAGE ? kStages : 1) * 16 * Lda(p.k) * 2 + SC_SMEM_PAD;
  }
  static bool Takes(const ScArgs& p) {
    return p.m >= 1 && p.m <= 16 && p.k % (kKC * kRows) == 0 && p.n % kNC == 0 &&
           reinterpret_cast<uintptr_t>(p.a) % 16 == 0 &&
           reinterpret_cast<uintptr_t>(p.b) % 16 == 0 && reinterpret_cast<uintptr_t>(p.c) % 8 == 0;
  }
};

// Queues one stage: rows [row0, row0 + kRows) of the block's slice of B
// (already offset to the block's first row and column) into `stage`, swizzled.
template <class Cfg>
__device__ __forceinline__ void LoadBStage(const bf16* b_blk, int64_t n, int row0, bf16* stage) {
  const int c = threadIdx.x % Cfg::kChunksPerRow, r0 = threadIdx.x / Cfg::kChunksPerRow;
  const bf16* src = b_blk + (row0 + r0) * n + 8 * c;
#pragma unroll
  for (int j = 0; j < Cfg::kRows / Cfg::kRowsPerPass; ++j) {
    const int r = r0 + j * Cfg::kRowsPerPass;
    CpAsync16(stage + r * Cfg::kNC + 8 * (c ^ (r % 8)), src + j * Cfg::kRowsPerPass * n, true);
  }
}

// Queues A[:m, k0:k0 + ks] into rows 0..m-1 of `as` (row stride ks + 8) and
// commits it as one cp.async group.
template <class Cfg>
__device__ __forceinline__ void LoadA(const ScArgs& p, int64_t k0, int ks, bf16* as) {
  const int a_chunks = ks / 8, lda = ks + 8;
  for (int e = threadIdx.x; e < p.m * a_chunks; e += Cfg::kThreads) {
    const int i = e / a_chunks, j = 8 * (e % a_chunks);
    CpAsync16(as + i * lda + j, p.a + static_cast<int64_t>(i) * p.k + k0 + j, true);
  }
  CpAsyncCommit();
}

// SC_A_STAGE: A[:m, k0 + row0 : k0 + row0 + kRows] into one stage of A's
// ring (row stride kRows + 8), in the current cp.async group.
template <class Cfg>
__device__ __forceinline__ void LoadAStage(const ScArgs& p, int64_t k0, int row0, bf16* as_stage) {
  constexpr int kChunks = Cfg::kRows / 8, kLda = Cfg::kRows + 8;
  for (int e = threadIdx.x; e < p.m * kChunks; e += Cfg::kThreads) {
    const int i = e / kChunks, j = 8 * (e % kChunks);
    CpAsync16(as_stage + i * kLda + j, p.a + static_cast<int64_t>(i) * p.k + k0 + row0 + j, true);
  }
}

// m16n8 accumulators: lane holds rows lane / 4 and lane / 4 + 8, columns
// 2 (lane % 4) and the next, of each n8 tile. Only the m real rows are kept.
template <class Cfg>
__device__ __forceinline__ void WritePartials(const ScArgs& p, const float (&acc)[4][4], int wn,
                                              int wk, float* part_s) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int f = 0; f < 4; ++f) {
    const int j = 32 * wn + 8 * f + 2 * (lane % 4);
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int i = lane / 4 + 8 * hh;
      if (i < p.m) {
        *reinterpret_cast<float2*>(part_s + (wk * 16 + i) * Cfg::kLdp + j) =
            make_float2(acc[f][2 * hh], acc[f][2 * hh + 1]);
      }
    }
  }
}

// Rank r reduces columns [r * kRedCols, (r + 1) * kRedCols) over the KC
// ranks (and WK warp groups) in a fixed order, 4 columns per thread, and
// writes them as bf16.
template <class Cfg>
__device__ __forceinline__ void ReduceOverCluster(const ScArgs& p, cg::cluster_group& cluster,
                                                  int rank, int64_t col0, float* part_s) {
  constexpr int KC = Cfg::kKC, kQuads = Cfg::kRedCols / 4;
  for (int e = threadIdx.x; e < p.m * kQuads; e += Cfg::kThreads) {
    const int i = e / kQuads, j = rank * Cfg::kRedCols + 4 * (e % kQuads);
    float4 v[KC * Cfg::kWK];
#pragma unroll
    for (int src = 0; src < KC; ++src) {
      const float* remote = cluster.map_shared_rank(part_s, src);
#pragma unroll
      for (int g = 0; g < Cfg::kWK; ++g) {
        v[src * Cfg::kWK + g] =
            *reinterpret_cast<const float4*>(remote + (g * 16 + i) * Cfg::kLdp + j);
      }
    }
    float4 s = v[0];
#pragma unroll
    for (int u = 1; u < KC * Cfg::kWK; ++u) {
      s.x += v[u].x;
      s.y += v[u].y;
      s.z += v[u].z;
      s.w += v[u].w;
    }
    *reinterpret_cast<uint2*>(p.c + static_cast<int64_t>(i) * p.n + col0 + j) =
        make_uint2(tsm2::PackPair<bf16>(s.x, s.y), tsm2::PackPair<bf16>(s.z, s.w));
  }
}

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 2)
    ScClusterKernel(const __grid_constant__ ScArgs p) {
  constexpr int NC = Cfg::kNC, KC = Cfg::kKC, S = Cfg::kStages;
  extern __shared__ __align__(16) char smem[];
  bf16* ring = reinterpret_cast<bf16*>(smem);
  bf16* as = reinterpret_cast<bf16*>(smem + Cfg::kRingBytes);  // [16][lda]
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int ks = p.k / KC, lda = SC_A_STAGE ? Cfg::kRows + 8 : ks + 8, steps = ks / Cfg::kRows;
  const int64_t n = p.n;
  const int64_t col0 = static_cast<int64_t>(SC_GRID1D ? blockIdx.x / KC : blockIdx.y) * NC;
  const int64_t k0 = static_cast<int64_t>(rank) * ks;
  const bf16* b_blk = p.b + k0 * n + col0;
  BlockTrace trace;
  trace.Mark(p, 0);
#if SC_PDL
  // Launched with programmatic stream serialization: wait here for the
  // previous launch (and its writes) before the first global read.
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif

  // Prologue: S - 1 stages of B and, after the first A_AFTER of them, A's
  // k-range as its own group (S groups in all).
#if SC_A_STAGE
  constexpr int kAStage = 16 * (Cfg::kRows + 8);  // elements of one stage of A's ring
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < steps) {
      LoadBStage<Cfg>(b_blk, n, s * Cfg::kRows, ring + s * Cfg::kStageElems);
      LoadAStage<Cfg>(p, k0, s * Cfg::kRows, as + s * kAStage);
    }
    CpAsyncCommit();
  }
  // Rows m..15 of every stage of A's ring are zeros.
  constexpr int kAChunks = (Cfg::kRows + 8) / 8;
  for (int e = p.m * kAChunks + tid; e < 16 * kAChunks * S; e += Cfg::kThreads) {
    const int st = e / (16 * kAChunks), r = e % (16 * kAChunks);
    if (r >= p.m * kAChunks) {
      *reinterpret_cast<uint4*>(as + st * kAStage + 8 * r) = make_uint4(0, 0, 0, 0);
    }
  }
#else
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s == Cfg::kAAfter) LoadA<Cfg>(p, k0, ks, as);
    if (s < steps) LoadBStage<Cfg>(b_blk, n, s * Cfg::kRows, ring + s * Cfg::kStageElems);
    CpAsyncCommit();
  }
  if (Cfg::kAAfter == S - 1) LoadA<Cfg>(p, k0, ks, as);
  // A's rows m..15 are zeros (seen by all after the first barrier of the loop).
  const int a_chunks = ks / 8;
  for (int e = p.m * a_chunks + tid; e < 16 * a_chunks; e += Cfg::kThreads) {
    const int i = e / a_chunks, j = 8 * (e % a_chunks);
    *reinterpret_cast<uint4*>(as + i * lda + j) = make_uint4(0, 0, 0, 0);
  }
#endif

  // ldmatrix rows: lane l addresses row l % 8 of matrix l / 8. A's matrices
  // are (rows 0-7, k 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15); B's, per
  // 16 columns h, (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15,
  // n 8-15). A k16 step starts at a multiple of 16 rows, so a lane's row % 8
  // is lane % 8 and its swizzled chunk is fixed for the whole loop.
  const int wn = warp % Cfg::kWarpsN, wk = warp / Cfg::kWarpsN;
  const int lrow = lane % 8 + 8 * (lane / 8 % 2), lhi = lane / 16;
  const int a_off = lrow * lda + 8 * lhi;
  int b_off[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) b_off[h] = lrow * NC + 8 * ((4 * wn + 2 * h + lhi) ^ (lane % 8));

  float acc[4][4] = {};
  for (int it = 0; it < steps; ++it) {
    if (it == 0 && !SC_A_STAGE) {
      CpAsyncWait<S - 1 - Cfg::kAAfter>();  // stage 0 and A
    } else {
      CpAsyncWait<S - 2>();
    }
    __syncthreads();  // stage `it` landed for every thread; stage it - 1 is free
    if (it == 0) trace.Mark(p, 1);
    const int ip = it + S - 1;
    if (ip < steps) {
      LoadBStage<Cfg>(b_blk, n, ip * Cfg::kRows, ring + (ip % S) * Cfg::kStageElems);
#if SC_A_STAGE
      LoadAStage<Cfg>(p, k0, ip * Cfg::kRows, as + (ip % S) * kAStage);
#endif
    }
    CpAsyncCommit();

    const bf16* st = ring + (it % S) * Cfg::kStageElems;
    float part[4][4] = {};
#pragma unroll
    for (int q = 0; q < Cfg::kK16PerWarp; ++q) {
      const int kr = 16 * (wk + Cfg::kWK * q);
      uint32_t fa[4], fb[2][4];
      LdMatrixX4(as + (SC_A_STAGE ? (it % S) * 16 * lda : it * Cfg::kRows) + a_off + kr, fa);
#pragma unroll
      for (int h = 0; h < 2; ++h) LdMatrixX4Trans(st + kr * NC + b_off[h], fb[h]);
#pragma unroll
      for (int f = 0; f < 4; ++f) {
        const uint32_t frag[2] = {fb[f / 2][2 * (f % 2)], fb[f / 2][2 * (f % 2) + 1]};
        MmaHalf<bf16>(part[f], fa, frag);
      }
    }
#pragma unroll
    for (int f = 0; f < 4; ++f) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[f][e] += part[f][e];
    }
  }
  CpAsyncWait<0>();  // only empty groups are left, but leave none behind
  __syncthreads();   // every warp is done with the ring: it now takes the partial sums
  trace.Mark(p, 2);

  float* part_s = reinterpret_cast<float*>(smem);  // [kWK][16][kLdp]
  WritePartials<Cfg>(p, acc, wn, wk, part_s);
  cluster.sync();  // every rank's partial sums are in its shared memory
  trace.Mark(p, 3);
  ReduceOverCluster<Cfg>(p, cluster, rank, col0, part_s);
  trace.Mark(p, 4);
  // No rank exits while another may still read its shared memory. RX: a
  // relaxed arrival does not wait for this block's stores of C to land.
  if constexpr (Cfg::kRelaxedExit) {
    ClusterArriveRelaxed();
    ClusterWait();
  } else {
    cluster.sync();
  }
  trace.Mark(p, 5);
  trace.Store(p);
}

// ---------------------------------------------------------------------------
// Tensor maps (session 26). The lab's own tensor-map S kernel (ScTmaKernel,
// TryTma: calls 2 and 4 of session 26) became ffi/kernels/small_left_tma.cuh
// and left the lab at 4d90880; TryLib times it where the library's plan picks
// it. The copy-only probe below stays.
// cuTensorMapEncodeTiled through the runtime's driver entry point.
using EncodeFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                              const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                              const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                              CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
EncodeFn Encoder() {
  static EncodeFn fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found;
    CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                           &found));
    return reinterpret_cast<EncodeFn>(f);
  }();
  return fn;
}
// A bf16 row-major [rows][cols] matrix as a tensor map of box_rows x 64
// boxes with the 128-byte swizzle.
CUtensorMap EncodeBf16(const void* ptr, int64_t rows, int64_t cols, int box_rows) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t stride[1] = {static_cast<cuuint64_t>(cols) * 2};
  const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(box_rows)}, unit[2] = {1, 1};
  const CUresult r =
      Encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(ptr), dims, stride,
                box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::printf("cuTensorMapEncodeTiled failed: %d\n", static_cast<int>(r));
    std::exit(1);
  }
  return map;
}

// Launch configuration of one variant, prepared once outside the timed loop.
template <class Cfg, void (*Kernel)(ScArgs)>
struct ScLauncher {
  cudaLaunchConfig_t cfg{};
  cudaLaunchAttribute attr[2];
  int smem = 0, max_clusters = 0;

  // Sets up the launch for problem p; false (with a reason printed) when the
  // variant cannot run it.
  bool Setup(const ScArgs& p, cudaStream_t stream, const char* name, bool verbose) {
    if (!Cfg::Takes(p)) {
      if (verbose) std::printf("# %s: skipped (m, k, n or alignment not supported)\n", name);
      return false;
    }
    smem = Cfg::SmemBytes(p);
    const void* kernel = reinterpret_cast<const void*>(Kernel);
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    if (Cfg::kKC > 8) {
      CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    }
    cfg.gridDim =
        SC_GRID1D ? dim3(Cfg::kKC * (p.n / Cfg::kNC), 1, 1) : dim3(Cfg::kKC, p.n / Cfg::kNC, 1);
    cfg.blockDim = dim3(Cfg::kThreads, 1, 1);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    tsm2::SetClusterLaunch(&cfg, attr, Cfg::kKC, SC_PDL);
    const cudaError_t e = cudaOccupancyMaxActiveClusters(&max_clusters, kernel, &cfg);
    if (e != cudaSuccess || max_clusters < 1) {
      std::printf("# %s: cannot launch (%s, max active clusters %d)\n", name, cudaGetErrorString(e),
                  max_clusters);
      cudaGetLastError();
      return false;
    }
    int per_sm = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Cfg::kThreads, smem));
    const int clusters = p.n / Cfg::kNC;
    if (!verbose) return true;
    std::printf(
        "# %s: grid %d x %d, %d threads, smem %d B, %d blocks/SM, at most %d active "
        "clusters of %d for %d%s\n",
        name, Cfg::kKC, clusters, Cfg::kThreads, smem, per_sm, max_clusters, Cfg::kKC, clusters,
        max_clusters < clusters ? ": MORE THAN ONE WAVE" : "");
    return true;
  }
  void Launch(const ScArgs& p) { CHECK(cudaLaunchKernelEx(&cfg, Kernel, p)); }
};

// ---------------------------------------------------------------------------
// Harness kernels: reference, error (fill: lab_common.cuh; the plain read of
// B: the harness's own streaming-read kernel, tsm2::LaunchStreamRead).

// ref[i, j] = sum_kk A[i, kk] B[kk, j], accumulated in double.
__global__ void ReferenceKernel(const bf16* a, const bf16* b, float* ref, int m, int k, int n) {
  const int64_t o = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (o >= int64_t{m} * n) return;
  const int64_t i = o / n, j = o % n;
  double s = 0;
  for (int64_t kk = 0; kk < k; ++kk) {
    s += static_cast<double>(__bfloat162float(a[i * k + kk])) *
         static_cast<double>(__bfloat162float(b[kk * n + j]));
  }
  ref[o] = static_cast<float>(s);
}

// Largest |c - ref| / max(|ref|, 1) over the m x n outputs (NaN: 1e30).
__global__ void ErrorKernel(const bf16* c, const float* ref, int64_t count, unsigned* worst) {
  const int64_t o = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (o >= count) return;
  float err = fabsf(__bfloat162float(c[o]) - ref[o]) / fmaxf(fabsf(ref[o]), 1.0f);
  if (!(err == err)) err = 1e30f;
  atomicMax(worst, __float_as_uint(err));  // non-negative floats order as their bits
}

// ---------------------------------------------------------------------------
// Harness.

struct Lab {
  int k = 4096, n = 4096;
  int64_t b_elems = 0, b_stride = 0, copies = 1;
  // Copies of A and of C: SC_A_COPIES / SC_C_COPIES, else SC_AC_COPIES, else
  // `copies` (the harness gives each of its up to 256 products its own).
  int64_t a_copies = 1, c_copies = 1;
  bf16* a = nullptr;     // [16][k]: the problem with m rows uses the first m
  bf16* b = nullptr;     // `copies` copies of [k][n]
  bf16* c = nullptr;     // [16][n]
  float* ref = nullptr;  // [16][n], for A's 16 rows (a prefix serves every m)
  unsigned* worst = nullptr;
  uint32_t* sink = nullptr;
  uint64_t* trace = nullptr;      // kTraceWords per block of a traced launch
  cudaStream_t stream = nullptr;  // every timed launch (blocking: it orders with the legacy stream)
  bool tracing = false;           // SC_TRACE=1 in the environment
  void* ws = nullptr;
  size_t ws_bytes = size_t{64} << 20;
  int sms = 0;
  const char* filter = nullptr;

  const bf16* B(int64_t copy) const { return b + (copy % copies) * b_stride; }
  // SC_A_ROTATE=1: A too is a different copy each launch, as in the harness
  // (session 27: it changed nothing for the tensor-map kernel).
  bool rotate_a = false;
  const bf16* A(int64_t copy) const { return a + (rotate_a ? copy % a_copies : 0) * 16 * k; }
  // SC_C_ROTATE=1: each launch writes its own C, as each product in the
  // harness does (C(0) is `c`, which the error check reads).
  bool rotate_c = false;
  bf16* C(int64_t copy) const { return c + (rotate_c ? copy % c_copies : 0) * 16 * n; }
  // SC_CHILD=1: the timed graph holds each launch as a child graph of its
  // own, as XLA's command buffers record a custom call.
  bool child_graphs = false;
  ScArgs Args(int m, int64_t copy) const { return ScArgs{a, B(copy), c, m, k, n}; }
};

// Per-launch seconds over 200 launches (after 20), launch i on copy i of B
// (the copies total >= 4x the L2, so B comes from DRAM), timed twice: back to
// back on lab.stream (the host's launch cost can show between kernels), and
// the same launches captured in a CUDA graph and replayed (kernels follow
// each other with no host in between, as XLA's do: its kernel timelines show
// ~0.03 us gaps). The graph's time is the one to compare with the harness.
struct Timing {
  double graph = 0, stream = 0;  // seconds per launch
};
template <typename F>
Timing TimeRotating(const Lab& lab, const F& launch) {
  constexpr int kWarm = 20, kTimed = 200;
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  auto elapsed = [&] {
    CHECK(cudaEventSynchronize(e1));
    CHECK(cudaGetLastError());
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    return ms * 1e-3 / kTimed;
  };
  Timing t;
  int64_t turn = 0;
  for (int i = 0; i < kWarm; ++i) launch(turn++);
  CHECK(cudaEventRecord(e0, lab.stream));
  for (int i = 0; i < kTimed; ++i) launch(turn++);
  CHECK(cudaEventRecord(e1, lab.stream));
  t.stream = elapsed();

  cudaGraph_t graph;
  cudaGraphExec_t exec;
  if (lab.child_graphs) {
    CHECK(cudaGraphCreate(&graph, 0));
    cudaGraphNode_t prev = nullptr;
    for (int i = 0; i < kTimed; ++i) {
      cudaGraph_t one;
      CHECK(cudaStreamBeginCapture(lab.stream, cudaStreamCaptureModeThreadLocal));
      launch(turn++);
      CHECK(cudaStreamEndCapture(lab.stream, &one));
      cudaGraphNode_t node;
      CHECK(cudaGraphAddChildGraphNode(&node, graph, prev ? &prev : nullptr, prev ? 1 : 0, one));
      CHECK(cudaGraphDestroy(one));  // the node holds its own copy
      prev = node;
    }
  } else {
    CHECK(cudaStreamBeginCapture(lab.stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < kTimed; ++i) launch(turn++);
    CHECK(cudaStreamEndCapture(lab.stream, &graph));
  }
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphLaunch(exec, lab.stream));  // warm-up replay
  CHECK(cudaEventRecord(e0, lab.stream));
  CHECK(cudaGraphLaunch(exec, lab.stream));
  CHECK(cudaEventRecord(e1, lab.stream));
  t.graph = elapsed();
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaEventDestroy(e0));
  CHECK(cudaEventDestroy(e1));
  return t;
}

// Fills C with garbage, runs one launch (on copy 0) and returns the worst error.
template <typename F>
double WorstError(const Lab& lab, int m, const F& launch) {
  CHECK(cudaMemset(lab.c, 0xff, size_t{16} * lab.n * sizeof(bf16)));
  launch(int64_t{0});
  CHECK(cudaMemset(lab.worst, 0, sizeof(unsigned)));
  const int64_t outs = int64_t{m} * lab.n;
  ErrorKernel<<<static_cast<unsigned>((outs + 255) / 256), 256>>>(lab.c, lab.ref, outs, lab.worst);
  unsigned bits = 0;
  CHECK(cudaMemcpy(&bits, lab.worst, sizeof bits, cudaMemcpyDeviceToHost));
  float err;
  std::memcpy(&err, &bits, sizeof err);
  return err;
}

void Report(const Lab& lab, const char* name, int m, const Timing& t, double bytes, double err) {
  const double gbs = bytes / t.graph * 1e-9;
  std::printf("%-30s %3d %6d %6d %8.2f us %7.0f GB/s %6.1f %%  err %.2e  (stream %.2f us)%s\n",
              name, m, lab.k, lab.n, t.graph * 1e6, gbs, 100.0 * gbs / kPeakGbs, err,
              t.stream * 1e6, err > 1e-2 ? "  FAIL" : "");
  std::fflush(stdout);
}

double ProductBytes(const Lab& lab, int m) {
  return 2.0 * (static_cast<double>(m) * lab.k + static_cast<double>(lab.k) * lab.n +
                static_cast<double>(m) * lab.n);
}

void TryRead(const Lab& lab) {
  const char* name = "read B";
  if (!lab::Wanted(name, lab.filter)) return;
  auto launch = [&](int64_t turn) {
    CHECK(tsm2::LaunchStreamRead(lab.B(turn), lab.b_elems * 2, lab.sink, lab.sms * 8, lab.stream));
  };
  const Timing sec = TimeRotating(lab, launch);
  Report(lab, name, 0, sec, 2.0 * lab.b_elems, 0.0);
}

// Runs one launch with the per-block trace on (after warm-up launches, on a
// copy of B not in the L2) and prints where the time went: the kernel's span,
// how late blocks started, how long their first stage took to land, their
// main loops and their reduction tails, and whether blocks that shared an SM
// ran longer than blocks alone on theirs.
template <typename F>
void TraceLaunch(const Lab& lab, const char* name, int m, int blocks, int cluster,
                 const F& launch) {
  for (int64_t turn = 1; turn <= 20; ++turn) launch(turn, nullptr);
  launch(int64_t{21}, lab.trace);
  CHECK(cudaDeviceSynchronize());
  std::vector<uint64_t> t(static_cast<size_t>(blocks) * kTraceWords);
  CHECK(cudaMemcpy(t.data(), lab.trace, t.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost));
  auto at = [&](int b, int w) { return t[static_cast<size_t>(b) * kTraceWords + w]; };
  uint64_t t0 = ~uint64_t{0}, t1 = 0;
  std::vector<int> per_sm(1024, 0);
  for (int b = 0; b < blocks; ++b) {
    t0 = std::min(t0, at(b, 1));
    t1 = std::max(t1, at(b, kMarks));
    ++per_sm[at(b, 0) % 1024];
  }
  // Phases between consecutive marks (us), per block.
  const char* kPhase[kMarks - 1] = {"first stage", "loop", "share", "reduce", "exit"};
  std::vector<double> enter, phase[kMarks - 1], loop_shared, loop_alone;
  for (int b = 0; b < blocks; ++b) {
    enter.push_back((at(b, 1) - t0) * 1e-3);
    for (int q = 0; q < kMarks - 1; ++q) phase[q].push_back((at(b, 2 + q) - at(b, 1 + q)) * 1e-3);
    (per_sm[at(b, 0) % 1024] > 1 ? loop_shared : loop_alone).push_back(phase[1].back());
  }
  auto med = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  auto mx = [](const std::vector<double>& v) {
    return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end());
  };
  int shared_sms = 0, used_sms = 0;
  for (int c : per_sm) {
    used_sms += c > 0;
    shared_sms += c > 1;
  }
  std::printf("trace %-28s m=%2d span %5.2f us | enter max %4.2f", name, m, (t1 - t0) * 1e-3,
              mx(enter));
  for (int q = 0; q < kMarks - 1; ++q) {
    std::printf(" | %s %4.2f (max %4.2f)", kPhase[q], med(phase[q]), mx(phase[q]));
  }
  std::printf(" | %d SMs, %d with 2+ blocks: loop %4.2f shared, %4.2f alone\n", used_sms,
              shared_sms, med(loop_shared), med(loop_alone));
  if (m == 1) {  // one line per cluster: SMs, and start / loop end / exit offsets in us
    for (int c0 = 0; c0 < blocks; c0 += cluster) {
      std::printf("#   cluster %3d:", c0 / cluster);
      for (int b = c0; b < c0 + cluster; ++b) {
        std::printf(" sm%3llu%s %4.1f/%4.1f/%4.1f", static_cast<unsigned long long>(at(b, 0)),
                    per_sm[at(b, 0) % 1024] > 1 ? "*" : " ", (at(b, 1) - t0) * 1e-3,
                    (at(b, 3) - t0) * 1e-3, (at(b, kMarks) - t0) * 1e-3);
      }
      std::printf("\n");
    }
  }
  std::fflush(stdout);
}

template <class Cfg, void (*Kernel)(ScArgs)>
void TryVariant(const Lab& lab, int m, const char* kind) {
  char name[96];
  std::snprintf(name, sizeof name, "%s%s nc%d kc%d r%d s%d wk%d a%d", kind,
                Cfg::kRelaxedExit ? " rx" : "", Cfg::kNC, Cfg::kKC, Cfg::kRows, Cfg::kStages,
                Cfg::kWK, Cfg::kAAfter);
  if (!lab::Wanted(name, lab.filter)) return;
  ScLauncher<Cfg, Kernel> launcher;
  static bool said = false;  // the setup line once per variant
  if (!launcher.Setup(lab.Args(m, 0), lab.stream, name, !said)) return;
  said = true;
  auto launch = [&](int64_t turn) { launcher.Launch(lab.Args(m, turn)); };
  const double err = WorstError(lab, m, launch);
  const Timing sec = TimeRotating(lab, launch);
  Report(lab, name, m, sec, ProductBytes(lab, m), err);
  if (lab.tracing) {
    TraceLaunch(lab, name, m, Cfg::kKC * (lab.n / Cfg::kNC), Cfg::kKC,
                [&](int64_t turn, uint64_t* trace) {
                  ScArgs a = lab.Args(m, turn);
                  a.trace = trace;
                  launcher.Launch(a);
                });
  }
}

template <class Cfg>
void TryCluster(const Lab& lab, int m) {
  TryVariant<Cfg, ScClusterKernel<Cfg>>(lab, m, "cluster");
}

// Copy-only probe (session 26): blocks stream column strips of B, NCB boxes
// of 64 columns side by side (runs of 128 * NCB bytes of each row) and ROWS
// rows a stage, over one KC-th of the rows (blockIdx.y), through a producer
// warp and an mbarrier ring as in small_left_tma.cuh, with consumers that
// only release the stages. It asks what the access pattern alone costs against a plain read.
template <int NCB, int ROWS, int S>
__global__ void __launch_bounds__(288, 1)
    ScTmaProbeKernel(const __grid_constant__ CUtensorMap b_map, int k, int kc) {
  constexpr int kStage = NCB * ROWS * 128;
  extern __shared__ __align__(16) char smem_raw[];
  const uint32_t raw = tsm2::SmemAddr(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  const uint32_t full = base + S * kStage, empty = full + 8 * S;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int rows = k / kc, steps = rows / ROWS, r_begin = blockIdx.y * rows;
  const int col0 = blockIdx.x * NCB * 64;
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      tsm2::MbarInit(full + 8 * s, 1);
      tsm2::MbarInit(empty + 8 * s, 8);
    }
    tsm2::MbarInitFence();
  }
  __syncthreads();
#if SC_PDL
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
  if (warp == 8) {
    if (lane == 0) {
      for (int it = 0; it < steps; ++it) {
        const int s = it % S;
        if (it >= S) tsm2::MbarWait(empty + 8 * s, (it / S - 1) & 1);
        tsm2::MbarArriveExpectTx(full + 8 * s, kStage);
#pragma unroll
        for (int b = 0; b < NCB; ++b) {
          tsm2::TmaLoad2d(base + s * kStage + b * ROWS * 128, &b_map, col0 + 64 * b,
                          r_begin + it * ROWS, full + 8 * s);
        }
      }
    }
  } else {
    for (int it = 0; it < steps; ++it) {
      const int s = it % S;
      tsm2::MbarWait(full + 8 * s, (it / S) & 1);
      __syncwarp();
      if (lane == 0) tsm2::MbarArrive(empty + 8 * s);
    }
  }
}

template <int NCB, int ROWS, int S>
void TryProbe(const Lab& lab, int kc) {
  char name[96];
  std::snprintf(name, sizeof name, "probe runs%d r%d s%d kc%d", NCB * 128, ROWS, S, kc);
  if (!lab::Wanted(name, lab.filter)) return;
  if (lab.n % (64 * NCB) != 0 || lab.k % (kc * ROWS) != 0) return;
  std::vector<CUtensorMap> b_maps;
  for (int64_t i = 0; i < lab.copies; ++i)
    b_maps.push_back(EncodeBf16(lab.B(i), lab.k, lab.n, ROWS));
  const int smem = 1024 + S * NCB * ROWS * 128 + 16 * S;
  auto kernel = ScTmaProbeKernel<NCB, ROWS, S>;
  CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                             cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  cudaLaunchConfig_t cfg{};
  cudaLaunchAttribute attr[2];
  cfg.gridDim = dim3(lab.n / (64 * NCB), kc, 1);
  cfg.blockDim = dim3(288, 1, 1);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = lab.stream;
  tsm2::SetClusterLaunch(&cfg, attr, 1, SC_PDL);
  int per_sm = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 288, smem));
  auto launch = [&](int64_t turn) {
    CHECK(cudaLaunchKernelEx(&cfg, kernel, b_maps[turn % lab.copies], lab.k, kc));
  };
  const Timing sec = TimeRotating(lab, launch);
  char label[128];
  std::snprintf(label, sizeof label, "%s (%d blocks, %d/SM)", name, (lab.n / (64 * NCB)) * kc,
                per_sm);
  Report(lab, label, 0, sec, 2.0 * lab.b_elems, 0.0);
}

void RunProbes(const Lab& lab) {
  TryProbe<1, 128, 4>(lab, 1);
  TryProbe<1, 128, 4>(lab, 2);
  TryProbe<1, 128, 8>(lab, 1);
  TryProbe<1, 128, 8>(lab, 2);
  TryProbe<2, 64, 8>(lab, 1);
  TryProbe<2, 64, 8>(lab, 2);
  TryProbe<4, 32, 8>(lab, 2);
  TryProbe<4, 32, 8>(lab, 4);
  TryProbe<8, 16, 8>(lab, 4);
  TryProbe<8, 16, 8>(lab, 8);
  TryProbe<1, 256, 4>(lab, 2);
  TryProbe<1, 128, 6>(lab, 1);
  TryProbe<1, 128, 6>(lab, 2);
}

// The library's S plan (the cluster kernel at 4096 x 4096 since session 15,
// strips before), launched as
// SplitLauncher<bf16>::Launch does but without instantiating the T kernels.
void TryLib(Lab& lab, int m) {
  const char* name = "lib S";
  if (!lab::Wanted(name, lab.filter)) return;
  using L = tsm2::SplitLauncher<bf16>;
  tsm2::DeviceMatmul p;
  p.a = lab.a;
  p.b = lab.b;
  p.c = lab.c;
  p.m = m;
  p.k = lab.k;
  p.n = lab.n;
  p.type = tsm2::ElemType::kBF16;
  p.layout = tsm2::Layout::kNN;
  tsm2::MatmulPlan plan;
  plan.family = tsm2::Kernel::kTsm2s;
  CHECK(L::Plan(p, tsm2::Kernel::kTsm2s, lab.ws_bytes, &plan));
  const tsm2::SplitPlan s = L::MakePlan(p, tsm2::Kernel::kTsm2s, lab.sms);
  if (plan.splits >= 32) {  // Launch would reduce with a warp per output
    std::printf("# %s m=%d: plan has %lld splits, skipped\n", name, m,
                static_cast<long long>(plan.splits));
    return;
  }
  auto launch = [&](int64_t turn) {
    tsm2::DeviceMatmul q = p;
    q.b = lab.B(turn);
    q.a = lab.A(turn);
    q.c = lab.C(turn);
    const tsm2::SplitArgs args = L::Args(q, plan, s, lab.ws);
    CHECK(L::LaunchS(q, args, s, lab.stream));
    if (plan.splits > 1) {
      const int64_t outputs = int64_t{m} * lab.n;
      const int blocks = static_cast<int>(std::min<int64_t>((outputs + 255) / 256, 16 * lab.sms));
      tsm2::Tsm2SplitReduceKernel<bf16, false>
          <<<blocks, 256, 0, lab.stream>>>(args, int64_t{1}, false);
      CHECK(cudaGetLastError());
    }
  };
  const double err = WorstError(lab, m, launch);
  const Timing sec = TimeRotating(lab, launch);
  if (lab.tracing && s.cluster) {
    const int blocks =
        static_cast<int>(plan.splits * ((lab.n + tsm2::kSClusterCols - 1) / tsm2::kSClusterCols)) *
        tsm2::kSClusterBlocks;
    TraceLaunch(lab, name, m, blocks, tsm2::kSClusterBlocks, [&](int64_t turn, uint64_t* trace) {
      CHECK(cudaMemcpyToSymbol(g_lib_trace, &trace, sizeof trace));
      launch(turn);
    });
    uint64_t* none = nullptr;
    CHECK(cudaMemcpyToSymbol(g_lib_trace, &none, sizeof none));
  }
  if (m == 1) {
    std::printf("# %s: cluster %d, blocks %d, splits %lld, tile_n %lld\n", name, s.cluster ? 1 : 0,
                plan.blocks, static_cast<long long>(plan.splits), static_cast<long long>(s.tile_n));
  }
  Report(lab, name, m, sec, ProductBytes(lab, m), err);
}

using MainCfg = ScCfg<SC_NC, SC_KC, SC_ROWS, SC_STAGES, SC_WK, SC_A_AFTER, SC_RX>;

void RunM(Lab& lab, int m) {
  TryLib(lab, m);
  TryCluster<MainCfg>(lab, m);  // by default the library's stage shape, 32 rows x 4
#if SC_SWEEP == 1
  TryCluster<ScCfg<256, 8, 32, 4, 1, 1, 1>>(lab, m);
#elif SC_SWEEP == 2
  // No split of the contraction (clusters of 1): a block streams its 64
  // columns over all of k, as cuBLAS's nvjet S kernel does (64 CTAs at 4096 x
  // 4096), and 8192 x 14336 fits one wave at two blocks per SM (224 blocks).
  TryCluster<ScCfg<64, 1, 128, 4, 4, 1, 1>>(lab, m);
  TryCluster<ScCfg<64, 1, 128, 5, 4, 1, 1>>(lab, m);
  TryCluster<ScCfg<64, 1, 128, 8, 4, 1, 1>>(lab, m);
  TryCluster<ScCfg<64, 1, 64, 8, 4, 1, 1>>(lab, m);
  TryCluster<ScCfg<64, 1, 64, 12, 4, 1, 1>>(lab, m);
#endif
}

}  // namespace

int main(int argc, char** argv) {
  Lab lab;
  lab.filter = argc > 1 && argv[1][0] != '\0' ? argv[1] : nullptr;
  if (argc > 2) lab.k = std::atoi(argv[2]);
  if (argc > 3) lab.n = std::atoi(argv[3]);
  if (lab.k < 1 || lab.n < 1) {
    std::fprintf(stderr, "usage: %s [filter] [k] [n]\n", argv[0]);
    return 2;
  }
  int l2 = 0;
  CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  CHECK(cudaDeviceGetAttribute(&lab.sms, cudaDevAttrMultiProcessorCount, 0));
  lab.b_elems = int64_t{lab.k} * lab.n;
  lab.b_stride = (lab.b_elems + 127) / 128 * 128;  // 256-byte aligned copies
  const int64_t b_bytes = lab.b_elems * 2;
  lab.copies = std::max<int64_t>(2, (4 * int64_t{l2} + b_bytes - 1) / b_bytes);
  auto copies_from = [&](const char* var) {
    const char* v = std::getenv(var);
    if (!v) v = std::getenv("SC_AC_COPIES");
    return v ? std::max<int64_t>(1, std::atoll(v)) : lab.copies;
  };
  lab.a_copies = copies_from("SC_A_COPIES");
  lab.c_copies = copies_from("SC_C_COPIES");
  CHECK(cudaMalloc(&lab.a, static_cast<size_t>(lab.a_copies) * 16 * lab.k * sizeof(bf16)));
  CHECK(cudaMalloc(&lab.b, static_cast<size_t>(lab.copies * lab.b_stride) * sizeof(bf16)));
  CHECK(cudaMalloc(&lab.c, static_cast<size_t>(lab.c_copies) * 16 * lab.n * sizeof(bf16)));
  CHECK(cudaMalloc(&lab.ref, size_t{16} * lab.n * sizeof(float)));
  CHECK(cudaMalloc(&lab.worst, sizeof(unsigned)));
  CHECK(cudaMalloc(&lab.sink, static_cast<size_t>(lab.sms) * 8 * sizeof(uint32_t)));
  CHECK(cudaMalloc(&lab.ws, lab.ws_bytes));
  CHECK(cudaStreamCreate(&lab.stream));
  CHECK(cudaMalloc(&lab.trace, size_t{4096} * kTraceWords * sizeof(uint64_t)));
  lab.tracing = std::getenv("SC_TRACE") && std::getenv("SC_TRACE")[0] == '1';
  lab::FillKernel<<<1024, 256>>>(lab.a, int64_t{16} * lab.k, 1234u);
  lab::FillKernel<<<4096, 256>>>(lab.b, lab.b_elems, 99u);
  lab.rotate_a = std::getenv("SC_A_ROTATE") && std::getenv("SC_A_ROTATE")[0] == '1';
  lab.rotate_c = std::getenv("SC_C_ROTATE") && std::getenv("SC_C_ROTATE")[0] == '1';
  lab.child_graphs = std::getenv("SC_CHILD") && std::getenv("SC_CHILD")[0] == '1';
  for (int64_t i = 1; i < lab.a_copies; ++i) {
    CHECK(cudaMemcpy(lab.a + i * 16 * lab.k, lab.a, size_t{16} * lab.k * sizeof(bf16),
                     cudaMemcpyDeviceToDevice));
  }
  for (int64_t i = 1; i < lab.copies; ++i) {
    CHECK(cudaMemcpy(lab.b + i * lab.b_stride, lab.b, b_bytes, cudaMemcpyDeviceToDevice));
  }
  const int64_t outs = int64_t{16} * lab.n;
  ReferenceKernel<<<static_cast<unsigned>((outs + 255) / 256), 256>>>(lab.a, lab.b, lab.ref, 16,
                                                                      lab.k, lab.n);
  CHECK(cudaDeviceSynchronize());
  std::printf("# %d SMs, L2 %d MB, B %.1f MB x %lld copies; %% of %.0f GB/s\n", lab.sms, l2 >> 20,
              b_bytes * 1e-6, static_cast<long long>(lab.copies), kPeakGbs);
  std::printf("# %-28s %3s %6s %6s %11s %12s %8s  %s\n", "name", "m", "k", "n", "time", "bandwidth",
              "of peak", "err");
  {  // how many clusters of each size fit at once, at one and at two blocks per SM
    const void* kernel = reinterpret_cast<const void*>(ScClusterKernel<MainCfg>);
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 150 << 10));
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    for (int smem : {150 << 10, 100 << 10}) {
      std::printf("# max active clusters, %d KiB smem:", smem >> 10);
      for (int cs : {1, 2, 3, 4, 5, 6, 7, 8, 16}) {
        cudaLaunchConfig_t cfg{};
        cudaLaunchAttribute attr{};
        attr.id = cudaLaunchAttributeClusterDimension;
        attr.val.clusterDim.x = cs;
        attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
        cfg.gridDim = dim3(cs * 16, 1, 1);
        cfg.blockDim = dim3(MainCfg::kThreads, 1, 1);
        cfg.dynamicSmemBytes = smem;
        cfg.attrs = &attr;
        cfg.numAttrs = 1;
        int clusters = 0;
        if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess) clusters = -1;
        cudaGetLastError();
        std::printf(" %d:%d", cs, clusters);
      }
      std::printf("\n");
    }
  }
  TryRead(lab);
#if SC_SWEEP == 3
  RunProbes(lab);
#endif
  for (int m : {1, 2, 4, 8, 16}) RunM(lab, m);
  return 0;
}

// Shapes and sizes of the fused Lloyd step (kernels/kmeans.cuh), in plain
// C++ so that the launcher, the FFI handlers and Python (through
// _tsm2_ext.kmeans_plan) agree on which problems the kernel takes, how it
// splits them, how much shared memory it uses and how large its workspace is.
//
// A row of X is `nvd` vectors of 4 elements (2 for f64): 16 bytes, or 8 for
// bf16/f16 so that a vector of accumulators is always 16 bytes (half types
// with 16-byte vectors would double the on-chip sums per lane and leave
// k > 16 without a plan). A kernel variant is (element type, kp,
// class): kp is k rounded up to a power of two >= 4, the class c covers rows
// of up to 32 << c vectors. The variant's plan splits those vectors among
// `cluster` blocks of a thread-block cluster (each keeps its slice of the
// centroids and sums on chip), `warps_per_row` warps of a block and `j`
// vectors per lane; the block's 8 warps form 8 / warps_per_row row groups.
// Everything follows from (itemsize, kp, class), so one variant launches with
// one shared-memory size whatever its run-time d.
#pragma once

#include <cstdint>

#include "ffi/common/elem_type.h"

namespace tsm2 {

constexpr int kKmeansThreads = 256;
constexpr int kKmeansWarps = kKmeansThreads / 32;
constexpr int kKmeansMaxK = 32;
constexpr int kKmeansMaxD = 4096;
constexpr int kKmeansMaxClass = 6;  // 2048 vectors: f64 at d = 4096
// Portable cluster sizes (8 at most) only.
constexpr int kKmeansMaxCluster = 8;
// The workspace holds one partial (sums, counts, inertia) per block (per
// cluster for clustered variants); Python sizes it for this many blocks per
// SM and the launcher never uses more.
constexpr int kKmeansMaxBlocksPerSm = 3;          // the narrow tensor-core step runs three
constexpr int64_t kKmeansSmemLimit = 227 * 1024;  // opt-in shared memory per block, sm_80/90

constexpr int64_t KmeansRoundUp(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

// k rounded up to 4, 8, 16 or 32 (0 when k is out of range).
constexpr int KmeansKPad(int64_t k) {
  if (k < 1 || k > kKmeansMaxK) return 0;
  int kp = 4;
  while (kp < k) kp *= 2;
  return kp;
}

// Elements per vector, and vectors in a row of d elements.
constexpr int KmeansVecElems(int itemsize) { return itemsize == 8 ? 2 : 4; }
constexpr int64_t KmeansRowVecs(int itemsize, int64_t d) {
  return (d + KmeansVecElems(itemsize) - 1) / KmeansVecElems(itemsize);
}

// Smallest class c with 32 << c >= the row's vectors (-1 when d is out of range).
constexpr int KmeansClass(int itemsize, int64_t d) {
  if (d < 1 || d > kKmeansMaxD) return -1;
  const int64_t nvd = KmeansRowVecs(itemsize, d);
  for (int c = 0; c <= kKmeansMaxClass; ++c) {
    if ((int64_t{32} << c) >= nvd) return c;
  }
  return -1;
}

struct KmeansPlan {
  bool ok = false;
  int kp = 0, cls = 0;
  int cluster = 0;     // blocks sharing a row (each a slice of its vectors)
  int nwc = 0;         // warps sharing a row inside a block
  int j = 0;           // vectors of a row per lane
  int groups = 0;      // row groups per block (kKmeansWarps / nwc)
  int rows = 0;        // rows per warp per tile (register blocking)
  int lanes = 0;       // lanes per row in a block (32 * nwc)
  int slots = 0;       // 16-byte slots of one copy of the centroids (or sums): kp * j * lanes
  int tile_rows = 0;   // rows per scheduling unit: one warp's (local) or one cluster's
  bool local = false;  // one warp per row: no exchange of partial dots
  int off_sums = 0, off_csq = 0, off_redw = 0, off_redb = 0, off_lab = 0, off_cnt = 0,
      off_inert = 0;
  int smem_bytes = 0;
};

// Rows per warp per tile: partial dots (rows x kp accumulators) within 64
// registers and the row values (rows x j vectors) within 8 vectors, at
// most 4 rows. 4 rows make the centroid loads from shared memory 1/4 of the
// FMAs' operands; more would spill or cut the warps per SM.
constexpr int KmeansRowsPerWarp(int acc_size, int kp, int j) {
  int r = 64 / (kp * acc_size / 4);
  if (r > 8 / j) r = 8 / j;
  if (r > 4) r = 4;
  return r < 1 ? 1 : r;
}

// `checked`: the row-checked step (kmeans_row_check.cuh) exchanges one more
// value per row (x . s) between warps and blocks.
constexpr KmeansPlan KmeansPlanLayout(int itemsize, int kp, int cls, int cluster, int nwc, int j,
                                      bool checked = false) {
  KmeansPlan p;
  const int red = kp + 1 + (checked ? 1 : 0);  // values a row exchanges
  const int acc_size = AccSize(itemsize);
  p.kp = kp;
  p.cls = cls;
  p.cluster = cluster;
  p.nwc = nwc;
  p.j = j;
  p.groups = kKmeansWarps / nwc;
  p.rows = KmeansRowsPerWarp(acc_size, kp, j);
  p.lanes = 32 * nwc;
  p.local = cluster == 1 && nwc == 1;
  p.tile_rows = p.local ? p.rows : p.groups * p.rows;
  p.slots = kp * j * p.lanes;
  const int64_t copy = int64_t{16} * p.slots;
  const int64_t rb = static_cast<int64_t>(p.groups) * p.rows;  // rows per block tile
  int64_t off = copy;                                          // centroids first
  p.off_sums = static_cast<int>(off);
  off += p.groups * copy;
  p.off_csq = static_cast<int>(off);
  off += KmeansRoundUp(int64_t{kp} * acc_size, 16);
  p.off_redw = static_cast<int>(off);
  if (!p.local) off += KmeansRoundUp(rb * nwc * red * acc_size, 16);
  p.off_redb = static_cast<int>(off);
  if (!p.local) off += KmeansRoundUp(2 * rb * red * acc_size, 16);
  p.off_lab = static_cast<int>(off);
  if (!p.local) off += KmeansRoundUp(rb * 4, 16);
  p.off_cnt = static_cast<int>(off);
  off += KmeansRoundUp(int64_t{p.groups} * kp * acc_size, 16);
  p.off_inert = static_cast<int>(off);
  off += KmeansRoundUp(int64_t{kKmeansWarps} * acc_size, 16);
  p.smem_bytes = static_cast<int>(off);
  p.ok = off <= kKmeansSmemLimit;
  return p;
}

// The variant's plan: the smallest cluster that fits in shared memory, and in
// it two vectors per lane before one (fewer warps share a row, so fewer
// partial dots are exchanged). One warp per row (local) where that fits.
constexpr KmeansPlan KmeansChoosePlan(int itemsize, int kp, int cls, bool checked = false) {
  if (kp < 4 || kp > kKmeansMaxK || cls < 0 || cls > kKmeansMaxClass) return KmeansPlan{};
  for (int cluster = 1; cluster <= kKmeansMaxCluster; cluster *= 2) {
    const int per = (32 << cls) / 32 / cluster;  // nwc * j
    if (per < 1) break;
    for (int j = 2; j >= 1; --j) {
      if (per % j != 0) continue;
      const int nwc = per / j;
      if (nwc > kKmeansWarps) continue;
      const KmeansPlan p = KmeansPlanLayout(itemsize, kp, cls, cluster, nwc, j, checked);
      if (p.ok) return p;
    }
  }
  return KmeansPlan{};
}

// Whether the fused kernel takes (d, k) for this element size (2, 4 or 8).
constexpr bool KmeansSupported(int itemsize, int64_t d, int64_t k) {
  if (itemsize != 2 && itemsize != 4 && itemsize != 8) return false;
  const int kp = KmeansKPad(k), cls = KmeansClass(itemsize, d);
  return kp != 0 && cls >= 0 && KmeansChoosePlan(itemsize, kp, cls).ok;
}

constexpr KmeansPlan KmeansPlanOf(int itemsize, int64_t d, int64_t k) {
  return KmeansSupported(itemsize, d, k)
             ? KmeansChoosePlan(itemsize, KmeansKPad(k), KmeansClass(itemsize, d))
             : KmeansPlan{};
}

// Accumulators in one partial: sums (k x d), counts (k), inertia.
constexpr int64_t KmeansPartialElems(int64_t d, int64_t k) { return k * d + k + 1; }

// Scheduling units (tiles) of n rows.
constexpr int64_t KmeansTiles(const KmeansPlan& p, int64_t n) {
  return p.ok ? (n + p.tile_rows - 1) / p.tile_rows : 0;
}

// Most partials (blocks of a local variant, clusters otherwise) a launch on a
// GPU with sm_count SMs writes: enough for every warp (local) or cluster to
// own a tile, at most kKmeansMaxBlocksPerSm blocks per SM.
constexpr int64_t KmeansMaxOwners(const KmeansPlan& p, int64_t n, int sm_count) {
  if (!p.ok) return 0;
  const int64_t tiles = KmeansTiles(p, n);
  const int64_t wanted = p.local ? (tiles + kKmeansWarps - 1) / kKmeansWarps : tiles;
  const int64_t cap = int64_t{kKmeansMaxBlocksPerSm} * sm_count / p.cluster;
  return wanted < cap ? wanted : cap;
}

// The f32 tensor-core step (kernels/kmeans_mma.cuh) takes rows of 4..256
// elements in whole 16-byte chunks (the launcher also needs X 16-byte
// aligned), 64 rows per tile and one block per SM (kOneTileRows rows and two
// blocks per SM for k <= 16, three for rows of up to 64 elements): it never
// needs more partials than KmeansMaxOwners allows. It pads k to 16
// centroids, so past d = 64 the CUDA-core step is faster below 9 (H100, n = 1e6:
// d = 256, k = 8: 431 against 487 us; d = 64, k = 4: 204 against 276 us).
// With 64-row tiles it was also slower above 8 (d = 256, k = 16: 576 against
// 496 us; d = 128, k = 16: 433 against 353 us); 32-row tiles for k <= 16
// took it to 448 and 307 us.
constexpr int kKmeansMmaRows = 64;

// The f32 tensor-core step for wide rows (kernels/kmeans_wide.cuh): each
// block of a cluster owns kKmeansWideCols columns (its centroid values sit in
// registers), so d in (256, 4096] takes clusters of 1 to 8; k <= 16 (one
// centroid tile). Past the mma step's 256 it beats the CUDA-core step at
// every d measured (H100, k = 16: n = 1e6, d = 260 670 against 1,147 us, d =
// 512 747 against 1,163; n = 5e5, d = 768 674 against 1,148; n = 2.5e5, d =
// 1024 387 against 622, d = 4096 1,455 against 3,571). One block per SM and
// one partial per cluster of ceil(d / 512) blocks: at most sms partials,
// within what KmeansMaxOwners gives the CUDA-core plan of the same d (2 sms /
// its cluster, which is 1 through d = 1024); PlanOwners caps them at what the
// workspace holds anyway.
constexpr int kKmeansWideCols = 512;
constexpr int kKmeansWideMaxCluster = kKmeansMaxD / kKmeansWideCols;
constexpr int KmeansWideCluster(int64_t d) {
  return static_cast<int>((d + kKmeansWideCols - 1) / kKmeansWideCols);
}

// The step's tuning: production instantiates it as it is, the lab
// (benchmarks/lab/kmeans_lab.cu) variants derived from it.
struct KmeansTuning {
  // Rows per tile of the tensor-core step for k <= 16 (one centroid tile):
  // rows of 129..256 elements, and of up to 128 (kmeans_mma.cuh says why).
  static constexpr int kOneTileRows = 32;
  static constexpr int kOneTileRowsShort = 64;
  // Whether plans use the wide-row step, and from which d (260: the first d
  // in whole 16-byte chunks past KmeansMmaTakes).
  static constexpr bool kWide = true;
  static constexpr int kWideMinD = 260;
  // Whether rows of up to 64 elements take the tensor-core step in a row
  // class of their own (DC = 64: every warp on the sums, three blocks per
  // SM) at any k, rather than the CUDA-core step below d = 64 or k = 9 and
  // the 128 class at d = 64. H200, n = 1e6 (us, CUDA-core or 128 class ->
  // narrow class): d = 16 and 32, k = 16: 447 -> 169 and 173; d = 48, k = 12:
  // 446 -> 201; d = 64, k = 8: 255 -> 207; d = 64, k = 16: 225 -> 208; d = 64,
  // k = 4: 205 -> 206. Past d = 64 the CUDA-core step stays faster below
  // k = 9 (d = 128, k = 8: 253 against 285 us).
  static constexpr bool kNarrow = true;
};

template <typename Tune = KmeansTuning>
constexpr bool KmeansMmaTakes(int itemsize, int64_t d, int64_t k) {
  if (itemsize != 4 || d % 4 != 0 || d > 256 || k < 1 || k > kKmeansMaxK) return false;
  if (Tune::kNarrow && d <= 64) return d >= 4;
  return d >= 64 && k >= 9;
}

template <typename Tune = KmeansTuning>
constexpr bool KmeansWideTakes(int itemsize, int64_t d, int64_t k) {
  return Tune::kWide && itemsize == 4 && d >= Tune::kWideMinD && d <= kKmeansMaxD && d % 4 == 0 &&
         k >= 9 && k <= 16;
}

// Which kernel runs a supported step: the wide-row tensor-core step, the
// tensor-core step, or the CUDA-core step (the first two for f32 with X
// 16-byte aligned, which XLA's buffers are).
enum class KmeansStep { kCudaCores, kTensorCores, kTensorCoresCluster };

// What the GPU must have: thread-block clusters (the wide-row step, and
// CUDA-core plans of more than one block per row) need compute capability
// 9.0, and the tensor-core steps are sized for the 227 KB of shared memory per
// block of the data-centre GPUs from sm_90 on. `cc` is the GPU's compute
// capability as 10 * major + minor, `smem_optin` its opt-in shared memory per
// block. Elsewhere the CUDA-core step runs where its plan fits, and XLA's
// formulation otherwise (KmeansRunsOn).
constexpr int kKmeansClusterCc = 90;
constexpr int64_t kKmeansMmaSmemOptin = kKmeansSmemLimit;

template <typename Tune = KmeansTuning>
constexpr KmeansStep KmeansStepFor(int itemsize, int64_t d, int64_t k, int cc, int smem_optin,
                                   bool x_aligned = true) {
  if (x_aligned && smem_optin >= kKmeansMmaSmemOptin) {
    if (cc >= kKmeansClusterCc && KmeansWideTakes<Tune>(itemsize, d, k)) {
      return KmeansStep::kTensorCoresCluster;
    }
    if (KmeansMmaTakes<Tune>(itemsize, d, k)) return KmeansStep::kTensorCores;
  }
  return KmeansStep::kCudaCores;
}

// Whether a GPU (cc, smem_optin) runs the fused step for (d, k): the kernel
// takes the shape, and the CUDA-core plan (the step any X alignment falls
// back to) fits the GPU's shared memory and needs no cluster or has one.
constexpr bool KmeansRunsOn(int itemsize, int64_t d, int64_t k, int cc, int smem_optin) {
  if (!KmeansSupported(itemsize, d, k)) return false;
  const KmeansPlan p = KmeansPlanOf(itemsize, d, k);
  return p.smem_bytes <= smem_optin && (cc >= kKmeansClusterCc || p.cluster == 1);
}

constexpr const char* KmeansStepName(KmeansStep s) {
  switch (s) {
    case KmeansStep::kCudaCores:
      return "cuda_cores";
    case KmeansStep::kTensorCores:
      return "tensor_cores";
    case KmeansStep::kTensorCoresCluster:
      return "tensor_cores_cluster";
  }
  return "?";
}

// Bytes of the workspace result for a GPU with sm_count SMs (0 if n == 0).
constexpr int64_t KmeansWorkspaceBytes(int itemsize, int64_t n, int64_t d, int64_t k,
                                       int sm_count) {
  const KmeansPlan p = KmeansPlanOf(itemsize, d, k);
  return KmeansMaxOwners(p, n, sm_count) * KmeansPartialElems(d, k) * AccSize(itemsize);
}

// The update's workspace (launcher.h, DeviceKmeansUpdate): per empty
// cluster, by rank, the weight (accumulator type), index and label of the
// point it takes.
constexpr int64_t KmeansUpdateWorkspaceBytes(int64_t k) { return k * 16; }

}  // namespace tsm2

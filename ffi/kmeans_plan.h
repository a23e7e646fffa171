// Shapes and sizes of the fused Lloyd step (kernels/kmeans.cuh), in plain
// C++ so that the launcher, the FFI handlers and Python (through
// _tsm2_ext.kmeans_plan) agree on which problems the kernel takes, how much
// shared memory it uses and how large its workspace is.
//
// A kernel variant is (element type, kp, dc): kp is k rounded up to a power of
// two >= 4 (register blocks of 4 centroids), dc is d rounded up to a power of
// two >= 128 (the update keeps k x dc sums in registers, dc / 4 columns per
// cluster set). Everything else (rows per tile, shared-memory layout) follows
// from these, for d = dc, so one variant launches with one shared-memory size.
#pragma once

#include <cstdint>

namespace tsm2 {

constexpr int kKmeansThreads = 256;
constexpr int kKmeansMaxK = 32;
constexpr int kKmeansMaxD = 1024;
constexpr int kKmeansStages = 2;
// The workspace holds one partial (sums, counts, inertia) per block; Python
// sizes it for this many blocks per SM and the launcher never uses more.
constexpr int kKmeansMaxBlocksPerSm = 2;
// Sums per thread the update may keep in 32-bit registers. At 128 (f32 with
// k = 32, d = 1024) ptxas -v for sm_90 reports 254 registers and no spills;
// more would spill.
constexpr int kKmeansMaxSumRegs = 128;
constexpr int64_t kKmeansSmemLimit = 227 * 1024;  // opt-in shared memory per block, sm_80/90
// The distance phase splits d among at most this many thread groups, and
// their partials (groups x rows x centroids) take at most kKmeansRedBudget
// bytes of shared memory.
constexpr int kKmeansMaxGroups = 32;
constexpr int kKmeansRedBudget = 24 * 1024;

constexpr int64_t KmeansRoundUp(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

// k rounded up to 4, 8, 16 or 32 (0 when k is out of range).
constexpr int KmeansKPad(int64_t k) {
  if (k < 1 || k > kKmeansMaxK) return 0;
  int kp = 4;
  while (kp < k) kp *= 2;
  return kp;
}

// d rounded up to 128, 256, 512 or 1024 (0 when d is out of range).
constexpr int KmeansDClass(int64_t d) {
  if (d < 1 || d > kKmeansMaxD) return 0;
  int dc = 128;
  while (dc < d) dc *= 2;
  return dc;
}

// Rows per tile: about 32 KiB of X per tile, 8 to 64 rows (multiples of 4:
// each thread holds 4 rows x 4 centroids of dot products).
constexpr int KmeansRows(int itemsize, int dc) {
  const int64_t r = 32768 / (static_cast<int64_t>(dc) * itemsize);
  return r < 8 ? 8 : (r > 64 ? 64 : static_cast<int>(r));
}

// Row stride of the distance-partial buffer, in accumulators: = 4 (mod 8), so
// that a warp writing 8 rows x 4 centroids hits 32 distinct banks.
constexpr int KmeansRedStride(int kp) { return static_cast<int>(kp + (12 - kp % 8) % 8); }

// Thread groups sharing the d axis in the distance phase: every thread holds a
// 4 x 4 block when the buffer allows, so few rows or centroids mean many groups.
constexpr int KmeansGroups(int rows, int kp, int acc_size) {
  const int combos = (rows / 4) * (kp / 4);
  int g = kKmeansThreads / combos;
  if (g > kKmeansMaxGroups) g = kKmeansMaxGroups;
  while (g > 1 && g * rows * KmeansRedStride(kp) * acc_size > kKmeansRedBudget) g /= 2;
  return g < 1 ? 1 : g;
}

// Sums one thread keeps in 32-bit registers during the update: dc / 4 column
// groups of 4 share the 256 threads, the cluster sets split the kp clusters.
constexpr int KmeansSumRegs(int kp, int dc, int acc_size) {
  const int sets = kKmeansThreads / (dc / 4);
  const int cpw = kp / sets > 0 ? kp / sets : 1;
  return cpw * 4 * acc_size / 4;
}

// Shared-memory layout for one variant at run-time d (byte offsets).
struct KmeansLayout {
  int rows = 0, kp = 0, dc = 0, groups = 0, red_stride = 0;
  int row_elems = 0;        // elements per staged row: d rounded up to 4 and to a 16-byte vector
  int stage_row_bytes = 0;  // padded to an odd number of 16-byte units (conflict-free reads)
  int stage_bytes = 0;      // rows x stage_row_bytes, then the rows' weights
  int c_row_bytes = 0;      // centroids as accumulators, padded likewise
  int off_c = 0, off_red = 0, off_csq = 0, off_xsq = 0, off_lab = 0;
  int smem_bytes = 0;
};

constexpr int KmeansOddUnits(int64_t bytes) {
  const int64_t b = KmeansRoundUp(bytes, 16);
  return static_cast<int>((b / 16) % 2 ? b : b + 16);
}

constexpr KmeansLayout KmeansLayoutFor(int itemsize, int acc_size, int kp, int dc, int64_t d) {
  KmeansLayout l;
  l.kp = kp;
  l.dc = dc;
  l.rows = KmeansRows(itemsize, dc);
  l.groups = KmeansGroups(l.rows, kp, acc_size);
  l.red_stride = KmeansRedStride(kp);
  const int vec = 16 / itemsize;
  l.row_elems = static_cast<int>(KmeansRoundUp(d, vec > 4 ? vec : 4));
  l.stage_row_bytes = KmeansOddUnits(static_cast<int64_t>(l.row_elems) * itemsize);
  l.stage_bytes = static_cast<int>(
      KmeansRoundUp(static_cast<int64_t>(l.rows) * l.stage_row_bytes + l.rows * acc_size, 16));
  l.c_row_bytes = KmeansOddUnits(static_cast<int64_t>(l.row_elems) * acc_size);
  l.off_c = kKmeansStages * l.stage_bytes;
  l.off_red = l.off_c + kp * l.c_row_bytes;
  l.off_csq =
      l.off_red + static_cast<int>(KmeansRoundUp(
                      static_cast<int64_t>(l.groups) * l.rows * l.red_stride * acc_size, 16));
  l.off_xsq = l.off_csq + static_cast<int>(KmeansRoundUp(static_cast<int64_t>(kp) * acc_size, 16));
  l.off_lab =
      l.off_xsq + static_cast<int>(KmeansRoundUp(static_cast<int64_t>(l.rows) * acc_size, 16));
  l.smem_bytes = l.off_lab + static_cast<int>(KmeansRoundUp(static_cast<int64_t>(l.rows) * 4, 16));
  return l;
}

// The variant's launch layout: shared memory sized for d = dc.
constexpr KmeansLayout KmeansVariantLayout(int itemsize, int kp, int dc) {
  return KmeansLayoutFor(itemsize, itemsize == 8 ? 8 : 4, kp, dc, dc);
}

// Whether a variant exists: it fits in shared memory and its sums in registers.
constexpr bool KmeansVariantFits(int itemsize, int kp, int dc) {
  const int acc_size = itemsize == 8 ? 8 : 4;
  return KmeansVariantLayout(itemsize, kp, dc).smem_bytes <= kKmeansSmemLimit &&
         KmeansSumRegs(kp, dc, acc_size) <= kKmeansMaxSumRegs;
}

// Whether the fused kernel takes (d, k) for this element size (2, 4 or 8).
constexpr bool KmeansSupported(int itemsize, int64_t d, int64_t k) {
  if (itemsize != 2 && itemsize != 4 && itemsize != 8) return false;
  const int kp = KmeansKPad(k), dc = KmeansDClass(d);
  return kp != 0 && dc != 0 && KmeansVariantFits(itemsize, kp, dc);
}

// Accumulators in one block's partial: sums (k x d), counts (k), inertia.
constexpr int64_t KmeansPartialElems(int64_t d, int64_t k) { return k * d + k + 1; }

// Row tiles of n rows for this variant.
constexpr int64_t KmeansTiles(int itemsize, int64_t n, int64_t d) {
  const int dc = KmeansDClass(d);
  if (dc == 0) return 0;
  const int rows = KmeansRows(itemsize, dc);
  return (n + rows - 1) / rows;
}

// Bytes of the workspace result for a GPU with sm_count SMs (0 if n == 0).
constexpr int64_t KmeansWorkspaceBytes(int itemsize, int64_t n, int64_t d, int64_t k,
                                       int sm_count) {
  const int64_t tiles = KmeansTiles(itemsize, n, d);
  const int64_t cap = static_cast<int64_t>(kKmeansMaxBlocksPerSm) * sm_count;
  const int64_t blocks = tiles < cap ? tiles : cap;
  return blocks * KmeansPartialElems(d, k) * (itemsize == 8 ? 8 : 4);
}

}  // namespace tsm2

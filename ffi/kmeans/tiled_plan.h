// Plans of the k-means step for any k: the tiled assignment
// (kernels/kmeans_assign.cuh, FFI target tsm2_kmeans_assign) and the
// centroid sums by buckets of clusters (kernels/kmeans_sums.cuh, FFI target
// tsm2_kmeans_sums). Plain C++, so that the CUDA launchers, the CPU
// reference targets (which follow the sums plan to the order of every
// addition) and Python (through _tsm2_ext.kmeans_tiled_plan) agree on the
// tiles, the buckets and the workspace sizes.
//
// The assignment is a product X C^T on tensor cores in tiles of 128 rows x
// 128 centroids whose distances never leave the registers: each row keeps
// its closest centroid over the centroid tiles. A step of the pipeline
// brings 128 bytes of every row of one X tile and one C tile into shared
// memory (a "sub-tile"); the X tile stays there for all centroid tiles when
// its sub-tiles fit ("resident"), else it is re-read with each ("stream").
//
// The sums take one of two paths. Where one block's shared memory holds
// the sums of all k clusters (one "bucket"), block (chunk) scans its chunk's
// labels, gathers the rows and adds them in row order, and a second pass adds
// the chunks' partials in order (kernels/kmeans_sums.cuh): X and the labels
// are read once. Elsewhere the rows are sorted by label (a stable LSD radix
// sort, 8 bits a pass) and each cluster's rows are added in sorted order over
// "pieces" of `piece` consecutive sorted positions, whose partials a fixed
// tree of merges adds in piece order (kernels/kmeans_sums_sorted.cuh): X is
// still read once, the labels a few times, and a block never scans rows it
// does not add. No floating-point atomics on either path: results are
// bitwise reproducible on any GPU, and the CPU reference reproduces them bit
// for bit.
#pragma once

#include <cstdint>

#include "ffi/common/elem_type.h"
#include "ffi/common/plan_math.h"

namespace tsm2 {

// ---------------------------------------------------------------- assignment

// How distances are multiplied for f32 data: split products with f32
// accuracy (3xTF32, the default), or one TF32 product (inputs rounded to 10
// mantissa bits: a dot's error grows to ~2^-10 sum |x_i c_i|). bf16, f16
// products are exact on tensor cores whatever the precision.
enum class KmeansPrecision : int32_t { kFloat32 = 0, kTensorFloat32 = 1 };

// The shared memory per block plans assume where there is no GPU to ask: an
// H100's or H200's opt-in (227 KB).
constexpr int64_t kKmeansDefaultSmemOptin = 227 * 1024;

constexpr int kAssignThreads = 256;
constexpr int kAssignRows = 128;       // BM: rows of X per tile
constexpr int kAssignCents = 128;      // BN: centroids per tile
constexpr int kAssignStepBytes = 128;  // bytes of a row a pipeline step brings
constexpr int kAssignRowStride = 144;  // their bytes in shared memory (16 padding)
constexpr int kAssignSubTile = kAssignRows * kAssignRowStride;  // 18,432 (BM == BN)
constexpr int kAssignScratch = 2 * kAssignRows * 8;  // the two column warps' (key, index)
constexpr int kAssignMaxStages = 6;
// Items (a row tile, or a row tile's share of the centroid tiles) per SM the
// plan aims for; where the row tiles are fewer, the centroid tiles are split.
constexpr int kAssignTargetPerSm = 2;
// Rows of the fix-up's list of rows with a non-finite ||x||^2.
constexpr int64_t kAssignFlagsBytes = 16;

constexpr int KmeansAssignElems(int itemsize) { return kAssignStepBytes / itemsize; }

struct KmeansAssignPlan {
  bool ok = false;
  int itemsize = 0;
  int64_t n = 0, d = 0, k = 0;
  int bk = 0;              // elements of a row per step
  int64_t qd = 0;          // steps per centroid tile: ceil(d / bk)
  int64_t ctiles = 0;      // centroid tiles: ceil(k / 128)
  int64_t row_tiles = 0;   // ceil(n / 128)
  int64_t splits = 0;      // items per row tile (each a share of the centroid tiles)
  int64_t items = 0;       // row_tiles * splits
  bool resident = false;   // X sub-tiles kept for all centroid tiles of an item
  int stages = 0;          // pipeline depth
  int res_slots = 0;       // resident copies of an X tile (R): the next item's load
                           // must not overwrite one still read
  int64_t smem_bytes = 0;  // dynamic shared memory of a block
  // Workspace: ||c||^2 [k] (accumulator type), flags, then with splits > 1
  // each split's (distance, label) per row.
  int64_t off_csq = 0, off_flags = 0, off_split = 0, workspace_bytes = 0;
};

// Centroid tiles [j0, j1) of split s of an item.
constexpr int64_t KmeansSplitBegin(int64_t ctiles, int64_t splits, int64_t s) {
  return s * ctiles / splits;
}

// The smallest shared-memory footprint of a resident plan with `stages`
// stages: R copies of the X tile, R = ceil(stages / qd), so that the load of
// a later item's sub-tile q, issued stages - 1 steps ahead, lands on a copy
// whose last read lies at least `stages` steps back (kernels/kmeans_assign.cuh).
constexpr int64_t KmeansResidentBytes(int stages, int64_t qd) {
  const int64_t r = CeilDiv(stages, qd);
  return int64_t{stages} * kAssignSubTile + r * qd * kAssignSubTile + kAssignScratch;
}
constexpr int64_t KmeansStreamBytes(int stages) {
  return int64_t{stages} * 2 * kAssignSubTile + kAssignScratch;
}

// The plan for x [n, d] against c [k, d] of `itemsize` bytes on a GPU with
// `sms` SMs and `smem_optin` bytes of shared memory per block. The splits
// depend on (n, k, sms) only and size the workspace (at most max_splits: a
// launcher whose workspace was sized for fewer SMs takes fewer); shared
// memory picks the mode and the stages.
constexpr KmeansAssignPlan KmeansAssignPlanOf(int itemsize, int64_t n, int64_t d, int64_t k,
                                              int sms, int64_t smem_optin,
                                              int64_t max_splits = int64_t{1} << 40) {
  KmeansAssignPlan p;
  if ((itemsize != 4 && itemsize != 2) || n < 0 || d < 1 || k < 1 || sms < 1) return p;
  p.itemsize = itemsize;
  p.n = n;
  p.d = d;
  p.k = k;
  p.bk = KmeansAssignElems(itemsize);
  p.qd = CeilDiv(d, p.bk);
  p.ctiles = CeilDiv(k, kAssignCents);
  p.row_tiles = CeilDiv(n, kAssignRows);
  const int64_t target = int64_t{kAssignTargetPerSm} * sms;
  p.splits = 1;
  if (p.row_tiles > 0 && p.row_tiles < target) {
    p.splits = CeilDiv(target, p.row_tiles);
    if (p.splits > p.ctiles) p.splits = p.ctiles;
    if (p.splits > max_splits) p.splits = max_splits < 1 ? 1 : max_splits;
  }
  p.items = p.row_tiles * p.splits;
  // Resident where an item has two centroid tiles or more (else nothing is
  // re-read) and four stages fit, or three; else stream with as many stages
  // as fit, from two.
  const bool reuse = p.ctiles / p.splits >= 2;
  for (int s = 4; reuse && s >= 3 && !p.resident; --s) {
    if (KmeansResidentBytes(s, p.qd) <= smem_optin) {
      p.resident = true;
      p.stages = s;
      p.res_slots = static_cast<int>(CeilDiv(s, p.qd));
      p.smem_bytes = KmeansResidentBytes(s, p.qd);
    }
  }
  for (int s = kAssignMaxStages; !p.resident && s >= 2; --s) {
    if (KmeansStreamBytes(s) <= smem_optin) {
      p.stages = s;
      p.smem_bytes = KmeansStreamBytes(s);
      break;
    }
  }
  if (p.stages == 0) return p;
  const int acc = AccSize(itemsize);
  p.off_csq = 0;
  p.off_flags = CeilDiv(k * acc, 16) * 16;
  p.off_split = p.off_flags + kAssignFlagsBytes;
  p.workspace_bytes = p.off_split + (p.splits > 1 ? p.splits * n * 8 : 0);
  p.ok = true;
  return p;
}

// The warpgroup variant of the assignment (sm_90a, kernels/
// kmeans_assign_wgmma.cuh): the same items, splits and steps as the plan
// above, its sub-tiles tensor-map boxes of 128 rows x 128 bytes in the
// 128-byte swizzle (no padding), filled by a producer warp into a ring of
// `stages` slots, each with the centroid tile's norms and a full and an
// empty mbarrier; X resident as above where it fits.
constexpr int kAssignWgSubTile = kAssignRows * kAssignStepBytes;  // 16,384
constexpr int kAssignWgCsqBytes = kAssignCents * 4;
constexpr int kAssignWgMaxStages = 8;
constexpr int kAssignWgConsumers = 256;                     // two warpgroups, 64 rows each
constexpr int kAssignWgThreads = kAssignWgConsumers + 128;  // and the producer's warpgroup

// f32 in the TF32 mode on the warpgroup kernel multiplies centroids rounded
// to nearest TF32 (as KmeansAssignKernel does), read from a copy that
// KmeansCsqKernel writes at the first 16-byte boundary after the plan's
// workspace, where the buffer holds it (Python sizes it so); the rows of X
// are rounded where they land in shared memory.
constexpr int64_t KmeansAssignTf32CopyBytes(int64_t k, int64_t d) {
  return CeilDiv(k * d * 4, 16) * 16 + 16;
}

// f32 in the default mode on the warpgroup kernel (kernels/
// kmeans_assign_refine.cuh): one TF32 product ranks, then exact f32 dots
// settle what rounding could have changed. After the TF32 copy of the
// centroids, [n] each: each row's second and third lowest TF32 keys less
// its lowest, its second's centroid, the rows left to rank again; then
// that list's length and the centroids' largest ||c||^2 and
// ||c - tf32(c)||^2; then, [n] of 8 bytes, each listed row's best (key,
// centroid) so far, packed so that one 64-bit minimum keeps the lower.
struct KmeansRefineLayout {
  int64_t off_gap2 = 0, off_gap3 = 0, off_runner_up = 0, off_list = 0, off_count = 0, off_norms = 0,
          off_best = 0, bytes = 0;
};

constexpr KmeansRefineLayout KmeansRefineLayoutOf(int64_t n) {
  const int64_t column = CeilDiv(n * 4, 16) * 16;
  KmeansRefineLayout l;
  l.off_gap2 = 0;
  l.off_gap3 = column;
  l.off_runner_up = 2 * column;
  l.off_list = 3 * column;
  l.off_count = 4 * column;
  l.off_norms = l.off_count + 4;
  l.off_best = l.off_count + 16;
  l.bytes = l.off_best + CeilDiv(n * 8, 16) * 16;
  return l;
}

// What the default f32 mode adds to the plan's workspace: the TF32 copy
// and the refinement's arrays.
constexpr int64_t KmeansAssignRefineBytes(int64_t n, int64_t k, int64_t d) {
  return KmeansAssignTf32CopyBytes(k, d) + KmeansRefineLayoutOf(n).bytes;
}

struct KmeansAssignWgPlan {
  bool ok = false;
  bool resident = false;
  int stages = 0, res_slots = 0;
  int64_t smem_bytes = 0;
};

// Shared memory: 1 KB to align the ring (the swizzle follows address bits),
// the slots (C, X unless resident, the norms), the resident X copies, the
// barriers.
constexpr int64_t KmeansAssignWgBytes(int stages, bool resident, int res_slots, int64_t qd) {
  const int64_t slot = kAssignWgSubTile * (resident ? 1 : 2) + kAssignWgCsqBytes;
  return 1024 + stages * slot + (resident ? res_slots * qd * kAssignWgSubTile : 0) + 16 * stages;
}

constexpr KmeansAssignWgPlan KmeansAssignWgPlanOf(const KmeansAssignPlan& base,
                                                  int64_t smem_optin) {
  KmeansAssignWgPlan p;
  if (!base.ok) return p;
  const bool reuse = base.ctiles / base.splits >= 2;
  for (int s = 6; reuse && s >= 3 && !p.resident; --s) {
    const int r = static_cast<int>(CeilDiv(s, base.qd));
    if (KmeansAssignWgBytes(s, true, r, base.qd) <= smem_optin) {
      p.resident = true;
      p.stages = s;
      p.res_slots = r;
    }
  }
  for (int s = kAssignWgMaxStages; !p.resident && s >= 2; --s) {
    if (KmeansAssignWgBytes(s, false, 0, base.qd) <= smem_optin) {
      p.stages = s;
      break;
    }
  }
  if (p.stages == 0) return p;
  p.smem_bytes = KmeansAssignWgBytes(p.stages, p.resident, p.res_slots, base.qd);
  p.ok = true;
  return p;
}

// ---------------------------------------------------------------- sums

constexpr int kSumsThreads = 256;
constexpr int kSumsLabelsPerThread = 4;
constexpr int kSumsTileRows = kSumsThreads * kSumsLabelsPerThread;  // rows per scan of labels
constexpr int kSumsMaxGroups = 32;
constexpr int kSumsPrefetch = 8;  // rows a thread has in flight
// The row list of a tile (row, local cluster), the warps' counts per round of
// labels, and the warps' inertia.
constexpr int64_t kSumsStaticSmem =
    int64_t{kSumsTileRows} * 8 + kSumsLabelsPerThread * (kSumsThreads / 32) * 4 + 64;
// Blocks per SM the chunks aim for.
constexpr int kSumsTargetPerSm = 2;

// Accumulators per 16-byte chunk of a row (4 f32, 2 f64), and chunks per row.
constexpr int KmeansSumsVec(int acc_size) { return 16 / acc_size; }
constexpr int64_t KmeansSumsChunks(int acc_size, int64_t d) {
  return CeilDiv(d, KmeansSumsVec(acc_size));
}
// Groups of threads that each add every G-th row of a tile's list into their
// own copy of the sums (one thread per 16-byte chunk of a row): enough rows
// in flight for narrow rows, one copy for rows of 256 chunks or more.
constexpr int KmeansSumsGroups(int acc_size, int64_t d) {
  const int64_t q = KmeansSumsChunks(acc_size, d);
  if (q >= kSumsThreads) return 1;
  const int64_t g = kSumsThreads / q;
  return static_cast<int>(g < kSumsMaxGroups ? g : kSumsMaxGroups);
}

// Shared memory of a block holding `bucket` clusters' sums (G copies).
constexpr int64_t KmeansSumsSmem(int acc_size, int64_t d, int64_t bucket) {
  const int64_t row = KmeansSumsChunks(acc_size, d) * 16;
  return kSumsStaticSmem + KmeansSumsGroups(acc_size, d) * bucket * (row + acc_size);
}

// ---- the sorted path (kernels/kmeans_sums_sorted.cuh)

// Digits of a pass of the radix sort, and the chunks' warps per block.
constexpr int kSortBits = 8;
constexpr int kSortDigits = 1 << kSortBits;
constexpr int kSortWarps = 8;  // chunks per block of the histogram and scatter kernels
// Rows of a chunk (one warp walks it 32 rows at a time) the plan aims for,
// and the most chunks (their histograms are 256 x chunks counters).
constexpr int64_t kSortChunkRows = 512;
constexpr int64_t kSortMaxChunks = 8192;
constexpr int kSortScanTile = 2048;  // counters a block of the scan adds
// Sorted positions a piece adds in order, and the units of one level that a
// merge of the next level adds in order (the fan-in of the merge tree).
// Constants, not device properties: the order of every addition, hence the
// bits of the sums, is the same on any GPU.
constexpr int64_t kSumsPiece = 64;
constexpr int kSumsMergeFan = 32;
constexpr int kSumsSortedThreads = 256;

// Passes of the radix sort for labels in [0, k): ceil(bits(k - 1) / 8), at least 1.
constexpr int KmeansSortPasses(int64_t k) {
  int bits = 0;
  while (bits < 62 && (int64_t{1} << bits) < k) ++bits;
  return bits <= kSortBits ? 1 : static_cast<int>(CeilDiv(bits, kSortBits));
}

// Merge levels after the pieces: level L adds kSumsMergeFan units of level
// L - 1 (units of piece * fan^(L-1) positions), until one unit holds all n rows.
constexpr int KmeansMergeLevels(int64_t n, int64_t piece) {
  int levels = 0;
  for (int64_t u = piece; u < n; u *= kSumsMergeFan) ++levels;
  return levels;
}

struct KmeansSumsPlan {
  bool ok = false;
  int64_t n = 0, d = 0, k = 0;
  int acc_size = 0;
  // Sorted path (piece > 0): pieces of `piece` sorted positions, the sort and
  // the inertia over `chunks` row ranges. Bucket path (piece == 0): below.
  int64_t piece = 0;
  int64_t bucket = 0;   // clusters per block (bucket path; k on the sorted path)
  int64_t buckets = 0;  // ceil(k / bucket)
  int64_t chunks = 0;   // row ranges; > 1 writes partials that a second pass adds in order
  int groups = 0;       // KmeansSumsGroups (bucket path)
  int64_t smem_bytes = 0;
  int64_t partial_elems = 0;  // bucket * d + bucket + 1 (bucket path: sums, counts, inertia)
  // Sorted path: passes of the sort, merge levels, the padded row of a
  // partial (row_acc accumulators) and the workspace's parts (byte offsets).
  int passes = 0, levels = 0;
  int64_t row_acc = 0;
  int64_t pieces = 0, level1_units = 0;
  int64_t hist_elems = 0, scan_tiles = 0;
  int64_t off_hist = 0, off_tiles = 0, off_count = 0, off_keys = 0, off_rows = 0, off_inertia = 0,
          off_part0 = 0, off_part1 = 0;
  int64_t workspace_bytes = 0;
};

// Rows [KmeansChunkBegin(c), KmeansChunkBegin(c + 1)) of chunk c.
constexpr int64_t KmeansChunkBegin(int64_t n, int64_t chunks, int64_t c) { return c * n / chunks; }

constexpr int64_t Align16(int64_t b) { return CeilDiv(b, 16) * 16; }

// The partials of `units` units of a level, two slots each (slot 0: the
// cluster that enters the unit from before; slot 1: the one that leaves it
// after, having begun inside): sums [units][2][row_acc], then weights
// [units][2], then the slots' clusters [units][2] (int32, -1 where empty).
constexpr int64_t KmeansPartialWeightsOffset(int64_t units, int64_t row_acc) {
  return 2 * units * row_acc;  // in accumulators
}
constexpr int64_t KmeansPartialIdsOffset(int64_t units, int64_t row_acc, int acc_size) {
  return 2 * units * (row_acc + 1) * acc_size;  // in bytes
}
constexpr int64_t KmeansPartialBytes(int64_t units, int64_t row_acc, int acc_size) {
  return Align16(KmeansPartialIdsOffset(units, row_acc, acc_size) + 2 * units * 4);
}

// The sums plan with explicit attributes (bucket, chunks, piece), or not ok
// where they are out of range. piece > 0 takes the sorted path (bucket is
// then unused and taken as k).
constexpr KmeansSumsPlan KmeansSumsPlanWith(int acc_size, int64_t n, int64_t d, int64_t k,
                                            int64_t bucket, int64_t chunks, int64_t piece = 0) {
  KmeansSumsPlan p;
  if ((acc_size != 4 && acc_size != 8) || n < 0 || d < 1 || k < 1 || bucket < 1 || chunks < 1 ||
      piece < 0) {
    return p;
  }
  p.n = n;
  p.d = d;
  p.k = k;
  p.acc_size = acc_size;
  p.chunks = chunks;
  p.piece = piece;
  if (piece > 0) {
    p.bucket = k;
    p.buckets = 1;
    p.passes = KmeansSortPasses(k);
    p.levels = KmeansMergeLevels(n, piece);
    p.row_acc = KmeansSumsChunks(acc_size, d) * KmeansSumsVec(acc_size);
    p.pieces = CeilDiv(n, piece);
    p.level1_units = CeilDiv(p.pieces, kSumsMergeFan);
    p.hist_elems = int64_t{kSortDigits} * chunks;
    p.scan_tiles = CeilDiv(p.hist_elems, kSortScanTile);
    // The sort's counters, their tiles' sums and the count of rows with a
    // label in [0, k); two buffers of (label, row) the passes alternate
    // between; the chunks' inertia; the partials of levels 0, 2, 4, ...
    // (part0) and 1, 3, ... (part1): a level reads the other's.
    p.off_hist = 0;
    p.off_tiles = Align16(p.hist_elems * 4);
    p.off_count = p.off_tiles + Align16(p.scan_tiles * 4);
    p.off_keys = p.off_count + 16;
    p.off_rows = p.off_keys + 2 * Align16(n * 4);
    p.off_inertia = p.off_rows + 2 * Align16(n * 4);
    p.off_part0 = p.off_inertia + Align16(chunks * acc_size);
    p.off_part1 = p.off_part0 + KmeansPartialBytes(p.pieces, p.row_acc, acc_size);
    p.workspace_bytes = p.off_part1 + KmeansPartialBytes(p.level1_units, p.row_acc, acc_size);
    p.ok = true;
    return p;
  }
  p.bucket = bucket < k ? bucket : k;
  p.buckets = CeilDiv(k, p.bucket);
  p.groups = KmeansSumsGroups(acc_size, d);
  p.smem_bytes = KmeansSumsSmem(acc_size, d, p.bucket);
  p.partial_elems = p.bucket * d + p.bucket + 1;
  p.workspace_bytes = chunks > 1 ? p.buckets * chunks * p.partial_elems * acc_size : 0;
  p.ok = true;
  return p;
}

// Chunks of the sorted path's sort and inertia: about kSortChunkRows rows
// each, from the rows alone (the inertia's order of addition follows them).
constexpr int64_t KmeansSortChunks(int64_t n) {
  const int64_t c = CeilDiv(n, kSortChunkRows);
  return c < 1 ? 1 : (c > kSortMaxChunks ? kSortMaxChunks : c);
}

// The sums plan for a GPU with `sms` SMs and `smem_optin` bytes of shared
// memory per block: the bucket path where one bucket holds all k clusters
// (each row's label and bytes read once, in row order), with enough chunks
// for kSumsTargetPerSm blocks per SM (each chunk at least a tile of rows);
// else the sorted path, whose pieces and chunks depend on n alone.
//
// Why keep the bucket path at all: where it applies (k d of at most ~50,000
// accumulators) it reads labels and X once with no sort, and its one launch
// and reduction beat the sorted path's dozen small launches.
constexpr KmeansSumsPlan KmeansSumsPlanOf(int acc_size, int64_t n, int64_t d, int64_t k, int sms,
                                          int64_t smem_optin) {
  if ((acc_size != 4 && acc_size != 8) || d < 1 || k < 1 || sms < 1) return KmeansSumsPlan{};
  const int64_t per = KmeansSumsSmem(acc_size, d, 1) - kSumsStaticSmem;
  const int64_t bucket = (smem_optin - kSumsStaticSmem) / per;
  if (bucket < k) {
    return KmeansSumsPlanWith(acc_size, n, d, k, k, KmeansSortChunks(n), kSumsPiece);
  }
  const int64_t target = int64_t{kSumsTargetPerSm} * sms;
  int64_t chunks = target;
  const int64_t most = CeilDiv(n, kSumsTileRows);
  if (chunks > most) chunks = most;
  if (chunks < 1) chunks = 1;
  return KmeansSumsPlanWith(acc_size, n, d, k, k, chunks);
}

}  // namespace tsm2

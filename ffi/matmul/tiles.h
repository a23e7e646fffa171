// Tile shapes of the streaming kernels, in plain C++ so that the host side
// (and Python, through _tsm2_ext.workspace_bytes and tile_config) can size
// workspaces and shared memory without CUDA.
//
// R (kernels/tsm2.cuh, any k): a tile is `rows` rows x one k-chunk per ring
//    stage; k_groups threads share each row's chunk and are reduced at the
//    tile's end. Each row's chunk is copied as the 16-byte vectors that cover
//    it, whatever the row's alignment.
// L (kernels/tsm2l.cuh, k <= kLMaxK): one thread owns whole rows, so a tile
//    is one contiguous span of A, copied as the 16-byte vectors that cover it,
//    and its output one contiguous span of C.
// The ring depth is not fixed here: the plan (launch_tiles.cuh) derives it
// from the device's bandwidth per SM and shared memory (StreamStages below);
// `stages` is the footprint's nominal depth, for the Python model.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "ffi/common/elem_type.h"

namespace tsm2 {

struct TileConfig {
  int rows;             // rows of A per tile
  int rows_per_thread;  // rows whose accumulators one thread holds (register blocking)
  int k_groups;         // threads sharing one row's k-chunk
  int vec_per_thr;      // 16-byte vectors of A per thread per row and stage (t3); L: per row
  int stages;           // nominal depth of the cp.async ring (the plan derives the real one)
};

// Threads of an R block; L blocks take 64 to 256 (kLThreadOptions).
constexpr int kTileThreads = 256;
// The deepest ring a plan may choose (the kernels' wait switch covers it).
constexpr int kMaxStages = 8;
// L takes rows of up to kLMaxK elements (512 bytes of f64).
constexpr int kLMaxK = 64;
constexpr int kLMaxRowBytes = kLMaxK * 8;

// t2: the columns of B and C a block computes. Powers of two up to 8, then
// multiples of 8: a thread computes every one of them for each of its rows,
// so t2 - n columns of FMAs are wasted, and past n of about 30 (f32) the
// FMAs, not the memory, set the pace.
inline constexpr int kNTiles[] = {1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64};
inline int NTileFor(int64_t n) {
  for (int nt : kNTiles) {
    if (nt >= n) return nt;
  }
  return 64;
}

// Rows per thread (register blocking): each B value read from shared memory
// feeds that many rows' FMAs. Four where the FMAs bind (f32 past t2 = 16,
// 2-byte types past 8) as long as the accumulators (rows x t2) stay within
// 128 registers, two where the tile streams at memory speed and 32 keep two
// blocks per SM; f64 accumulators take two registers each.
constexpr int RRowsPerThread(int itemsize, int nt) {
  if (itemsize == 8) return nt <= 4 ? 4 : nt <= 32 ? 2 : 1;
  if (itemsize == 4 && nt >= 12 && nt <= 16) return 2;
  return nt <= 32 ? 4 : 2;
}
// Blocks per SM the compiler must leave room for: two (128 registers per
// thread at 256 threads) where the accumulators take at most 32 registers,
// else one, so that wide tiles get registers instead of spilling.
constexpr int MinBlocksFor(int rpt, int nt, int acc_bytes) {
  return rpt * nt * acc_bytes <= 128 ? 2 : 1;
}
constexpr int LRowsPerThread(int itemsize, int nt) {
  return nt <= (itemsize == 8 ? 16 : 32) ? 2 : 1;
}

// Bytes of each row an R stage copies: 128 where the tile streams at memory
// speed (small stages, so that a deep ring of them fits twice per SM), 256
// where the FMAs bind (fewer stages per row, so the per-stage work of copies
// and barriers weighs less), except 2-byte types past t2 = 16, whose chunk of
// B (k-chunk x t2 f32 accumulators) would outgrow the A it serves.
constexpr int RSegmentBytes(int itemsize, int nt) {
  if (itemsize == 2) return nt > 8 && nt <= 16 ? 256 : 128;
  return nt <= (itemsize == 8 ? 8 : 16) ? 128 : 256;
}

// R tiles: 128 rows, 256 threads; the threads not needed along the rows
// split each row's chunk (k-groups). f64 past t2 = 32 takes 64 rows, so that
// two stages and the reduction buffer (rows x t2 f64 sums) fit in the 163 KB
// a block may opt in to on sm_80. Nominal ring: four of the small stages,
// two of the large ones.
constexpr TileConfig RTile(int itemsize, int nt) {
  const int rpt = RRowsPerThread(itemsize, nt);
  const int rows = itemsize == 8 && nt > 32 ? 64 : 128;
  const int k_groups = kTileThreads / (rows / rpt);
  const int seg = RSegmentBytes(itemsize, nt);
  return {rows, rpt, k_groups, seg / 16 / k_groups, seg == 128 ? 4 : 2};
}

// 16-byte vectors per L row: the power of two covering k (the row's class).
inline int LVecsPerThread(int64_t k, int itemsize) {
  int v = 1;
  while (v * 16 < k * itemsize) v *= 2;
  return v;
}

// Accumulators per row of a B stage: t2 rounded up to 16-byte units, plus one
// when that count is even, so that B rows read as 16-byte broadcasts stay
// aligned and a warp storing 8 rows x 4 columns (B given as n x k) hits 32
// distinct banks.
constexpr int BRowStride(int acc_bytes, int nt) {
  const int w = 16 / acc_bytes;
  if (nt < w) return nt;
  int s = (nt + w - 1) / w * w;
  if ((s / w) % 2 == 0) s += w;
  return s;
}

// L threads per block, nominally: the most (of 256, 128, 64) whose tile
// keeps two stages of A (rows of this class), B and its output within
// kNominalBlockSmem. The plan (launch_tiles.cuh) chooses among the three on
// the device at hand, for the bytes in flight and the warps per SM each
// allows.
inline constexpr int kLThreadOptions[] = {256, 128, 64};
// The shared memory a block may opt in to on sm_90 and sm_100 (the Python
// model's occupancy reads the nominal tile).
constexpr int kNominalBlockSmem = 227 * 1024;
constexpr int LTileSmem(int threads, int rpt, int row_bytes, int nt, int itemsize) {
  const int rows = threads * rpt;
  const int k = row_bytes / itemsize < kLMaxK ? row_bytes / itemsize : kLMaxK;
  const int acc = AccSize(itemsize);
  return 2 * (rows * (row_bytes + 16) + 32) + k * BRowStride(acc, nt) * acc +
         rows * (nt * itemsize + 16) + 32;
}
constexpr TileConfig LTile(int itemsize, int nt, int vpt) {
  const int rpt = LRowsPerThread(itemsize, nt);
  int t = kTileThreads;
  while (t > 64 && LTileSmem(t, rpt, vpt * 16, nt, itemsize) > kNominalBlockSmem) t /= 2;
  return {t * rpt, rpt, 1, vpt, 2};
}

// TSM2L's row-per-thread kernels (kernels/row_per_thread.cuh) take rows of
// exactly one or two 16-byte vectors, or of 2, 4 or 8 bytes (several rows to
// a vector), and n up to 8 (wider B measured slower than the L tile: the
// FMAs per row outgrow a thread); the launcher also needs B shared across the
// batch and A 16-byte aligned, else the L tile runs.
inline bool UsesRowKernel(bool family_l, int64_t k, int64_t n, int itemsize) {
  const int64_t row_bytes = k * itemsize;
  const bool packed = row_bytes == 2 || row_bytes == 4 || row_bytes == 8;
  return family_l && (row_bytes == 16 || row_bytes == 32 || packed) && n <= 8;
}

// k covered by one stage of a tile (t1).
constexpr int64_t ChunkK(const TileConfig& t, int itemsize) {
  return static_cast<int64_t>(t.k_groups) * t.vec_per_thr * (16 / itemsize);
}

inline bool UsesLTile(bool family_l, int64_t k, int /*itemsize*/) {
  return family_l && k <= kLMaxK;
}

// TSM2L on tensor cores (kernels/tsm2l_mma.cuh), on GPUs with mma.sync: rows
// of A of whole 16-byte vectors (k <= kLMaxK), bf16 and f16 past n = 4, f32
// past n = 8 (three TF32 products of split operands) and f64 past n = 8 with
// rows past 32 bytes (DMMA), where the L tile's CUDA-core FMAs, not the
// memory, set the pace, up to n = 64 (one block holds all of B; wider B takes
// the L tile's n-tiles). Rows of 16 or 32 bytes with n <= 8 keep the
// row-per-thread kernel, and an f32 C of 2-byte products the L tile.
constexpr int kLMmaWarps = 8;
constexpr int kLMmaMaxN = 64;
inline bool UsesLMma(bool family_l, int64_t k, int64_t n, int itemsize, int cc, bool out_f32) {
  const bool wide = itemsize == 2 ? n > 4 : n > 8 && (itemsize == 4 || k * itemsize > 32);
  return family_l && wide && n <= kLMmaMaxN && cc >= 80 && !out_f32 && k <= kLMaxK &&
         k * itemsize % 16 == 0;
}
// k rounded up so that each lane of a quad loads whole vectors of every row,
// or one 8-byte piece of rows of at most 32 bytes. f64 takes f32's paddings
// (8, then multiples of 16), so that both instantiate the same five.
constexpr int LMmaKPad(int64_t k, int itemsize) {
  if (itemsize == 8) return k <= 8 ? 8 : static_cast<int>((k + 15) / 16 * 16);
  if (k * itemsize <= 32) return 32 / itemsize;
  const int quad = 4 * (16 / itemsize);
  return static_cast<int>((k + quad - 1) / quad * quad);
}
// MMA columns: n rounded up to 8, to 16 for 2-byte types (tiles in pairs).
constexpr int LMmaNTile(int itemsize, int nt) {
  const int w = itemsize == 2 ? 16 : 8;
  return (nt + w - 1) / w * w;
}
// Bytes between two rows of a stage, so that the lanes of one shared-memory
// load phase meet distinct banks: 32-byte rows (8-byte pieces: four rows of
// a half warp fill 128 bytes), else padded to 64 bytes off a multiple of 128
// (16-byte vectors: two rows of a quarter warp).
constexpr int LMmaRowStride(int row_bytes) {
  if (row_bytes <= 32) return 32;
  const int s = (row_bytes + 63) / 64 * 64;
  return s % 128 == 0 ? s + 64 : s;
}
// Shared memory of B's fragments for k padded to kp and n_tile columns.
constexpr int LMmaBBytes(int itemsize, int kp, int n_tile) {
  const int steps = itemsize == 8 ? kp / 4 : itemsize == 4 ? kp / 8 : kp / 16;
  return steps * (n_tile / 8) * 32 * (itemsize == 4 ? 16 : 8);
}
// Blocks per SM the tile is compiled for (__launch_bounds__): two (128
// registers a thread), but one for f32 with all of k and the widest B, whose
// three sets of sums spilled at 128.
constexpr int LMmaMinBlocks(int itemsize, int kp, int n_tile) {
  return itemsize == 4 && kp == 64 && n_tile >= 56 ? 1 : 2;
}
// One warp's stage: 16 rows.
constexpr int LMmaStageBytes(int itemsize, int kp) { return 16 * LMmaRowStride(kp * itemsize); }

// --- Shared memory, in the same arithmetic as the kernels ------------------

// Bytes between two rows of an R stage of A. Rows that are whole 16-byte
// vectors (and A aligned): the segment, padded to an odd number of vectors
// so that 8 threads reading 8 rows hit 8 distinct bank groups. Other rows:
// the segment and 16 to 31 bytes, so that the stage row has the same address
// modulo 16 as the row in memory (k * itemsize modulo 16) and room for the
// vector that covers its misaligned head. The stride's largest power-of-two
// factor is then below 16, so element reads of 32 consecutive rows meet at
// most two to a bank (none where that factor is the element size or 4).
constexpr int RStageRowBytes(int segment_bytes, bool vec_rows, int64_t row_bytes_mod16) {
  if (vec_rows) return (segment_bytes / 16) % 2 ? segment_bytes : segment_bytes + 16;
  return segment_bytes + 16 + static_cast<int>(row_bytes_mod16);
}
constexpr int RStageBytes(int rows, int row_stride) {
  return (rows * row_stride + 32 + 15) / 16 * 16;
}

// A tile's output of `osize`-byte values, staged in shared memory before it
// is written as 16-byte vectors: rows padded to an odd number of vectors, or
// packed (plus a head and a tail vector).
constexpr int OutStageBytes(int rows, int nt, int osize) { return rows * (nt * osize + 16) + 32; }

// The k-group reduction buffer (rows x t2 accumulators, odd row stride),
// which the output staging reuses once the sums are in registers (sized for
// f32 output of 2-byte types).
constexpr int RReduceBytes(int rows, int nt, int itemsize) {
  const int red = rows * (nt | 1) * AccSize(itemsize);
  const int out = OutStageBytes(rows, nt, itemsize < 4 ? 4 : itemsize);
  return red > out ? red : out;
}

// What a tile shape costs on chip for one block with an n-tile of nt
// columns at its nominal ring depth (R: rows of whole vectors; L: the
// largest k of its class), here so that the Python model can compute
// occupancy without CUDA. Accumulators are f64 for itemsize 8 and f32
// otherwise.
struct TileFootprint {
  int threads;        // rows / rows_per_thread * k_groups
  int chunk_k;        // t1: k per stage
  int a_stage_bytes;  // one ring stage of A in shared memory
  int b_stage_bytes;  // R: one ring stage of B; L: B, resident for the whole run
  int red_bytes;      // k-group reduction and output staging
  int smem_bytes;     // dynamic shared memory per block
  int min_blocks;     // __launch_bounds__ minimum blocks per SM (caps registers)
};
constexpr TileFootprint Footprint(const TileConfig& t, int itemsize, int nt) {
  const int acc = AccSize(itemsize);
  const int threads = t.rows / t.rows_per_thread * t.k_groups;
  const int chunk_k = t.k_groups * t.vec_per_thr * (16 / itemsize);
  const int min_blocks = MinBlocksFor(t.rows_per_thread, nt, acc);
  if (t.k_groups == 1) {  // L
    const int k = chunk_k < kLMaxK ? chunk_k : kLMaxK;
    const int a_stage = t.rows * (t.vec_per_thr * 16 + 16) + 32;
    const int b = k * BRowStride(acc, nt) * acc;
    const int out = OutStageBytes(t.rows, nt, itemsize);
    return {threads, chunk_k, a_stage, b, out, t.stages * a_stage + b + out, min_blocks};
  }
  const int seg = chunk_k * itemsize;
  const int a_stage = RStageBytes(t.rows, RStageRowBytes(seg, true, 0));
  const int b_stage = chunk_k * BRowStride(acc, nt) * acc;
  const int red = RReduceBytes(t.rows, nt, itemsize);
  return {threads,   chunk_k, a_stage, b_stage, red, t.stages * (a_stage + b_stage) + red,
          min_blocks};
}

// The tile a TSM2R (family_l false) or TSM2L call of this shape runs.
inline TileConfig TileFor(bool family_l, int64_t k, int64_t n, int itemsize) {
  const int nt = NTileFor(n);
  return UsesLTile(family_l, k, itemsize) ? LTile(itemsize, nt, LVecsPerThread(k, itemsize))
                                          : RTile(itemsize, nt);
}

// TSM2R on tensor cores (kernels/tsm2_mma.cuh), on GPUs with mma.sync
// (compute capability 8.0 and later): bf16 and f16 past n = 4, where a
// CUDA-core thread's FMAs per byte of A outrun the memory, and f32 past
// n = 8 as three TF32 products of split operands (f32 accuracy). k = 1 stays
// on the CUDA cores, whose sums keep a single product's signed zero. A
// block's tile is kRMmaRows rows (a warp per 16) by kRMmaSegBytes of each
// row per stage; its n-tile is t2 rounded up to a multiple of 8 (the MMA's n).
constexpr int kRMmaRows = 128;
constexpr int kRMmaSegBytes = 256;
constexpr int RMmaChunkK(int itemsize) { return kRMmaSegBytes / itemsize; }
// Elements of one column of a B stage: the chunk and 16 bytes, an odd number
// of 16-byte vectors, so that eight columns read at once hit distinct banks.
constexpr int RMmaBStride(int itemsize) { return RMmaChunkK(itemsize) + 16 / itemsize; }
// f32 B is staged as two TF32 planes, its high and low parts.
constexpr int RMmaBPlanes(int itemsize) { return itemsize == 4 ? 2 : 1; }
// f64 past n = 8 runs there too, on DMMA, but only through the tensor-map
// ring (sm_90 and later, rows of whole vectors; kernels/tsm2_mma_tma.cuh).
inline bool UsesRMma(bool family_l, int64_t k, int64_t n, int itemsize, int cc) {
  const bool wide = itemsize == 2 ? n > 4 : (itemsize == 4 || (itemsize == 8 && cc >= 90)) && n > 8;
  return !UsesLTile(family_l, k, itemsize) && wide && cc >= 80 && k > 1;
}
constexpr int RMmaNTile(int nt) { return (nt + 7) / 8 * 8; }
// Two blocks per SM (128 registers a thread) where two rings fit beside the
// sums; f32 keeps three sets of sums (tsm2_mma.cuh), so fewer columns do.
constexpr int RMmaMinBlocks(int itemsize, int nt) {
  return nt <= (itemsize == 4 ? 16 : 40) ? 2 : 1;
}
// Bytes of one stage image of B (all planes) for an n-tile of nt. f32's
// image is also the warpgroup tile's K-major swizzled layout (smaller: no
// padding), whose ring slots must start on 1,024-byte swizzle atoms.
constexpr int RMmaBStageBytes(int itemsize, int nt) {
  const int bytes = RMmaBPlanes(itemsize) * nt * RMmaBStride(itemsize) * itemsize;
  return itemsize == 4 ? (bytes + 1023) / 1024 * 1024 : bytes;
}
// B rearranged for the tensor-core tile (one pass before it): for each batch
// entry of B, n-tile and k-chunk, a stage image, zero past k and n. Rounded
// up to 256 bytes: the workspace's partial sums follow the images.
inline int64_t RMmaBImageBytes(int64_t b_batches, int64_t k, int64_t n, int itemsize) {
  const int nt = RMmaNTile(NTileFor(n));
  const int64_t chunks = (k + RMmaChunkK(itemsize) - 1) / RMmaChunkK(itemsize);
  const int64_t bytes = b_batches * ((n + nt - 1) / nt) * chunks * RMmaBStageBytes(itemsize, nt);
  return (bytes + 255) / 256 * 256;
}

// Bytes of partial sums one block may leave for the fix-up pass (a head and
// a tail tile), or 0 when every tile is one chunk and nothing is ever split.
inline int64_t PartialBytesPerBlock(int itemsize, int64_t k, int64_t n, bool family_l, int cc) {
  if (UsesLTile(family_l, k, itemsize)) return 0;
  const int nt = NTileFor(n);
  const TileConfig t = RTile(itemsize, nt);
  const int64_t core = k <= ChunkK(t, itemsize) ? 0 : int64_t{2} * t.rows * nt * AccSize(itemsize);
  if (UsesRMma(family_l, k, n, itemsize, cc)) {
    const int64_t mma =
        k <= RMmaChunkK(itemsize) ? 0 : int64_t{2} * kRMmaRows * RMmaNTile(nt) * AccSize(itemsize);
    // f64 falls back to the CUDA-core tile where A cannot be tensor-mapped.
    return itemsize == 8 ? std::max(mma, core) : mma;
  }
  return core;
}

// --- The ring depth, from the device ------------------------------------------

// The time a stream's bytes must be covered for, assumed for every GPU: DRAM
// latency under a full stream (0.6-1 us lightly loaded on HBM parts, more as
// the queues fill near the bandwidth limit), plus the stretches a block's
// ring spends refilling after its barriers. The driver reports neither.
constexpr double kLoadedLatencySeconds = 3.0e-6;

// Bytes one SM must keep in flight to stream at `bytes_per_s` over
// `sm_count` SMs (Little's law: bandwidth x latency, per SM).
inline int64_t InFlightTarget(double bytes_per_s, int sm_count) {
  return static_cast<int64_t>(bytes_per_s * kLoadedLatencySeconds / (sm_count > 0 ? sm_count : 1));
}

// One candidate ring depth: its shared memory and the blocks per SM the
// occupancy calculator allows for it.
struct StageChoice {
  int stages = 0;
  int smem_bytes = 0;
  int blocks_per_sm = 0;
  int64_t inflight = 0;  // A bytes in flight per SM: blocks x (stages - 1) x stage data
};

// The ring depth for a kernel whose block needs `fixed` bytes of shared
// memory plus `per_stage` per stage, streaming `stage_data` bytes of A per
// stage: the shallowest depth that keeps `target` bytes in flight per SM,
// else the one that keeps the most. `occupancy(smem)` returns blocks per SM
// (0 if the block does not fit), `max_smem` the per-block limit.
template <typename Occupancy>
StageChoice ChooseStages(int fixed, int per_stage, int64_t stage_data, int64_t target, int max_smem,
                         Occupancy&& occupancy) {
  StageChoice best;
  for (int s = 2; s <= kMaxStages; ++s) {
    const int64_t smem = int64_t{fixed} + int64_t{s} * per_stage;
    if (smem > max_smem) break;
    const int blocks = occupancy(static_cast<int>(smem));
    if (blocks < 1) break;
    const int64_t inflight = int64_t{blocks} * (s - 1) * stage_data;
    const int64_t got = inflight < target ? inflight : target;
    const int64_t had = best.inflight < target ? best.inflight : target;
    if (best.stages == 0 || got > had) {
      best = {s, static_cast<int>(smem), blocks, inflight};
    }
    if (inflight >= target) break;
  }
  return best;
}

}  // namespace tsm2

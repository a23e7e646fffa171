// Tile shapes of the TSM2 kernel, in plain C++ so that the host side (and
// Python, through _tsm2_ext.workspace_bytes and tile_config) can size workspaces
// without CUDA.
//
// R (any k): a tile is `rows` rows x one k-chunk; k_groups threads share each
//    row's chunk and are reduced at the tile's end.
// L (k * itemsize <= 128 bytes): one thread owns whole rows, so a tile is one
//    contiguous block of A and its output one contiguous block of C.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ffi/common/elem_type.h"

namespace tsm2 {

struct TileConfig {
  int rows;             // rows of A per tile
  int rows_per_thread;  // rows whose accumulators one thread holds (register blocking)
  int k_groups;         // threads sharing one row's k-chunk
  int vec_per_thr;      // 16-byte vectors of A per thread per stage (t3)
  int stages;           // depth of the cp.async ring
};

// R tiles: several threads (k-groups) share each row's k-chunk. Chosen from
// the lab's sweeps on an H100 (benchmarks/lab/kernel_lab.cu): 64 x 256-byte
// row segments where the FMAs are light; for wider B, register blocking over
// 2-4 rows per thread, since each B value read from shared memory then feeds
// several rows' FMAs.
constexpr TileConfig RTile(int itemsize, int nt) {
  if (itemsize == 2) {
    if (nt == 4) return {128, 2, 4, 2, 4};
    if (nt == 8 || nt == 16) return {128, 4, 8, 1, 4};
    return {64, 1, 4, 2, 4};
  }
  if (nt == 16) return itemsize == 8 ? TileConfig{128, 2, 4, 2, 4} : TileConfig{64, 2, 8, 2, 4};
  return {64, 1, 4, 4, 4};
}

// L tiles: one thread per row holds the whole row (k * itemsize <= 128
// bytes, vpt 16-byte vectors), so a tile is one contiguous block of A and the
// tile's output one contiguous block of C.
constexpr int kLMaxRowBytes = 128;
constexpr TileConfig LTile(int itemsize, int nt, int vpt) {
  const int rpt = itemsize == 2 && nt <= 16 ? 2 : 1;
  const int rows = (vpt == 8 || nt >= 32 ? 128 : 256) * rpt;
  return {rows, rpt, 1, vpt, 4};
}

// 16-byte vectors per L row: the power of two covering k.
inline int LVecsPerThread(int64_t k, int itemsize) {
  int v = 1;
  while (v * 16 < k * itemsize) v *= 2;
  return v;
}

// TSM2L's row-per-thread kernel (kernels/row_per_thread.cuh) takes rows of
// exactly one or two 16-byte vectors and n up to 8 (wider B measured slower
// than the L tile: the FMAs per row outgrow a thread); the launcher also
// needs B shared across the batch and A 16-byte aligned, else the L tile runs.
inline bool UsesRowKernel(bool family_l, int64_t k, int64_t n, int itemsize) {
  const int64_t row_bytes = k * itemsize;
  return family_l && (row_bytes == 16 || row_bytes == 32) && n <= 8;
}

// k covered by one stage of a tile (t1).
constexpr int64_t ChunkK(const TileConfig& t, int itemsize) {
  return static_cast<int64_t>(t.k_groups) * t.vec_per_thr * (16 / itemsize);
}

inline bool UsesLTile(bool family_l, int64_t k, int itemsize) {
  return family_l && k * itemsize <= kLMaxRowBytes;
}

// t2: columns of B and C per block, the power of two >= n, capped at 64.
inline int NTileFor(int64_t n) {
  int nt = 1;
  while (nt < n && nt < 64) nt *= 2;
  return nt;
}

// What a tile shape costs on chip, for one block of Tsm2Kernel with an n-tile
// of nt columns: the same arithmetic as Tsm2Config (kernels/tsm2.cuh,
// which static_asserts that the two agree), here so that the Python model can
// compute occupancy without CUDA. Accumulators are f64 for itemsize 8 and f32
// otherwise.
struct TileFootprint {
  int threads;        // rows / rows_per_thread * k_groups
  int chunk_k;        // t1: k per stage
  int a_stage_bytes;  // one ring stage of A in shared memory (rows padded)
  int b_stage_bytes;  // one ring stage of B (as accumulators)
  int red_bytes;      // k-group reduction / output staging buffer
  int smem_bytes;     // dynamic shared memory per block
  int min_blocks;     // __launch_bounds__ minimum blocks per SM (caps registers)
};
constexpr TileFootprint Footprint(const TileConfig& t, int itemsize, int nt) {
  const int acc = AccSize(itemsize);
  const int vec = 16 / itemsize;
  const int threads = t.rows / t.rows_per_thread * t.k_groups;
  const int chunk_k = t.k_groups * t.vec_per_thr * vec;
  const int row_bytes = chunk_k * itemsize;
  const int row_stride = (row_bytes / 16) % 2 ? row_bytes : row_bytes + 16;
  const int a_stage = t.rows * row_stride;
  const int b_stage = chunk_k * nt * acc;
  const int slice_cap = 4096 / (t.k_groups * t.rows) > 0 ? 4096 / (t.k_groups * t.rows) : 1;
  const int slice = nt < slice_cap ? nt : slice_cap;
  const int out_stride = nt * acc % 32 == 0 ? nt * acc + 16 : nt * acc;
  const int red = t.k_groups > 1 ? t.k_groups * t.rows * (slice + 1) * acc : t.rows * out_stride;
  const int min_blocks = nt < 32 && threads <= 512 ? 512 / threads : 1;
  return {threads,   chunk_k, a_stage, b_stage, red, t.stages * (a_stage + b_stage) + red,
          min_blocks};
}

// The tile a TSM2R (family_l false) or TSM2L call of this shape runs.
inline TileConfig TileFor(bool family_l, int64_t k, int64_t n, int itemsize) {
  const int nt = NTileFor(n);
  return UsesLTile(family_l, k, itemsize) ? LTile(itemsize, nt, LVecsPerThread(k, itemsize))
                                          : RTile(itemsize, nt);
}

// Bytes of partial sums one block may leave for the fix-up pass (a head and
// a tail tile), or 0 when every tile is one chunk and nothing is ever split.
inline int64_t PartialBytesPerBlock(int itemsize, int64_t k, int64_t n, bool family_l) {
  const int nt = NTileFor(n);
  const TileConfig t = TileFor(family_l, k, n, itemsize);
  if (k <= ChunkK(t, itemsize)) return 0;
  const int acc_bytes = AccSize(itemsize);
  return int64_t{2} * t.rows * nt * acc_bytes;
}

}  // namespace tsm2

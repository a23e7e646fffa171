// Tile shapes of the TSM2 kernel, in plain C++ so that the host side (and
// Python, through _tsm2_ext.workspace_bytes_per_block) can size workspaces
// without CUDA.
//
// Both shapes are 128 rows x 4 k-groups = 512 threads, one block per SM, with
// as many pipeline stages as fit in shared memory (see kernels/tsm2.cuh).
// R: 2 vectors of 16 bytes per thread per stage, 128 bytes of each row: for
//    long k, walked in chunks.
// L: 1 vector per thread, 64 bytes of each row: for k * itemsize <= 64, where
//    a tile is one contiguous block of A.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tsm2 {

struct TileConfig {
  int rows;         // rows of A per tile
  int k_groups;     // threads (of one warp) sharing a row's k-chunk
  int vec_per_thr;  // 16-byte vectors of A per thread per stage (t3)
};

constexpr TileConfig RTile(int /*itemsize*/, int /*n_tile*/) { return {128, 4, 2}; }
constexpr TileConfig LTile(int /*itemsize*/, int /*n_tile*/) { return {128, 4, 1}; }

// k covered by one stage of a tile (t1).
constexpr int64_t ChunkK(const TileConfig& t, int itemsize) {
  return static_cast<int64_t>(t.k_groups) * t.vec_per_thr * (16 / itemsize);
}

inline bool UsesLTile(bool family_l, int64_t k, int itemsize) {
  return family_l && k * itemsize <= 64;
}

// t2: columns of B and C per block, the power of two >= n, capped at 64.
inline int NTileFor(int64_t n) {
  int nt = 1;
  while (nt < n && nt < 64) nt *= 2;
  return nt;
}

// Bytes of partial sums one block may leave for the fix-up pass (a head and
// a tail tile), or 0 when every tile is one chunk and nothing is ever split.
inline int64_t PartialBytesPerBlock(int itemsize, int64_t k, int64_t n, bool family_l) {
  const int nt = NTileFor(n);
  const TileConfig t = UsesLTile(family_l, k, itemsize) ? LTile(itemsize, nt) : RTile(itemsize, nt);
  if (k <= ChunkK(t, itemsize)) return 0;
  const int acc_bytes = itemsize == 8 ? 8 : 4;
  return int64_t{2} * t.rows * nt * acc_bytes;
}

}  // namespace tsm2

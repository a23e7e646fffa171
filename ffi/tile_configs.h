// Tile shapes of the TSM2 kernel, in plain C++ so that the host side (and
// Python, through _tsm2_ext.workspace_bytes_per_block) can size workspaces
// without CUDA.
//
// R: 64 rows x 4 k-groups per block, a 4-stage ring of 256-byte row segments
//    for 4- and 8-byte types (128 bytes for 2-byte types). For long k: each
//    row's chunk is shared by four threads and reduced at the tile's end.
// L: 256 rows, one thread per row, a 3-stage ring of 64-byte rows. For
//    k * itemsize <= 64: a tile is then one contiguous block of A.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tsm2 {

struct TileConfig {
  int rows;         // rows of A per tile (threads per row group)
  int k_groups;     // threads sharing one row's k-chunk
  int vec_per_thr;  // 16-byte vectors of A per thread per stage (t3)
  int stages;       // depth of the cp.async ring
};

constexpr TileConfig RTile(int itemsize) { return {64, 4, itemsize == 2 ? 2 : 4, 4}; }
constexpr TileConfig LTile(int /*itemsize*/) { return {256, 1, 4, 3}; }

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
  const TileConfig t = UsesLTile(family_l, k, itemsize) ? LTile(itemsize) : RTile(itemsize);
  if (k <= ChunkK(t, itemsize)) return 0;
  const int acc_bytes = itemsize == 8 ? 8 : 4;
  return int64_t{2} * t.rows * NTileFor(n) * acc_bytes;
}

}  // namespace tsm2

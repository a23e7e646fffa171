// How the two ABFT targets cut their work, in plain C++ so that the host
// (planning, workspace sizing) and Python (through _tsm2_ext.colsums_plan and
// _tsm2_ext.repair_blocks) agree without CUDA.
//
// tsm2_colsums: out[q, :] = sum_i v[q, i] * f_q(M[i, :]) for r <= 4 weight
// rows, one read of M. Each lane owns one 16-byte vector of columns, a row of
// a column tile is `lanes` lanes wide (32 for wide matrices, fewer for narrow
// ones, so that a warp covers several short rows per load), the warps of a
// block take interleaved rows, and the rows are cut into splits to give every
// SM work. Splits write partial sums [split][r][cols] that a second kernel
// adds in split order (bitwise reproducible, no float atomics).
//
// tsm2_abft_encode and tsm2_abft_verify: the checksum passes (checksum.h)
// cut as tsm2_colsums is, but summing in f64: a column's partial sums are
// `slots` doubles (a double-double sum takes two). Encode's workspace holds
// the pass over A's partials, its final per-column values (the pass over B's
// weights: kAbftAStatSlots doubles per column of A) and the pass over B's
// partials; verify's the pass over C's partials.
//
// tsm2_repair_column: a persistent grid of at most kRepairMaxBlocks blocks
// recomputes one column of C, each block writing whether its rows came out
// finite; a second kernel writes the column only if every block said so.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

#include "ffi/common/plan_math.h"

namespace tsm2 {

constexpr int kColsumsThreads = 256;
constexpr int kColsumsMaxR = 4;
// Row loads in flight per thread (and as many prefetched behind them).
constexpr int kColsumsRowsInFlight = 4;
// Blocks a plan aims to keep resident per SM: 256 threads x 4 rows x 16 bytes
// is 16 KB of loads in flight per block, and ~20 KB per SM covers the latency
// at the H100's read ceiling (Little's law), so more blocks only add partials.
constexpr int kColsumsMaxBlocksPerSm = 4;

struct ColsumsPlan {
  int lanes = 32;         // lanes per row (a power of two <= 32)
  int64_t tile_cols = 0;  // columns of one block: lanes * 16-byte vector
  int64_t tiles = 0;      // column tiles
  int64_t step = 0;       // rows a block covers per iteration
  int64_t splits = 1;     // row ranges per column tile
  int64_t split_len = 0;  // rows per split (a multiple of step)
  int64_t Blocks() const { return tiles * splits; }
};

// `resident_blocks`: blocks the GPU runs at once (blocks per SM x SMs). A
// single wave: splits = floor(resident / tiles), so every block starts at
// once and the partials never outnumber what latency needs (a second, mostly
// empty wave would cost up to a whole wave's time). `max_splits` caps the
// splits (the workspace a caller has).
inline ColsumsPlan PlanColsums(int itemsize, int acc_size, int r, int64_t rows, int64_t cols,
                               int64_t resident_blocks,
                               int64_t max_splits = std::numeric_limits<int64_t>::max()) {
  ColsumsPlan s;
  const int vec = 16 / itemsize;
  const int64_t vecs = CeilDiv(std::max<int64_t>(cols, 1), vec);
  s.lanes = static_cast<int>(std::min<int64_t>(32, Pow2AtLeast(vecs)));
  s.tile_cols = int64_t{s.lanes} * vec;
  s.tiles = CeilDiv(std::max<int64_t>(cols, 1), s.tile_cols);
  s.step = int64_t{kColsumsRowsInFlight} * kColsumsThreads / s.lanes;
  const int64_t steps = std::max<int64_t>(1, CeilDiv(rows, s.step));
  // Partial sums stay below an eighth of the bytes read.
  const int64_t by_bytes =
      std::max<int64_t>(1, rows * itemsize / (8 * int64_t{std::max(r, 1)} * acc_size));
  const int64_t want = std::max<int64_t>(1, resident_blocks / s.tiles);
  s.splits = std::max<int64_t>(1, std::min({want, steps, by_bytes, max_splits}));
  s.split_len = CeilDiv(steps, s.splits) * s.step;
  s.splits = CeilDiv(std::max<int64_t>(rows, 1), s.split_len);  // no empty splits
  return s;
}

// Bytes of partial sums ([splits][r][cols] accumulators) a plan needs.
inline int64_t ColsumsWorkspaceBytes(const ColsumsPlan& s, int r, int64_t cols, int acc_size) {
  return s.splits <= 1 ? 0 : s.splits * r * cols * acc_size;
}

// The plan Python sizes the workspace for: every SM holding the most blocks
// a plan aims for. A device running fewer at once plans fewer splits.
inline ColsumsPlan UpperColsumsPlan(int itemsize, int acc_size, int r, int64_t rows, int64_t cols,
                                    int sm_count) {
  return PlanColsums(itemsize, acc_size, r, rows, cols, int64_t{kColsumsMaxBlocksPerSm} * sm_count);
}

enum AbftPass : int { kAbftPassA = 0, kAbftPassB = 1, kAbftPassC = 2 };

// Partial-sum doubles per column: the two signed sums (double-double for f64
// data) and the scale rows (A: |a|, a^2, subnormal |a|; B: the 1-norm, the
// squares, the flush mass; C: |c| and the norm row).
constexpr int AbftPassSlots(AbftPass pass, bool dd) {
  return (dd ? 4 : 2) + (pass == kAbftPassC ? 2 : 3);
}
// v1, v2 (high and low parts), alpha, nu and the subnormal mass of each
// column of A.
constexpr int kAbftAStatSlots = 7;

inline ColsumsPlan PlanAbftPass(int itemsize, int slots, int64_t rows, int64_t cols,
                                int64_t resident_blocks) {
  return PlanColsums(itemsize, 8, slots, rows, cols, resident_blocks);
}

inline int64_t AbftPartialBytes(const ColsumsPlan& s, int slots, int64_t cols) {
  return s.splits <= 1 ? 0 : s.splits * slots * cols * 8;
}

// Where encode's workspace keeps what (byte offsets), for the plans of the
// passes over A (m x k) and B (k x n).
struct AbftEncodeLayout {
  int64_t a_partials = 0, a_stats = 0, b_partials = 0, bytes = 0;
};
inline AbftEncodeLayout AbftEncodeLayoutOf(const ColsumsPlan& a_plan, const ColsumsPlan& b_plan,
                                           bool dd, int64_t k, int64_t n) {
  AbftEncodeLayout l;
  l.a_stats = AbftPartialBytes(a_plan, AbftPassSlots(kAbftPassA, dd), k);
  l.b_partials = l.a_stats + int64_t{kAbftAStatSlots} * k * 8;
  l.bytes = l.b_partials + AbftPartialBytes(b_plan, AbftPassSlots(kAbftPassB, dd), n);
  return l;
}

// The workspaces Python sizes (every SM holding kColsumsMaxBlocksPerSm
// blocks); a device holding fewer plans fewer splits.
inline int64_t AbftEncodeWorkspaceBytes(int itemsize, int64_t m, int64_t k, int64_t n,
                                        int sm_count) {
  const bool dd = itemsize == 8;
  const int64_t resident = int64_t{kColsumsMaxBlocksPerSm} * sm_count;
  const ColsumsPlan a = PlanAbftPass(itemsize, AbftPassSlots(kAbftPassA, dd), m, k, resident);
  const ColsumsPlan b = PlanAbftPass(itemsize, AbftPassSlots(kAbftPassB, dd), k, n, resident);
  return AbftEncodeLayoutOf(a, b, dd, k, n).bytes;
}
inline int64_t AbftVerifyWorkspaceBytes(int itemsize, int64_t m, int64_t n, int sm_count) {
  const int slots = AbftPassSlots(kAbftPassC, itemsize == 8);
  const int64_t resident = int64_t{kColsumsMaxBlocksPerSm} * sm_count;
  return AbftPartialBytes(PlanAbftPass(itemsize, slots, m, n, resident), slots, n);
}

constexpr int kRepairThreads = 256;
constexpr int kRepairRowsPerWarp = 4;
constexpr int kRepairRowsPerBlock = kRepairThreads / 32 * kRepairRowsPerWarp;
constexpr int kRepairMaxBlocks = 1024;
// Elements of B's column staged in shared memory per step (16 KB as f64).
constexpr int kRepairChunk = 2048;

// Blocks of the recomputation, and entries of its s32 workspace (one finite
// flag per block).
inline int64_t RepairBlocks(int64_t m) {
  return std::clamp<int64_t>(CeilDiv(m, kRepairRowsPerBlock), 1, kRepairMaxBlocks);
}

// tsm2_abft_judge's s32 state: a header (failing columns, the worst one,
// whether it is the only one) and the repair's block flags.
constexpr int kJudgeStateHeader = 4;
inline int64_t JudgeStateSize(int64_t m) { return kJudgeStateHeader + RepairBlocks(m); }

}  // namespace tsm2

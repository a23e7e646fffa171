// The plan of the row stream (kernels/row_stream.cuh) in plain C++, so that
// the launcher, the workspace size Python asks for (_tsm2_ext) and the model
// (tile_config) compute the same splits from the same numbers.
//
// Which products it takes: R and NT products (one product, not a batch) of
// width n <= 16 for f32 and f64 and n <= 8 for bf16 and f16, with rows of A
// long enough that a warp's step of 32 vectors is mostly filled. Past those
// widths the FMAs per streamed byte outgrow what a warp of CUDA cores issues
// at the read ceiling, and the row tiles (on tensor cores where they can)
// take over.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>

#include "ffi/common/plan_math.h"

namespace tsm2 {

constexpr int kRowStreamThreads = 512;
constexpr int kRowStreamWarps = kRowStreamThreads / 32;

// One instantiation of the kernel.
struct RowStreamShape {
  int n_b = 0;         // B's row width N in shared memory: n rounded up to 1, 2, 4, 8 or 16
  int rows = 0;        // R: rows of A a warp multiplies together (one B load feeds R rows)
  int vecs = 1;        // U: 16-byte vectors per row and lane in one step
  int depth = 1;       // D: steps of A in flight in registers (stages == 0)
  int stages = 0;      // S: steps in a per-warp shared-memory ring filled by cp.async; 0: none
  int min_blocks = 1;  // M: blocks per SM (__launch_bounds__), registers per thread 64K/(512 M)
  constexpr bool ok() const { return n_b > 0; }
};

// The instantiation for element size `itemsize` and width n, or !ok() where
// the row stream does not take n. Memory-bound widths keep their loads in
// registers (the least work per vector): two vectors per row where a vector
// carries few FMAs, two steps in flight at f32 n = 4, R = 2 rows of two
// vectors for f64 n = 8, whose sums take twice the registers. Where the FMAs
// per vector grow (f32 n > 8, 2-byte n > 4) the registers go to the sums and
// a shared-memory ring of three steps keeps the bytes in flight instead.
// Chosen on an H200 (benchmarks/lab/kernel_lab.cu, cases "stream"); none
// spills at 128 registers, which one 512-thread block per SM allows.
constexpr RowStreamShape RowStreamShapeFor(int itemsize, int64_t n) {
  if (n < 1 || n > 16) return {};
  const int nb = n <= 1 ? 1 : n <= 2 ? 2 : n <= 4 ? 4 : n <= 8 ? 8 : 16;
  if (itemsize == 8) {
    if (nb > 8) return {};
    return nb <= 4 ? RowStreamShape{nb, 4, 1, 1, 0, 1} : RowStreamShape{nb, 2, 2, 1, 0, 1};
  }
  if (itemsize == 4) {
    if (nb <= 2) return {nb, 4, 2, 1, 0, 1};
    if (nb == 4) return {nb, 4, 1, 2, 0, 1};
    if (nb == 8) return {nb, 4, 1, 1, 0, 1};
    return {nb, 4, 1, 0, 3, 1};
  }
  if (nb > 8) return {};
  return nb <= 4 ? RowStreamShape{nb, 4, 1, 1, 0, 1} : RowStreamShape{nb, 4, 1, 0, 3, 1};
}

// Rows of A shorter than this many bytes leave most lanes of a warp step
// idle: the row tiles take them.
constexpr int64_t kRowStreamMinRowBytes = 256;

// Whether a TSM2R product (or a TSM2L one past the L tile's k) of one batch
// entry runs on the row stream; the layout must be nn or nt.
constexpr bool UsesRowStream(bool l_tile, int64_t batch, int64_t k, int64_t n, int itemsize) {
  return !l_tile && batch == 1 && k * itemsize >= kRowStreamMinRowBytes &&
         RowStreamShapeFor(itemsize, n).ok();
}

// B's rows in shared memory, as accumulator values (4 bytes, or 8 for f64):
// row j is units_per_row loads of `unit` bytes at unit j * units_per_row +
// j / vec. The lanes of one load read rows `vec` apart, and the extra unit
// per `vec` rows puts them in distinct banks (their unit indices step by an
// odd number).
struct RowStreamBLayout {
  int vec;            // elements of A in a 16-byte vector
  int unit;           // bytes per load of a B row
  int units_per_row;  //

  constexpr RowStreamBLayout(int itemsize, int n_b)
      : vec(16 / itemsize),
        unit(std::min(16, n_b * (itemsize == 8 ? 8 : 4))),
        units_per_row(n_b * (itemsize == 8 ? 8 : 4) / std::min(16, n_b * (itemsize == 8 ? 8 : 4))) {
  }
  constexpr int64_t UnitOf(int64_t j) const { return j * units_per_row + j / vec; }
  constexpr int64_t Bytes(int64_t rows) const { return (UnitOf(rows) + 1) * unit; }
  // The most rows that fit `bytes`.
  constexpr int64_t RowsFitting(int64_t bytes) const {
    const int64_t units = bytes / unit - 1;
    return units <= 0 ? 0 : units * vec / (int64_t{units_per_row} * vec + 1);
  }
};

// Where the row statistics of a kStats launch start after B's rows of the
// longest split: 16-byte aligned. They are laid out as B's rows of width
// kRowStreamStatsPerRow are (RowStreamStatsLayout), so that the lanes of a
// load, which read rows a vector apart, hit distinct banks.
constexpr int64_t RowStreamStatsOffset(const RowStreamBLayout& b, int64_t k_chunk) {
  return (b.Bytes(k_chunk) + 15) / 16 * 16;
}
constexpr int kRowStreamStatsPerRow = 8;
constexpr RowStreamBLayout RowStreamStatsLayout(int itemsize) {
  return RowStreamBLayout(itemsize, kRowStreamStatsPerRow);
}

// Shared memory of the rings of A (none where the ring is in registers).
constexpr int RowStreamRingBytes(const RowStreamShape& s) {
  return kRowStreamWarps * s.stages * s.rows * s.vecs * 32 * 16;
}

struct RowStreamPlan {
  bool ok = false;
  int period = 1;               // rows between two rows that start at the same offset in a vector
  int64_t groups = 0;           // groups of R rows per split
  int64_t splits = 1;           // ranges of k, each with B's rows in shared memory
  int64_t k_chunk = 0;          // k per split (the last may be shorter)
  int64_t units = 0;            // splits * groups: a warp's work unit is one group of one split
  int blocks = 0;               // grid: M blocks per SM at most
  int smem_bytes = 0;           // dynamic shared memory per block
  int64_t workspace_bytes = 0;  // partial sums of the splits
};

// Work units a warp should have, so that the last to finish leave the other
// warps of their block idle only briefly.
constexpr int64_t kRowStreamUnitsPerWarp = 4;

// The splits and grid for A[m, k] on a GPU of `sms` SMs and `smem_optin`
// bytes of shared memory per block. !ok when B's rows of one vector do not
// fit, or when the splits' partial sums would need more than
// `workspace_limit` bytes (< 0: no limit).
// With `stats` (the fused ABFT check's launch: kStats), every split writes
// its sums and the rows' statistics (checksum included) to the workspace, and
// B's rows share the shared memory with their statistics.
inline RowStreamPlan PlanRowStream(const RowStreamShape& s, int itemsize, int64_t m, int64_t k,
                                   int64_t n, int sms, int smem_optin, int64_t workspace_limit = -1,
                                   bool stats = false) {
  RowStreamPlan p;
  if (!s.ok() || m < 1 || k < 1 || n < 1 || n > s.n_b) return p;
  const RowStreamBLayout b(itemsize, s.n_b);
  const int64_t vec = b.vec, acc = itemsize == 8 ? 8 : 4;
  const int ring = RowStreamRingBytes(s);
  // Less the kernel's static shared memory (its unit counter) and, with
  // several blocks per SM, the 1 KB the driver reserves for each.
  const int64_t budget = (smem_optin - 64) / s.min_blocks - (s.min_blocks > 1 ? 1024 : 0) - ring;
  const int64_t stat_row = stats ? kRowStreamStatsPerRow * acc : 0;
  const RowStreamBLayout sl = RowStreamStatsLayout(itemsize);
  const auto stat_bytes = [&](int64_t rows) { return stats ? sl.Bytes(rows) : 0; };
  int64_t fit = b.RowsFitting(budget) / vec * vec;
  if (stats) {
    // B's bytes per row, rounded up, plus the row's statistics.
    const int64_t per_row = CeilDiv(b.Bytes(fit), std::max<int64_t>(fit, 1)) + stat_row;
    fit = std::min(fit, (budget - 32) / per_row / vec * vec);
    while (fit >= vec && RowStreamStatsOffset(b, fit) + stat_bytes(fit) > budget) fit -= vec;
  }
  if (fit < vec) return p;
  const int64_t tail = k * itemsize % 16;
  p.period = tail == 0 ? 1 : static_cast<int>(16 / std::gcd<int64_t>(16, tail));
  p.groups = CeilDiv(m, int64_t{p.period} * s.rows) * p.period;
  // As few splits as B's shared memory allows, more where the row groups
  // alone leave warps short of kRowStreamUnitsPerWarp units, but no split
  // shorter than one warp step, and each split whole steps long so that
  // rows of whole vectors meet a split's edge only where k ends.
  const int64_t step_k = int64_t{32} * s.vecs * vec;
  const int64_t min_splits = CeilDiv(k, fit);
  const int64_t max_splits = std::max(min_splits, k / step_k);
  const int64_t warps = int64_t{kRowStreamWarps} * s.min_blocks * sms;
  const int64_t want = CeilDiv(kRowStreamUnitsPerWarp * warps, p.groups);
  const int64_t splits = std::clamp(want, min_splits, max_splits);
  const int64_t fit_steps = fit >= step_k ? fit / step_k * step_k : fit;
  p.k_chunk = std::min(fit_steps, CeilDiv(CeilDiv(k, splits), step_k) * step_k);
  p.splits = CeilDiv(k, p.k_chunk);
  p.workspace_bytes = p.splits > 1 || stats ? p.splits * m * (n + stat_row / acc) * acc : 0;
  if (workspace_limit >= 0 && p.workspace_bytes > workspace_limit) return p;
  p.units = p.groups * p.splits;
  const int64_t chunk = std::min(p.k_chunk, k);
  p.smem_bytes = ring + static_cast<int>(stats ? RowStreamStatsOffset(b, chunk) + stat_bytes(chunk)
                                               : b.Bytes(chunk));
  p.blocks = static_cast<int>(
      std::min<int64_t>(int64_t{s.min_blocks} * sms, CeilDiv(p.units, kRowStreamWarps)));
  p.ok = true;
  return p;
}

}  // namespace tsm2

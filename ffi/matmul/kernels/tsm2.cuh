// TSM2R, the streaming row tile for a large A times a skinny B (any k), for
// row-major storage. (TSM2L's tile, for rows of at most kLMaxK elements, is
// kernels/tsm2l.cuh; both share kernels/tile_io.cuh.)
//
// How the paper's ideas map here (the paper is column-major: one thread per
// row of A, coalesced because a column of A is contiguous):
// - Row-major A is contiguous along k, so a block copies a tile of A (kRows
//   rows x kChunkK columns) into shared memory with 16-byte cp.async copies,
//   and each thread then walks its own rows there, as the paper's
//   thread-per-row algorithm does.
// - Rows of any byte length: each row's chunk is copied as the aligned
//   16-byte vectors that cover it, to a stage row at the same address modulo
//   16 (tiles.h RStageRowBytes), and read element by element where it lands.
//   Rows that are whole vectors are read 16 bytes at a time instead.
// - t1 (the k-extent of the B tile kept on chip) is kChunkK; t2 (columns of B
//   and C per block) is NT, the tile of tiles.h at or above n; t3 (elements
//   of A per thread per step) is kVecPerThread 16-byte vectors. B tiles are
//   read from shared memory by every thread of a warp at the same address,
//   so they are broadcasts.
// - The paper's register prefetching of A and B (currA/nextA) becomes a ring
//   of stages filled by cp.async: loads for the next stages - 1 tiles are in
//   flight while one tile is computed, and they hold no registers. The depth
//   is the plan's, sized from the device's bandwidth per SM (Little's law,
//   tiles.h ChooseStages); B is loaded into registers one stage ahead.
// - TSM2L's thread-count factor (fewer threads, each looping over several
//   row tiles) becomes a persistent grid: `blocks` blocks, each streaming a
//   contiguous run of work units.
// - A work unit is one (row tile, k-chunk) pair. Units are split evenly over
//   the blocks in tile-major order (the "stream-K" idea), so every SM gets the
//   same number of bytes even when m is small and k large. A tile whose
//   chunks are split between blocks writes partial sums to a workspace that
//   Tsm2FixupKernel adds in a fixed order, so results are bitwise
//   reproducible (no float atomics).
// - kKGroups threads split each row's k-chunk; their partial sums are added
//   in shared memory at the end of the tile, in a fixed order.
// - Register blocking (kRpt rows per thread): one B row read from shared
//   memory feeds kRpt rows' FMAs, which is what lets wide B keep up.
// - A finished tile's output (one contiguous run of C when n <= t2) is
//   staged in shared memory and written as 16-byte vectors
//   (tile_io.cuh WriteTile).
#pragma once

#include <cstdint>

#include "ffi/common/kernel_utils.cuh"
#include "ffi/matmul/kernels/tile_io.cuh"
#include "ffi/matmul/tiles.h"

namespace tsm2 {

struct Tsm2Args {
  const void* a;
  const void* b;
  void* c;
  void* partials;       // [blocks][2][kRows][NT] accumulators; see Tsm2FixupKernel
  const void* b_image;  // the tensor-core tile's B stages (kernels/tsm2_mma.cuh)
  int64_t m, k, n;
  int64_t a_batch_stride, b_batch_stride;  // elements; 0 = shared
  int64_t row_tiles, chunks, n_tiles;      // tiles per (batch, n-tile); chunks per tile
  int64_t units;                           // batch * n_tiles * row_tiles * chunks
  int blocks;
  int stages;          // depth of the ring (the plan's)
  int a_row_bytes;     // bytes between two rows of an A stage (tiles.h RStageRowBytes)
  int a_stage_bytes;   // bytes of one A stage
  OutLayout out;       // how a finished tile is written: n_tiles == 1
  OutLayout out_wide;  // n_tiles > 1: whole NT-column rows (written by WriteTileColumns)
  bool out_f32;        // C is f32 although T is bf16/f16
  bool b_trans;        // B is given as n x k (layout NT)
};

// Compile-time shape of one kernel variant (tiles.h RTile gives the ones in
// use): Rows rows per tile, Rpt of them per thread, KGroups threads sharing
// a row's k-chunk, Vpt 16-byte vectors of A per thread per row and chunk;
// VecRows: rows of A are whole 16-byte vectors (read 16 bytes at a time).
template <typename T, int NT, int Rows, int Rpt, int KGroups, int Vpt, bool VecRows>
struct Tsm2Config {
  using Acc = AccType<T>;
  static constexpr int kRows = Rows, kRpt = Rpt, kKGroups = KGroups;
  static constexpr int kVecPerThread = Vpt;
  static constexpr bool kVecRows = VecRows;
  static constexpr int kRowThreads = kRows / kRpt;  // threads along the rows of a tile
  static constexpr int kThreads = kRowThreads * kKGroups;
  static constexpr int kMinBlocks = MinBlocksFor(kRpt, NT, static_cast<int>(sizeof(Acc)));
  static constexpr int kSegK = kVecPerThread * kVec<T>;                    // k per thread per chunk
  static constexpr int kChunkK = kKGroups * kSegK;                         // t1
  static constexpr int kSegBytes = kChunkK * static_cast<int>(sizeof(T));  // of a row per stage
  // Vectors copied per row and stage: one more where rows start mid-vector.
  static constexpr int kVecsPerRow = kSegBytes / 16 + (VecRows ? 0 : 1);
  static constexpr int kCopies = (kRows * kVecsPerRow + kThreads - 1) / kThreads;
  static constexpr int kBStride = BRowStride(static_cast<int>(sizeof(Acc)), NT);
  static constexpr int kBStageElems = kChunkK * kBStride;
  static constexpr int kBStageBytes = kBStageElems * static_cast<int>(sizeof(Acc));
  static constexpr int kBLoadElems = kChunkK * ((NT + 3) / 4 * 4);  // either mapping (BElem)
  static constexpr int kBPerThread = (kBLoadElems + kThreads - 1) / kThreads;
  // f32 and f64 B is its own accumulator type: it is copied into the ring
  // by cp.async with A, holding no registers; 2-byte B is widened on the
  // way, through registers loaded one stage ahead.
  static constexpr bool kBAsync = sizeof(T) == sizeof(Acc);
  static constexpr int kRedStride = NT | 1;  // odd: conflict-free row-per-thread access
  static constexpr int kRedBytes = RReduceBytes(kRows, NT, static_cast<int>(sizeof(T)));
  static_assert(kRows % kRpt == 0, "rows per thread must divide the tile");
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "block size");
  static_assert(kRowThreads % 32 == 0, "a warp must share one k-group (B broadcast)");
  static_assert(kSegBytes % 16 == 0, "chunks are whole vectors");
  static_assert(kBStageBytes % 16 == 0, "B stages keep 16-byte alignment");
};

// Position of one work unit. Decoded once per block with divisions, then
// advanced unit by unit, which is cheap.
struct Cursor {
  int batch, n_tile, row_tile, chunk;
};

__device__ __forceinline__ Cursor DecodeUnit(const Tsm2Args& p, int64_t u) {
  Cursor c;
  c.chunk = static_cast<int>(u % p.chunks);
  int64_t t = u / p.chunks;
  c.row_tile = static_cast<int>(t % p.row_tiles);
  t /= p.row_tiles;
  c.n_tile = static_cast<int>(t % p.n_tiles);
  c.batch = static_cast<int>(t / p.n_tiles);
  return c;
}

__device__ __forceinline__ void Advance(const Tsm2Args& p, Cursor& c) {
  if (++c.chunk < p.chunks) return;
  c.chunk = 0;
  if (++c.row_tile < p.row_tiles) return;
  c.row_tile = 0;
  if (++c.n_tile < p.n_tiles) return;
  c.n_tile = 0;
  ++c.batch;
}

// A[batch, row0, k0] of unit uc, as a byte address.
template <typename T, typename Cfg>
__device__ __forceinline__ const char* TileStart(const Tsm2Args& p, const Cursor& uc) {
  const int64_t elem = uc.batch * p.a_batch_stride +
                       static_cast<int64_t>(uc.row_tile) * Cfg::kRows * p.k +
                       static_cast<int64_t>(uc.chunk) * Cfg::kChunkK;
  return static_cast<const char*>(p.a) + elem * static_cast<int64_t>(sizeof(T));
}

// Stage the A tile of unit uc: row r's chunk goes to stage byte
// r * a_row_bytes + (TileStart mod 16), at the same address modulo 16 as in
// memory, as the 16-byte vectors that cover it. Nothing past the row's end
// (the last chunk) or past m is read; those stage bytes never enter a sum.
template <typename T, typename Cfg>
__device__ __forceinline__ void LoadATile(const Tsm2Args& p, const Cursor& uc, char* stage) {
  constexpr int kVpr = Cfg::kVecsPerRow;
  const char* tile = TileStart<T, Cfg>(p, uc);
  const int64_t row_bytes = p.k * static_cast<int64_t>(sizeof(T));
  const int64_t left = p.k - static_cast<int64_t>(uc.chunk) * Cfg::kChunkK;
  const int valid =
      static_cast<int>(left < Cfg::kChunkK ? left : Cfg::kChunkK) * static_cast<int>(sizeof(T));
  const int64_t rows_left = p.m - static_cast<int64_t>(uc.row_tile) * Cfg::kRows;
  const int rows = static_cast<int>(rows_left < Cfg::kRows ? rows_left : Cfg::kRows);
  const int off0 = static_cast<int>(Low4(tile));
#pragma unroll 1
  for (int i = 0; i < Cfg::kCopies; ++i) {
    const int q = threadIdx.x + i * Cfg::kThreads;
    if (Cfg::kRows * kVpr % Cfg::kThreads != 0 && q >= Cfg::kRows * kVpr) break;
    const int r = q / kVpr;
    const int v = q % kVpr;
    const char* row = tile + r * row_bytes;
    const char* src = row - Low4(row) + v * 16;
    char* dst = stage + ((r * p.a_row_bytes + off0) & ~15) + v * 16;
    const int64_t end = row + valid - src;
    // Vectors wholly past the row's end (k inside this chunk) and rows past m
    // are not copied: the compute stops at k, and rows past m are never stored.
    if (r < rows && end > 0) CpAsyncPart16(dst, src, end >= 16 ? 16 : static_cast<int>(end));
  }
}

// B tiles are small and shared by the whole block; they are read into
// registers one iteration ahead and written to shared memory (as [kk][j],
// row stride kBStride) after the compute, so their latency hides behind it.
template <typename T, typename Cfg, int NT>
__device__ __forceinline__ void LoadBRegs(const Tsm2Args& p, const Cursor& uc,
                                          AccType<T> (&regs)[Cfg::kBPerThread]) {
  const T* b = static_cast<const T*>(p.b) + uc.batch * p.b_batch_stride;
  const int64_t k0 = static_cast<int64_t>(uc.chunk) * Cfg::kChunkK;
  const int64_t n0 = static_cast<int64_t>(uc.n_tile) * NT;
  const int limit = p.b_trans ? Cfg::kBLoadElems : Cfg::kChunkK * NT;
#pragma unroll
  for (int i = 0; i < Cfg::kBPerThread; ++i) {
    const int e = threadIdx.x + i * Cfg::kThreads;
    int kk, j;
    BElem<NT, Cfg::kChunkK>(p.b_trans, e, &kk, &j);
    regs[i] = e < limit ? LoadB(b, p.b_trans, p.k, p.n, k0 + kk, n0 + j) : AccType<T>(-0.0f);
  }
}

template <typename Cfg, int NT>
__device__ __forceinline__ void StoreBRegs(const Tsm2Args& p,
                                           const typename Cfg::Acc (&regs)[Cfg::kBPerThread],
                                           typename Cfg::Acc* stage) {
  const int limit = p.b_trans ? Cfg::kBLoadElems : Cfg::kChunkK * NT;
#pragma unroll
  for (int i = 0; i < Cfg::kBPerThread; ++i) {
    const int e = threadIdx.x + i * Cfg::kThreads;
    int kk, j;
    BElem<NT, Cfg::kChunkK>(p.b_trans, e, &kk, &j);
    if (e < limit && j < NT) stage[kk * Cfg::kBStride + j] = regs[i];
  }
}

// The same B stage copied by cp.async (4- and 8-byte elements, kBAsync):
// elements past the matrix are zero-filled; no sum reads them (the last
// chunk's compute stops at k, and columns past n are never stored).
template <typename T, typename Cfg, int NT>
__device__ __forceinline__ void CopyBStage(const Tsm2Args& p, const Cursor& uc,
                                           typename Cfg::Acc* stage) {
  static_assert(Cfg::kBAsync, "only B of the accumulator type is copied as it is");
  const T* b = static_cast<const T*>(p.b) + uc.batch * p.b_batch_stride;
  const int64_t k0 = static_cast<int64_t>(uc.chunk) * Cfg::kChunkK;
  const int64_t n0 = static_cast<int64_t>(uc.n_tile) * NT;
  const int limit = p.b_trans ? Cfg::kBLoadElems : Cfg::kChunkK * NT;
#pragma unroll 1
  for (int i = 0; i < Cfg::kBPerThread; ++i) {
    const int e = threadIdx.x + i * Cfg::kThreads;
    int kk, j;
    BElem<NT, Cfg::kChunkK>(p.b_trans, e, &kk, &j);
    if (e < limit && j < NT) {
      const int64_t gk = k0 + kk, gj = n0 + j;
      const bool valid = gk < p.k && gj < p.n;
      const T* src = valid ? b + (p.b_trans ? gj * p.k + gk : gk * p.n + gj) : b;
      if constexpr (sizeof(T) == 8) {
        CpAsync8(stage + kk * Cfg::kBStride + j, src, valid);
      } else {
        CpAsync4(stage + kk * Cfg::kBStride + j, src, valid);
      }
    }
  }
}

// A unit's B chunk into ring stage `stage`: by cp.async (kBAsync), or into
// `regs` now and into the stage by StoreBRegs after the compute.
template <typename T, typename Cfg, int NT>
__device__ __forceinline__ void StageB(const Tsm2Args& p, const Cursor& uc,
                                       typename Cfg::Acc* stage,
                                       AccType<T> (&regs)[Cfg::kBAsync ? 1 : Cfg::kBPerThread]) {
  if constexpr (Cfg::kBAsync) {
    CopyBStage<T, Cfg, NT>(p, uc, stage);
  } else {
    LoadBRegs<T, Cfg, NT>(p, uc, regs);
  }
}

// acc[i][j] += A[row_i, kk] * B[kk, j] over this thread's segment of a chunk.
// a0: the stage byte of (the thread's first row, the segment's first k);
// row_step: bytes to its next row.
template <typename T, int NT, typename Cfg>
__device__ __forceinline__ void ComputeSegment(const char* a0, int row_step,
                                               const typename Cfg::Acc* b_seg,
                                               typename Cfg::Acc (&acc)[Cfg::kRpt][NT]) {
  using Acc = typename Cfg::Acc;
  constexpr int kRpt = Cfg::kRpt;
  if constexpr (Cfg::kVecRows) {
#pragma unroll
    for (int v = 0; v < Cfg::kVecPerThread; ++v) {
      Acc av[kRpt][kVec<T>];
#pragma unroll
      for (int i = 0; i < kRpt; ++i) {
        Unpack<T>(*reinterpret_cast<const uint4*>(a0 + i * row_step + v * 16), av[i]);
      }
#pragma unroll
      for (int e = 0; e < kVec<T>; ++e) {
        Acc col[kRpt];
#pragma unroll
        for (int i = 0; i < kRpt; ++i) col[i] = av[i][e];
        FmaRow<NT>(b_seg + (v * kVec<T> + e) * Cfg::kBStride, col, acc);
      }
    }
  } else {
#pragma unroll
    for (int e = 0; e < Cfg::kSegK; ++e) {
      Acc col[kRpt];
#pragma unroll
      for (int i = 0; i < kRpt; ++i) {
        col[i] = LoadElem<T>(a0 + i * row_step + e * static_cast<int>(sizeof(T)));
      }
      FmaRow<NT>(b_seg + e * Cfg::kBStride, col, acc);
    }
  }
}

// The same over the first `count` k of the segment (the chunk that ends at
// k): elements past k are never read, so no padding enters a sum.
template <typename T, int NT, typename Cfg>
__device__ __forceinline__ void ComputeSegmentPart(const char* a0, int row_step,
                                                   const typename Cfg::Acc* b_seg, int count,
                                                   typename Cfg::Acc (&acc)[Cfg::kRpt][NT]) {
  using Acc = typename Cfg::Acc;
#pragma unroll 2
  for (int e = 0; e < count; ++e) {
    Acc col[Cfg::kRpt];
#pragma unroll
    for (int i = 0; i < Cfg::kRpt; ++i) {
      col[i] = LoadElem<T>(a0 + i * row_step + e * static_cast<int>(sizeof(T)));
    }
    FmaRow<NT>(b_seg + e * Cfg::kBStride, col, acc);
  }
}

template <typename T>
__device__ __forceinline__ void StoreOut(const Tsm2Args& p, int64_t idx, AccType<T> v) {
  if (p.out_f32) {
    static_cast<float*>(p.c)[idx] = static_cast<float>(v);
  } else {
    FromAcc(v, static_cast<T*>(p.c) + idx);
  }
}

// A finished tile's output through shared memory `buf`: one run of C
// (n <= t2), or NT-column row segments of it. The first `threads` threads of
// the block call `put(o, offc, rows)`, which stages their rows of the tile
// (PutRow), meet at `sync()`, and copy the staging out as 16-byte vectors.
template <int NT, int kRows, typename Put, typename Sync>
__device__ __forceinline__ void WriteRTile(const Tsm2Args& p, const Cursor& uc, char* buf,
                                           int threads, Put&& put, Sync&& sync) {
  const int64_t row0 = static_cast<int64_t>(uc.row_tile) * kRows;
  const int64_t n0 = static_cast<int64_t>(uc.n_tile) * NT;
  const OutLayout& o = p.n_tiles == 1 ? p.out : p.out_wide;
  const int rows = static_cast<int>(p.m - row0 < kRows ? p.m - row0 : kRows);
  char* c_tile = static_cast<char*>(p.c) + ((uc.batch * p.m + row0) * p.n + n0) * p.out.osize;
  put(o, static_cast<int>(Low4(c_tile)), rows);
  sync();
  if (p.n_tiles == 1) {
    WriteTile(o, buf, c_tile, rows, threads);
  } else {
    const int cols = static_cast<int>(p.n - n0 < NT ? p.n - n0 : NT);
    WriteTileColumns<NT>(o, buf, c_tile, p.n * p.out.osize, rows, cols, threads);
  }
}
// The same by the whole block.
template <int NT, int kRows, typename Put>
__device__ __forceinline__ void WriteRTile(const Tsm2Args& p, const Cursor& uc, char* buf,
                                           Put&& put) {
  WriteRTile<NT, kRows>(p, uc, buf, blockDim.x, put, [] { __syncthreads(); });
}

template <typename T, int NT, typename Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    Tsm2Kernel(const __grid_constant__ Tsm2Args p) {
  using Acc = typename Cfg::Acc;
  constexpr int kRows = Cfg::kRows, kRpt = Cfg::kRpt, kKG = Cfg::kKGroups;
  constexpr int kRowThreads = Cfg::kRowThreads;
  extern __shared__ __align__(16) char smem[];
  const int stages = p.stages;
  char* a_stages = smem;
  Acc* b_stages = reinterpret_cast<Acc*>(smem + stages * p.a_stage_bytes);
  char* red_bytes = smem + stages * (p.a_stage_bytes + Cfg::kBStageBytes);
  Acc* red = reinterpret_cast<Acc*>(red_bytes);

  // This thread owns rows rt + i * kRowThreads (i < kRpt) of each tile, and
  // the g-th k-segment of each chunk. Interleaved rows keep a warp's shared
  // memory reads on consecutive rows.
  const int rt = threadIdx.x % kRowThreads;
  const int g = threadIdx.x / kRowThreads;
  const int64_t u_begin = UnitBegin(blockIdx.x, p.units, p.blocks);
  const int64_t u_end = UnitBegin(blockIdx.x + 1, p.units, p.blocks);
  const int64_t count = u_end - u_begin;

  Cursor load_at = DecodeUnit(p, u_begin);  // next unit to stage
  Cursor comp_at = load_at;                 // unit being computed

  // Prologue: fill stages - 1 stages.
  for (int s = 0; s < stages - 1; ++s) {
    if (s < count) {
      LoadATile<T, Cfg>(p, load_at, a_stages + s * p.a_stage_bytes);
      Acc regs[Cfg::kBAsync ? 1 : Cfg::kBPerThread];
      StageB<T, Cfg, NT>(p, load_at, b_stages + s * Cfg::kBStageElems, regs);
      if constexpr (!Cfg::kBAsync) StoreBRegs<Cfg, NT>(p, regs, b_stages + s * Cfg::kBStageElems);
      Advance(p, load_at);
    }
    CpAsyncCommit();
  }

  // Register blocking (the paper's t3 reuse, over rows): each B value read
  // from shared memory feeds kRpt rows' FMAs.
  Acc acc[kRpt][NT];
  InitSums(acc, p.k);
  const int row_step = kRowThreads * p.a_row_bytes;

  for (int64_t it = 0; it < count; ++it) {
    CpAsyncWaitAtMost(stages - 2);  // this thread's copies for unit `it` have landed
    __syncthreads();                // everyone's have, and stage (it-1) is free again

    const int64_t ip = it + stages - 1;
    const int slot_next = static_cast<int>(ip % stages);
    Acc b_next[Cfg::kBAsync ? 1 : Cfg::kBPerThread];
    if (ip < count) {
      LoadATile<T, Cfg>(p, load_at, a_stages + slot_next * p.a_stage_bytes);
      StageB<T, Cfg, NT>(p, load_at, b_stages + slot_next * Cfg::kBStageElems, b_next);
      Advance(p, load_at);
    }
    CpAsyncCommit();

    const Cursor uc = comp_at;
    Advance(p, comp_at);
    const int slot = static_cast<int>(it % stages);
    const char* a0 = a_stages + slot * p.a_stage_bytes + Low4(TileStart<T, Cfg>(p, uc)) +
                     rt * p.a_row_bytes + g * Cfg::kSegK * static_cast<int>(sizeof(T));
    const Acc* b_seg = b_stages + slot * Cfg::kBStageElems + g * Cfg::kSegK * Cfg::kBStride;
    const int64_t k_left = p.k - static_cast<int64_t>(uc.chunk) * Cfg::kChunkK - g * Cfg::kSegK;
    // Threads whose rows are all past m (the last row tile) have nothing to add.
    const bool active = static_cast<int64_t>(uc.row_tile) * kRows + rt < p.m;
    if (!active) {
    } else if (k_left >= Cfg::kSegK) {
      ComputeSegment<T, NT, Cfg>(a0, row_step, b_seg, acc);
    } else if (k_left > 0) {
      ComputeSegmentPart<T, NT, Cfg>(a0, row_step, b_seg, static_cast<int>(k_left), acc);
    }

    if constexpr (!Cfg::kBAsync) {
      if (ip < count) StoreBRegs<Cfg, NT>(p, b_next, b_stages + slot_next * Cfg::kBStageElems);
    }

    // End of this block's work on the current tile: reduce the k-groups and
    // write C (or a partial sum, when other blocks own part of this tile).
    if (uc.chunk == p.chunks - 1 || it == count - 1) {
      // This block processed the tile's chunk 0 iff it did not start mid-tile.
      const bool begun_here = it >= uc.chunk;
      const bool whole = begun_here && uc.chunk == p.chunks - 1;
      if constexpr (kKG > 1) {
        // Groups 0 .. kKG - 2 add into `red` in turn; the last adds it to its
        // own sums: ((g0 + g1) + ...) + g_last, the same order every run.
#pragma unroll 1
        for (int gg = 0; gg < kKG - 1; ++gg) {
          if (g == gg) {
#pragma unroll
            for (int i = 0; i < kRpt; ++i) {
              Acc* cell = red + (rt + i * kRowThreads) * Cfg::kRedStride;
#pragma unroll
              for (int j = 0; j < NT; ++j) cell[j] = gg == 0 ? acc[i][j] : cell[j] + acc[i][j];
            }
          }
          __syncthreads();
        }
        if (g == kKG - 1) {
#pragma unroll
          for (int i = 0; i < kRpt; ++i) {
            const Acc* cell = red + (rt + i * kRowThreads) * Cfg::kRedStride;
#pragma unroll
            for (int j = 0; j < NT; ++j) acc[i][j] = cell[j] + acc[i][j];
          }
        }
        __syncthreads();  // `red` is read; the output staging below reuses it
      }
      const bool owner = g == kKG - 1;
      if (!whole) {
        // Partial sums: slot 0 is the head of this block's range, slot 1 its tail.
        Acc* part = static_cast<Acc*>(p.partials) +
                    (static_cast<int64_t>(blockIdx.x) * 2 + (begun_here ? 1 : 0)) * kRows * NT;
        if (owner) {
#pragma unroll
          for (int i = 0; i < kRpt; ++i) {
            const int row = rt + i * kRowThreads;
#pragma unroll
            for (int j = 0; j < NT; ++j) part[row * NT + j] = acc[i][j];
          }
        }
      } else {
        WriteRTile<NT, kRows>(p, uc, red_bytes, [&](const OutLayout& o, int offc, int rows) {
          if (!owner) return;
#pragma unroll
          for (int i = 0; i < kRpt; ++i) {
            const int row = rt + i * kRowThreads;
            if (row < rows) PutRow<T, NT>(o, p.out_f32, red_bytes, row, offc, acc[i]);
          }
        });
        // The buffer is next written after the next iteration's __syncthreads.
      }
      InitSums(acc, p.k);
    }
  }
  CpAsyncWait<0>();
}

// Adds the partial sums of tiles whose chunks were split between blocks, in
// block order. Block (f, y) handles part y of the boundary at UnitBegin(f + 1)
// if that is the first boundary inside its tile. A thread takes kFixupPer
// outputs, so that their loads of one block's partials are in flight
// together: a thread per output walking the blocks one load at a time took
// 53 us for a 128 x 56 tile split over 11 blocks (R f16 1454 x 1371 x 51,
// Nsight Compute), most of the product's time.
constexpr int kFixupThreads = 256, kFixupPer = 4;
constexpr int FixupParts(int rows, int nt) {
  return (rows * nt + kFixupThreads * kFixupPer - 1) / (kFixupThreads * kFixupPer);
}

template <typename T, int NT, int kRows>
__global__ void __launch_bounds__(kFixupThreads)
    Tsm2FixupKernel(const __grid_constant__ Tsm2Args p) {
  using Acc = AccType<T>;
  constexpr int kOut = kRows * NT;
  const int64_t b = blockIdx.x + 1;  // blocks b-1 and b meet inside a tile
  const int64_t boundary = UnitBegin(b, p.units, p.blocks);
  if (boundary % p.chunks == 0) return;
  const int64_t tile = boundary / p.chunks;
  const int64_t tile_begin = tile * p.chunks;
  if (UnitBegin(b - 1, p.units, p.blocks) > tile_begin) return;  // not the first boundary
  const int64_t tile_last = tile_begin + p.chunks - 1;
  int64_t b_hi = b;
  while (b_hi + 1 < p.blocks && UnitBegin(b_hi + 1, p.units, p.blocks) <= tile_last) ++b_hi;

  const int64_t row_tile = tile % p.row_tiles;
  const int64_t n_tile = (tile / p.row_tiles) % p.n_tiles;
  const int64_t batch = tile / (p.row_tiles * p.n_tiles);
  const Acc* part = static_cast<const Acc*>(p.partials);
  const int o0 = blockIdx.y * (kFixupThreads * kFixupPer) + threadIdx.x;
  Acc sum[kFixupPer];
  // Block b-1 began the tile (its tail slot); the others continue it (head slot).
  const Acc* tail = part + ((b - 1) * 2 + 1) * kOut;
#pragma unroll
  for (int i = 0; i < kFixupPer; ++i) {
    const int o = o0 + i * kFixupThreads;
    sum[i] = o < kOut ? tail[o] : Acc(0);
  }
  for (int64_t bb = b; bb <= b_hi; ++bb) {
    const Acc* head = part + bb * 2 * kOut;
#pragma unroll
    for (int i = 0; i < kFixupPer; ++i) {
      const int o = o0 + i * kFixupThreads;
      if (o < kOut) sum[i] += head[o];
    }
  }
#pragma unroll
  for (int i = 0; i < kFixupPer; ++i) {
    const int o = o0 + i * kFixupThreads;
    const int64_t row = row_tile * kRows + o / NT;
    const int64_t col = n_tile * NT + o % NT;
    if (o < kOut && row < p.m && col < p.n) {
      StoreOut<T>(p, (batch * p.m + row) * p.n + col, sum[i]);
    }
  }
}

}  // namespace tsm2

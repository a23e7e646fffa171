// TSM2L, the streaming tile for a tall A with at most kLMaxK columns times a
// small B, for row-major storage.
//
// With k and n small, B fits on chip whole and the product is a pure stream
// over A and C. The paper's two optimizations, and how they map here:
// - B kept on chip for the whole run: it is loaded into shared memory once
//   (again only where the batch gives each product its own B), as
//   accumulators, and read as broadcasts.
// - The thread-count factor (fewer threads, each computing several rows):
//   a persistent grid whose blocks stream contiguous runs of row tiles, each
//   thread computing Rpt whole rows of a tile, so a tile's rows are one
//   contiguous span of A and its output one contiguous span of C.
// - Any row length: the span is copied as the aligned 16-byte vectors that
//   cover it (the first and last shared with the neighbouring tiles, whose
//   bytes are not read as elements), and each thread reads its rows' elements
//   where they land. Rows that are whole 16-byte vectors are copied row by
//   row to an odd stride of vectors instead, and read 16 bytes at a time.
// - Prefetching: a ring of stages filled by cp.async, as deep as the plan
//   derives from the device's bandwidth per SM (tiles.h ChooseStages).
// - The tile's output is staged in shared memory and written as 16-byte
//   vectors (tile_io.cuh WriteTile): rows of n outputs are rarely whole
//   vectors, and a store per output per thread would write each line in
//   scattered pieces.
#pragma once

#include <cstdint>

#include "ffi/common/kernel_utils.cuh"
#include "ffi/matmul/kernels/tile_io.cuh"
#include "ffi/matmul/tiles.h"

namespace tsm2 {

struct Tsm2LArgs {
  const void* a;
  const void* b;
  void* c;
  int64_t m, k, n;                         // k <= kLMaxK
  int64_t a_batch_stride, b_batch_stride;  // elements; 0 = shared
  int64_t row_tiles, n_tiles, units;       // units = batch * n_tiles * row_tiles
  int blocks;
  int stages;          // depth of the ring (the plan's)
  int rows;            // rows per tile: threads per block x Rpt
  int a_stage_bytes;   // bytes of one A stage
  int b_bytes;         // resident B: k rows of kBStride accumulators
  int out_bytes;       // the output staging buffer (tiles.h OutStageBytes)
  int a_row_units;     // vec_rows: 16-byte units between rows of a stage (odd)
  int a_row_vecs;      // vec_rows: k * itemsize / 16
  Div32 a_vdiv;        // vec_rows: division by a_row_vecs
  OutLayout out;       // how a finished tile is written: n_tiles == 1
  OutLayout out_wide;  // n_tiles > 1: whole NT-column rows (written by WriteTileColumns)
  bool out_f32;        // C is f32 although T is bf16/f16
  bool b_trans;        // B is given as n x k (layout NT)
};

// Rpt rows per thread; VecRows: rows are whole 16-byte vectors and A is
// 16-byte aligned.
template <typename T, int NT, int Rpt, bool VecRows>
struct Tsm2LConfig {
  using Acc = AccType<T>;
  static constexpr int kRpt = Rpt;
  static constexpr bool kVecRows = VecRows;
  static constexpr int kMaxThreads = kTileThreads;
  // Wider tiles take registers rather than spill; the plan weighs the warps
  // per SM that leaves when it chooses the threads per block.
  static constexpr int kMinBlocks = MinBlocksFor(kRpt, NT, static_cast<int>(sizeof(Acc)));
  static constexpr int kBStride = BRowStride(static_cast<int>(sizeof(Acc)), NT);
};

struct LCursor {
  int batch, n_tile, row_tile;
};

__device__ __forceinline__ LCursor DecodeLUnit(const Tsm2LArgs& p, int64_t u) {
  LCursor c;
  c.row_tile = static_cast<int>(u % p.row_tiles);
  const int64_t t = u / p.row_tiles;
  c.n_tile = static_cast<int>(t % p.n_tiles);
  c.batch = static_cast<int>(t / p.n_tiles);
  return c;
}

__device__ __forceinline__ void AdvanceL(const Tsm2LArgs& p, LCursor& c) {
  if (++c.row_tile < p.row_tiles) return;
  c.row_tile = 0;
  if (++c.n_tile < p.n_tiles) return;
  c.n_tile = 0;
  ++c.batch;
}

// The first byte of a tile's span of A, and its rows (the last tile of a
// batch may have fewer).
template <typename T>
__device__ __forceinline__ const char* LSpan(const Tsm2LArgs& p, const LCursor& uc) {
  const int64_t elem =
      uc.batch * p.a_batch_stride + static_cast<int64_t>(uc.row_tile) * p.rows * p.k;
  return static_cast<const char*>(p.a) + elem * static_cast<int64_t>(sizeof(T));
}
__device__ __forceinline__ int LRows(const Tsm2LArgs& p, const LCursor& uc) {
  const int64_t left = p.m - static_cast<int64_t>(uc.row_tile) * p.rows;
  return static_cast<int>(left < p.rows ? left : p.rows);
}

// Stage a tile's span of A: row by row to the odd stride (VecRows), or as
// the vectors that cover it, at the same address modulo 16 as in memory.
// Past its end the last vector is zero-filled, and nothing is read.
template <typename T, bool VecRows>
__device__ __forceinline__ void LoadLTile(const Tsm2LArgs& p, const LCursor& uc, char* stage) {
  const char* span = LSpan<T>(p, uc);
  const int bytes = LRows(p, uc) * static_cast<int>(p.k) * static_cast<int>(sizeof(T));
  if constexpr (VecRows) {
    const int total = bytes / 16;
    for (int q = threadIdx.x; q < total; q += blockDim.x) {
      const int r = static_cast<int>(Quot(static_cast<uint32_t>(q), p.a_vdiv));
      const int v = q - r * p.a_row_vecs;
      CpAsyncPart16(stage + (r * p.a_row_units + v) * 16, span + q * 16, 16);
    }
  } else {
    const int off0 = static_cast<int>(Low4(span));
    const char* v0 = span - off0;
    const int vecs = (off0 + bytes + 15) / 16;
    for (int q = threadIdx.x; q < vecs; q += blockDim.x) {
      const int left = off0 + bytes - q * 16;
      CpAsyncPart16(stage + q * 16, v0 + q * 16, left < 16 ? left : 16);
    }
  }
}

// B[:, n_tile] of this unit's batch into shared memory as [kk][j] (row
// stride kBStride), -0 past n.
template <typename T, typename Cfg, int NT>
__device__ __forceinline__ void LoadBResident(const Tsm2LArgs& p, const LCursor& uc,
                                              typename Cfg::Acc* bres) {
  const T* b = static_cast<const T*>(p.b) + uc.batch * p.b_batch_stride;
  const int64_t n0 = static_cast<int64_t>(uc.n_tile) * NT;
  const int k = static_cast<int>(p.k);
  for (int e = threadIdx.x; e < k * NT; e += blockDim.x) {
    // Consecutive threads along B's contiguous dimension.
    const int kk = p.b_trans ? e % k : e / NT;
    const int j = p.b_trans ? e / k : e % NT;
    bres[kk * Cfg::kBStride + j] = LoadB(b, p.b_trans, p.k, p.n, kk, n0 + j);
  }
}

template <typename T, int NT, typename Cfg>
__global__ void __launch_bounds__(Cfg::kMaxThreads, Cfg::kMinBlocks)
    Tsm2LKernel(const __grid_constant__ Tsm2LArgs p) {
  using Acc = typename Cfg::Acc;
  constexpr int kRpt = Cfg::kRpt, kV = kVec<T>;
  constexpr int kSize = static_cast<int>(sizeof(T));
  extern __shared__ __align__(16) char smem[];
  Acc* bres = reinterpret_cast<Acc*>(smem);
  char* out_buf = smem + p.b_bytes;
  char* a_stages = out_buf + p.out_bytes;
  const int stages = p.stages;

  const int64_t u_begin = UnitBegin(blockIdx.x, p.units, p.blocks);
  const int64_t u_end = UnitBegin(blockIdx.x + 1, p.units, p.blocks);
  const int64_t count = u_end - u_begin;
  LCursor load_at = DecodeLUnit(p, u_begin);
  LCursor comp_at = load_at;

  for (int s = 0; s < stages - 1; ++s) {
    if (s < count) {
      LoadLTile<T, Cfg::kVecRows>(p, load_at, a_stages + s * p.a_stage_bytes);
      AdvanceL(p, load_at);
    }
    CpAsyncCommit();
  }

  // This thread's rows of every tile: threadIdx.x + i * blockDim.x.
  const int k = static_cast<int>(p.k);
  const int row_bytes = k * kSize;
  int64_t b_key = -1;  // the (batch, n-tile) whose B is in shared memory
  Acc acc[kRpt][NT];
  InitSums(acc, p.k);

  for (int64_t it = 0; it < count; ++it) {
    CpAsyncWaitAtMost(stages - 2);
    __syncthreads();  // stage `it` has landed; the previous tile's buffers are free

    const int64_t ip = it + stages - 1;
    if (ip < count) {
      LoadLTile<T, Cfg::kVecRows>(p, load_at, a_stages + (ip % stages) * p.a_stage_bytes);
      AdvanceL(p, load_at);
    }
    CpAsyncCommit();

    const LCursor uc = comp_at;
    AdvanceL(p, comp_at);
    const int64_t key = (p.b_batch_stride != 0 ? uc.batch : 0) * p.n_tiles + uc.n_tile;
    if (key != b_key) {  // the same for every thread of the block
      LoadBResident<T, Cfg, NT>(p, uc, bres);
      __syncthreads();
      b_key = key;
    }

    const char* stage = a_stages + (it % stages) * p.a_stage_bytes;
    const int rows = LRows(p, uc);
    if (static_cast<int>(threadIdx.x) >= rows) {
      // All this thread's rows are past m (the last tile): nothing to add.
    } else if constexpr (Cfg::kVecRows) {
      const char* row[kRpt];
#pragma unroll
      for (int i = 0; i < kRpt; ++i) {
        row[i] = stage + (threadIdx.x + i * blockDim.x) * p.a_row_units * 16;
      }
      for (int v = 0; v < p.a_row_vecs; ++v) {
        Acc av[kRpt][kV];
#pragma unroll
        for (int i = 0; i < kRpt; ++i) {
          Unpack<T>(*reinterpret_cast<const uint4*>(row[i] + v * 16), av[i]);
        }
#pragma unroll
        for (int e = 0; e < kV; ++e) {
          Acc col[kRpt];
#pragma unroll
          for (int i = 0; i < kRpt; ++i) col[i] = av[i][e];
          FmaRow<NT>(bres + (v * kV + e) * Cfg::kBStride, col, acc);
        }
      }
    } else {
      const char* row[kRpt];
      const char* base = stage + Low4(LSpan<T>(p, uc));
#pragma unroll
      for (int i = 0; i < kRpt; ++i) row[i] = base + (threadIdx.x + i * blockDim.x) * row_bytes;
#pragma unroll 1
      for (int c = 0; c < k; ++c) {
        Acc col[kRpt];
#pragma unroll
        for (int i = 0; i < kRpt; ++i) col[i] = LoadElem<T>(row[i] + c * kSize);
        FmaRow<NT>(bres + c * Cfg::kBStride, col, acc);
      }
    }

    // The tile's output through shared memory: one run of C (n <= t2), or
    // NT-column row segments of it (n > 64: beyond TSM2L's region, but a
    // forced call must be right).
    const int64_t row0 = static_cast<int64_t>(uc.row_tile) * p.rows;
    const int64_t n0 = static_cast<int64_t>(uc.n_tile) * NT;
    const OutLayout& o = p.n_tiles == 1 ? p.out : p.out_wide;
    char* c_tile = static_cast<char*>(p.c) + ((uc.batch * p.m + row0) * p.n + n0) * p.out.osize;
    const int offc = static_cast<int>(Low4(c_tile));
#pragma unroll
    for (int i = 0; i < kRpt; ++i) {
      const int r = threadIdx.x + i * blockDim.x;
      if (r < rows) PutRow<T, NT>(o, p.out_f32, out_buf, r, offc, acc[i]);
    }
    __syncthreads();
    if (p.n_tiles == 1) {
      WriteTile(o, out_buf, c_tile, rows, blockDim.x);
    } else {
      const int cols = static_cast<int>(p.n - n0 < NT ? p.n - n0 : NT);
      WriteTileColumns<NT>(o, out_buf, c_tile, p.n * p.out.osize, rows, cols, blockDim.x);
    }
    // The buffer is next written after the next iteration's __syncthreads.
    InitSums(acc, p.k);
  }
  CpAsyncWait<0>();
}

}  // namespace tsm2

// The streaming kernel behind both TSM2R and TSM2L, for row-major storage.
//
// How the paper's ideas map here (the paper is column-major: one thread per
// row of A, coalesced because a column of A is contiguous):
// - Row-major A is contiguous along k, so a block copies a tile of A (kRows
//   rows x kChunkK columns) into shared memory with coalesced 16-byte
//   cp.async copies, and each thread then walks its own row there, as the
//   paper's thread-per-row algorithm does.
// - t1 (the k-extent of the B tile kept on chip) is kChunkK; t2 (columns of B
//   and C per block) is NT; t3 (elements of A per thread per step) is
//   kVecPerThread 16-byte vectors. B tiles are read from shared memory by
//   every thread of a warp at the same address, so they are broadcasts.
// - The paper's register prefetching of A and B (currA/nextA) becomes a ring
//   of kStages shared-memory stages filled by cp.async: loads for the next
//   kStages-1 tiles are in flight while one tile is computed, and they hold no
//   registers, so occupancy stays high.
// - TSM2L's thread-count factor (fewer threads, each looping over several
//   row tiles) becomes a persistent grid: `blocks` blocks, each streaming a
//   contiguous run of work units.
// - A work unit is one (row tile, k-chunk) pair. Units are split evenly over
//   the blocks in tile-major order (the "stream-K" idea), so every SM gets the
//   same number of bytes even when m is small and k large: the paper's
//   TSM2R with m = 20480 would otherwise leave a long tail. A tile whose
//   chunks are split between blocks writes partial sums to a workspace that
//   Tsm2FixupKernel adds in a fixed order, so results are bitwise
//   reproducible (no float atomics).
// - kKGroups > 1 splits each row's k-chunk among several threads (TSM2R,
//   where k is long); their partial sums are added in shared memory at the
//   end of the tile, also in a fixed order.
// - Register blocking (kRpt rows per thread): one B row read from shared
//   memory feeds kRpt rows' FMAs, which is what lets wide B (n = 16) and the
//   half types keep up with the memory system.
// - TSM2L's two optimizations (a whole row per thread; B kept on chip for
//   the whole run) appear as kKGroups == 1 with kVecPerThread covering k, and
//   its tile's output, one contiguous block of C, is written through shared
//   memory with coalesced stores.
#pragma once

#include <cstdint>

#include "ffi/common/kernel_utils.cuh"
#include "ffi/matmul/tiles.h"

namespace tsm2 {

struct Tsm2Args {
  const void* a;
  const void* b;
  void* c;
  void* partials;  // [blocks][2][kRows][NT] accumulators; see Tsm2FixupKernel
  int64_t m, k, n;
  int64_t a_batch_stride, b_batch_stride;  // elements; 0 = shared
  int64_t row_tiles, chunks, n_tiles;      // tiles per (batch, n-tile); chunks per tile
  int64_t units;                           // batch * n_tiles * row_tiles * chunks
  int blocks;
  bool out_f32;   // C is f32 although T is bf16/f16
  bool a_vec_ok;  // rows of A are 16-byte aligned, so cp.async can be used
  bool c_dense;   // n == NT and C is 16-byte aligned: a tile's output is one contiguous run
  bool b_trans;   // B is given as n x k (layout NT)
};

// Which block owns unit u: the largest b with UnitBegin(b) <= u.
__host__ __device__ inline int64_t UnitBegin(int64_t b, int64_t units, int64_t blocks) {
  return b * units / blocks;
}

// Compile-time shape of one kernel variant (see tiles.h for the ones
// in use): Rows rows per tile, Rpt of them per thread, KGroups threads
// sharing a row's k-chunk, Vpt 16-byte vectors of A per thread per chunk,
// Stages cp.async ring stages.
template <typename T, int NT, int Rows, int Rpt, int KGroups, int Vpt, int Stages>
struct Tsm2Config {
  using Acc = AccType<T>;
  static constexpr int kRows = Rows, kRpt = Rpt, kKGroups = KGroups;
  static constexpr int kVecPerThread = Vpt, kStages = Stages;
  static constexpr int kRowThreads = kRows / kRpt;  // threads along the rows of a tile
  static constexpr int kThreads = kRowThreads * kKGroups;
  // Blocks per SM the compiler must allow: caps registers at 128 per thread,
  // which keeps 16 warps per SM to hide the ring's latency. Wide tiles
  // (NT >= 32) would spill under that cap, so they get the registers instead.
  static constexpr int kMinBlocks = NT < 32 && kThreads <= 512 ? 512 / kThreads : 1;
  static constexpr int kSegK = kVecPerThread * kVec<T>;  // k per thread per chunk
  static constexpr int kChunkK = kKGroups * kSegK;       // t1
  static constexpr int kVecsPerRow = kChunkK / kVec<T>;
  // Shared-memory rows of A are padded to an odd number of 16-byte units so
  // that the 8 threads of a quarter-warp reading 8 rows hit 8 distinct bank
  // groups.
  static constexpr int kRowBytes = kChunkK * static_cast<int>(sizeof(T));
  static constexpr int kRowStride = (kRowBytes / 16) % 2 ? kRowBytes : kRowBytes + 16;
  static constexpr int kAStageBytes = kRows * kRowStride;
  static constexpr int kBStageElems = kChunkK * NT;
  static constexpr int kBPerThread = (kBStageElems + kThreads - 1) / kThreads;
  // The k-groups are reduced through shared memory kSlice columns at a time,
  // which bounds that buffer; with one k-group there is nothing to reduce.
  static constexpr int kSliceCap = 4096 / (kKGroups * kRows) > 0 ? 4096 / (kKGroups * kRows) : 1;
  static constexpr int kSlice = NT < kSliceCap ? NT : kSliceCap;
  static constexpr int kRedStride = kSlice + 1;  // odd: conflict-free scalar access
  // With one k-group the same space stages a tile's output (as Acc, the
  // widest output type) so that it is written with coalesced 16-byte stores.
  static constexpr int kOutStride = NT * static_cast<int>(sizeof(Acc)) % 32 == 0
                                        ? NT * static_cast<int>(sizeof(Acc)) + 16
                                        : NT * static_cast<int>(sizeof(Acc));  // bytes
  static constexpr int kRedBytes =
      kKGroups > 1 ? kKGroups * kRows * kRedStride * static_cast<int>(sizeof(Acc))
                   : kRows * kOutStride;
  static constexpr int kSmemBytes =
      kStages * kAStageBytes + kStages * kBStageElems * static_cast<int>(sizeof(Acc)) + kRedBytes;
  static_assert(kRows % kRpt == 0, "rows per thread must divide the tile");
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "block size");
  static_assert(kRowThreads % 32 == 0, "a warp must share one k-group (B broadcast)");
  static_assert(NT % kSlice == 0, "reduction slices must tile NT");
  static_assert(kStages >= 2, "need at least double buffering");
  static_assert(kSmemBytes == Footprint(TileConfig{Rows, Rpt, KGroups, Vpt, Stages},
                                        static_cast<int>(sizeof(T)), NT)
                                  .smem_bytes,
                "tiles.h's Footprint (the Python model's occupancy) must match");
  static_assert(kSmemBytes <= 227 * 1024, "tile does not fit in an SM's shared memory");
};

// Position of one work unit. Decoded once per block with divisions, then
// advanced unit by unit, which is cheap.
struct Cursor {
  int64_t batch, n_tile, row_tile, chunk;
};

__device__ __forceinline__ Cursor DecodeUnit(const Tsm2Args& p, int64_t u) {
  Cursor c;
  c.chunk = u % p.chunks;
  int64_t t = u / p.chunks;
  c.row_tile = t % p.row_tiles;
  t /= p.row_tiles;
  c.n_tile = t % p.n_tiles;
  c.batch = t / p.n_tiles;
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

// Stage the A tile of unit u into shared memory (asynchronously when rows are
// 16-byte aligned; element by element otherwise). Out-of-range rows and
// columns are zero-filled, so they contribute nothing.
template <typename T, typename Cfg>
__device__ __forceinline__ void LoadATile(const Tsm2Args& p, const Cursor& uc, char* stage) {
  const T* a = static_cast<const T*>(p.a) + uc.batch * p.a_batch_stride;
  const int64_t row0 = uc.row_tile * Cfg::kRows;
  const int64_t k0 = uc.chunk * Cfg::kChunkK;
  if (p.a_vec_ok) {
#pragma unroll
    for (int i = 0; i < Cfg::kRows * Cfg::kVecsPerRow / Cfg::kThreads; ++i) {
      const int q = threadIdx.x + i * Cfg::kThreads;
      const int r = q / Cfg::kVecsPerRow;
      const int v = q % Cfg::kVecsPerRow;
      const int64_t gk = k0 + static_cast<int64_t>(v) * kVec<T>;
      const bool valid = row0 + r < p.m && gk < p.k;
      const T* src = valid ? a + (row0 + r) * p.k + gk : a;
      CpAsync16(stage + r * Cfg::kRowStride + v * 16, src, valid);
    }
  } else {
    for (int q = threadIdx.x; q < Cfg::kRows * Cfg::kChunkK; q += Cfg::kThreads) {
      const int r = q / Cfg::kChunkK;
      const int kk = q % Cfg::kChunkK;
      const int64_t gk = k0 + kk;
      T val = T(0.0f);
      if (row0 + r < p.m && gk < p.k) val = a[(row0 + r) * p.k + gk];
      *reinterpret_cast<T*>(stage + r * Cfg::kRowStride + kk * sizeof(T)) = val;
    }
  }
}

// Element e of a B stage, as (row kk of the chunk, column j of the n-tile).
// For B given as n x k (NT) consecutive threads walk along k, which is
// contiguous there, so the loads stay coalesced in either layout.
template <typename Cfg, int NT>
__device__ __forceinline__ void BStageElem(const Tsm2Args& p, int e, int* kk, int* j) {
  if (p.b_trans) {
    *kk = e % Cfg::kChunkK;
    *j = e / Cfg::kChunkK;
  } else {
    *kk = e / NT;
    *j = e % NT;
  }
}

// B tiles are small and shared by the whole block; they are read into
// registers one iteration ahead and written to shared memory (as [kk][j])
// after the compute, so their latency hides behind it.
template <typename T, typename Cfg, int NT>
__device__ __forceinline__ void LoadBRegs(const Tsm2Args& p, const Cursor& uc,
                                          AccType<T> (&regs)[Cfg::kBPerThread]) {
  const T* b = static_cast<const T*>(p.b) + uc.batch * p.b_batch_stride;
  const int64_t k0 = uc.chunk * Cfg::kChunkK;
  const int64_t n0 = uc.n_tile * NT;
  const int64_t ks = p.b_trans ? 1 : p.n, ns = p.b_trans ? p.k : 1;  // strides of (kk, j)
#pragma unroll
  for (int i = 0; i < Cfg::kBPerThread; ++i) {
    const int e = threadIdx.x + i * Cfg::kThreads;
    int kk, j;
    BStageElem<Cfg, NT>(p, e, &kk, &j);
    regs[i] = -0.0f;  // past k, A's +0 times -0 adds -0: a sum's zero keeps its sign
    if (e < Cfg::kBStageElems && k0 + kk < p.k && n0 + j < p.n) {
      regs[i] = ToAcc(__ldg(b + (k0 + kk) * ks + (n0 + j) * ns));
    }
  }
}

template <typename Cfg, int NT>
__device__ __forceinline__ void StoreBRegs(const Tsm2Args& p,
                                           const typename Cfg::Acc (&regs)[Cfg::kBPerThread],
                                           typename Cfg::Acc* stage) {
#pragma unroll
  for (int i = 0; i < Cfg::kBPerThread; ++i) {
    const int e = threadIdx.x + i * Cfg::kThreads;
    int kk, j;
    BStageElem<Cfg, NT>(p, e, &kk, &j);
    if (e < Cfg::kBStageElems) stage[kk * NT + j] = regs[i];
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

// C[batch, row, n0 : n0 + NT] = v, clipped to the matrix.
template <typename T, int NT>
__device__ __forceinline__ void StoreRow(const Tsm2Args& p, int64_t batch, int64_t row, int64_t n0,
                                         const AccType<T> (&v)[NT]) {
  if (row >= p.m) return;
  const int64_t base = (batch * p.m + row) * p.n + n0;
  if (n0 + NT <= p.n) {
    const bool done = p.out_f32 ? StoreRowVec<float, NT>(static_cast<float*>(p.c) + base, v)
                                : StoreRowVec<T, NT>(static_cast<T*>(p.c) + base, v);
    if (done) return;
  }
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    if (n0 + j < p.n) StoreOut<T>(p, base + j, v[j]);
  }
}

// Writes a whole tile's output when it is one contiguous run of C (n == NT):
// each thread puts its rows in shared memory, then the block copies the run
// out with consecutive 16-byte stores, so every L2 line is written whole
// (row-per-thread stores would write each line in scattered pieces).
template <typename T, int NT, typename Cfg>
__device__ __forceinline__ void StoreTileCoalesced(const Tsm2Args& p, int64_t batch, int64_t row0,
                                                   const AccType<T> (&acc)[Cfg::kRpt][NT],
                                                   char* buf, int rt) {
  const int osize = p.out_f32 ? 4 : static_cast<int>(sizeof(T));
#pragma unroll
  for (int i = 0; i < Cfg::kRpt; ++i) {
    char* dst = buf + (rt + i * Cfg::kRowThreads) * Cfg::kOutStride;
    if (p.out_f32) {
      StoreRowVec<float, NT>(reinterpret_cast<float*>(dst), acc[i]);
    } else {
      StoreRowVec<T, NT>(reinterpret_cast<T*>(dst), acc[i]);
    }
  }
  __syncthreads();
  const int64_t rows = p.m - row0 < Cfg::kRows ? p.m - row0 : Cfg::kRows;
  const int vecs_per_row = NT * osize / 16;
  char* c = static_cast<char*>(p.c) + ((batch * p.m + row0) * NT) * osize;
  for (int q = threadIdx.x; q < rows * vecs_per_row; q += Cfg::kThreads) {
    const int r = q / vecs_per_row;
    const int v = q % vecs_per_row;
    *reinterpret_cast<uint4*>(c + static_cast<int64_t>(q) * 16) =
        *reinterpret_cast<const uint4*>(buf + r * Cfg::kOutStride + v * 16);
  }
  // The buffer is next written after the next iteration's __syncthreads.
}

template <typename T, int NT, typename Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    Tsm2Kernel(const __grid_constant__ Tsm2Args p) {
  using Acc = typename Cfg::Acc;
  constexpr int kRows = Cfg::kRows, kRpt = Cfg::kRpt, kStages = Cfg::kStages;
  extern __shared__ __align__(16) char smem[];
  char* a_stages = smem;
  Acc* b_stages = reinterpret_cast<Acc*>(smem + kStages * Cfg::kAStageBytes);
  Acc* red = b_stages + kStages * Cfg::kBStageElems;

  // This thread owns rows rt + i * kRowThreads (i < kRpt) of each tile, and
  // the g-th k-segment of each chunk. Interleaved rows keep a warp's shared
  // memory reads on consecutive (conflict-free) rows.
  const int rt = threadIdx.x % Cfg::kRowThreads;
  const int g = threadIdx.x / Cfg::kRowThreads;
  const int64_t u_begin = UnitBegin(blockIdx.x, p.units, p.blocks);
  const int64_t u_end = UnitBegin(blockIdx.x + 1, p.units, p.blocks);
  const int64_t count = u_end - u_begin;

  Cursor load_at = DecodeUnit(p, u_begin);  // next unit to stage
  Cursor comp_at = load_at;                 // unit being computed

  // Prologue: fill kStages - 1 stages.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < count) {
      LoadATile<T, Cfg>(p, load_at, a_stages + s * Cfg::kAStageBytes);
      Acc regs[Cfg::kBPerThread];
      LoadBRegs<T, Cfg, NT>(p, load_at, regs);
      StoreBRegs<Cfg, NT>(p, regs, b_stages + s * Cfg::kBStageElems);
      Advance(p, load_at);
    }
    CpAsyncCommit();
  }

  // Register blocking (the paper's t3 reuse, over rows): each B value read
  // from shared memory feeds kRpt rows' FMAs.
  Acc acc[kRpt][NT];
  InitSums(acc, p.k);

  for (int64_t it = 0; it < count; ++it) {
    CpAsyncWait<kStages - 2>();  // this thread's copies for unit `it` have landed
    __syncthreads();             // everyone's have, and stage (it-1) is free again

    const int64_t ip = it + kStages - 1;
    const int slot_next = static_cast<int>(ip % kStages);
    Acc b_next[Cfg::kBPerThread];
    if (ip < count) {
      LoadATile<T, Cfg>(p, load_at, a_stages + slot_next * Cfg::kAStageBytes);
      LoadBRegs<T, Cfg, NT>(p, load_at, b_next);
      Advance(p, load_at);
    }
    CpAsyncCommit();

    // acc[i][j] += A[row_i, kk] * B[kk, j] over this thread's part of the chunk.
    const int slot = static_cast<int>(it % kStages);
    const char* a_tile = a_stages + slot * Cfg::kAStageBytes + rt * Cfg::kRowStride +
                         g * Cfg::kSegK * static_cast<int>(sizeof(T));
    const Acc* b_seg = b_stages + slot * Cfg::kBStageElems + g * Cfg::kSegK * NT;
#pragma unroll
    for (int v = 0; v < Cfg::kVecPerThread; ++v) {
      Acc av[kRpt][kVec<T>];
#pragma unroll
      for (int i = 0; i < kRpt; ++i) {
        Unpack<T>(*reinterpret_cast<const uint4*>(a_tile + i * Cfg::kRowThreads * Cfg::kRowStride +
                                                  v * 16),
                  av[i]);
      }
#pragma unroll
      for (int e = 0; e < kVec<T>; ++e) {
        Acc bv[NT];
        LoadSmemRow<NT>(b_seg + (v * kVec<T> + e) * NT, bv);
#pragma unroll
        for (int i = 0; i < kRpt; ++i) {
#pragma unroll
          for (int j = 0; j < NT; ++j) acc[i][j] = fma(av[i][e], bv[j], acc[i][j]);
        }
      }
    }

    if (ip < count) StoreBRegs<Cfg, NT>(p, b_next, b_stages + slot_next * Cfg::kBStageElems);

    // End of this block's work on the current tile: reduce the k-groups and
    // write C (or a partial sum, when other blocks own part of this tile).
    const Cursor uc = comp_at;
    Advance(p, comp_at);
    if (uc.chunk == p.chunks - 1 || it == count - 1) {
      // This block processed the tile's chunk 0 iff it did not start mid-tile.
      const bool begun_here = it >= uc.chunk;
      const bool whole = begun_here && uc.chunk == p.chunks - 1;
      const int64_t row0 = uc.row_tile * kRows;
      const int64_t n0 = uc.n_tile * NT;
      // Partial sums: slot 0 is the head of this block's range, slot 1 its tail.
      Acc* part = static_cast<Acc*>(p.partials) +
                  (static_cast<int64_t>(blockIdx.x) * 2 + (begun_here ? 1 : 0)) * kRows * NT;
      if constexpr (Cfg::kKGroups == 1) {
        if (whole && p.c_dense) {
          StoreTileCoalesced<T, NT, Cfg>(p, uc.batch, row0, acc, reinterpret_cast<char*>(red), rt);
        } else {
#pragma unroll
          for (int i = 0; i < kRpt; ++i) {
            const int row = rt + i * Cfg::kRowThreads;
            if (whole) {
              StoreRow<T, NT>(p, uc.batch, row0 + row, n0, acc[i]);
            } else {
#pragma unroll
              for (int j = 0; j < NT; ++j) part[row * NT + j] = acc[i][j];
            }
          }
        }
      } else {
#pragma unroll
        for (int j0 = 0; j0 < NT; j0 += Cfg::kSlice) {
          if (j0 > 0) __syncthreads();  // the previous slice has been read
#pragma unroll
          for (int i = 0; i < kRpt; ++i) {
            const int row = rt + i * Cfg::kRowThreads;
#pragma unroll
            for (int jj = 0; jj < Cfg::kSlice; ++jj) {
              red[(g * kRows + row) * Cfg::kRedStride + jj] = acc[i][j0 + jj];
            }
          }
          __syncthreads();
          for (int o = threadIdx.x; o < kRows * Cfg::kSlice; o += Cfg::kThreads) {
            const int orow = o / Cfg::kSlice;
            const int j = j0 + o % Cfg::kSlice;
            Acc sum = -0.0f;
#pragma unroll
            for (int gg = 0; gg < Cfg::kKGroups; ++gg) {
              sum += red[(gg * kRows + orow) * Cfg::kRedStride + o % Cfg::kSlice];
            }
            if (whole) {
              if (row0 + orow < p.m && n0 + j < p.n) {
                StoreOut<T>(p, (uc.batch * p.m + row0 + orow) * p.n + n0 + j, sum);
              }
            } else {
              part[orow * NT + j] = sum;
            }
          }
        }
        // The next write to `red` comes after at least one more barrier.
      }
      InitSums(acc, p.k);
    }
  }
  CpAsyncWait<0>();
}

// Adds the partial sums of tiles whose chunks were split between blocks, in
// block order. Block f handles the boundary at UnitBegin(f + 1) if it is the
// first boundary inside its tile.
template <typename T, int NT, int kRows>
__global__ void Tsm2FixupKernel(const __grid_constant__ Tsm2Args p) {
  using Acc = AccType<T>;
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
  for (int o = threadIdx.x; o < kRows * NT; o += blockDim.x) {
    // Block b-1 began the tile (its tail slot); the others continue it (head slot).
    Acc sum = part[((b - 1) * 2 + 1) * kRows * NT + o];
    for (int64_t bb = b; bb <= b_hi; ++bb) sum += part[(bb * 2 + 0) * kRows * NT + o];
    const int64_t row = row_tile * kRows + o / NT;
    const int64_t col = n_tile * NT + o % NT;
    if (row < p.m && col < p.n) StoreOut<T>(p, (batch * p.m + row) * p.n + col, sum);
  }
}

}  // namespace tsm2

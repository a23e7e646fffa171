// The streaming kernel behind both TSM2R and TSM2L, for row-major storage.
//
// How the paper's ideas map here (the paper is column-major: one thread per
// row of A, coalesced because a column of A is contiguous):
// - Row-major A is contiguous along k, so a block copies a tile of A (kRows
//   rows x kChunkK columns) into shared memory with coalesced 16-byte
//   cp.async copies; each row is then read there by the kKGroups threads of
//   one warp that share it, each owning a kSegK-wide part of the chunk.
// - t1 (the k-extent of the B tile kept on chip) is kChunkK; t2 (columns of B
//   and C per block) is NT; t3 (elements of A per thread per stage) is kSegK.
//   B tiles are read from shared memory by the 8 threads of a warp that own
//   the same k-part at the same address, so they are broadcasts.
// - The paper's register prefetching of A (currA/nextA) becomes a ring of
//   kStages shared-memory stages filled by cp.async, sized to fill shared
//   memory: a memory-bound kernel is limited by the bytes it keeps in flight
//   (measured on an H100: 55-105 KB per SM gave 49-84% of the read
//   bandwidth), and in-flight cp.async data holds no registers.
// - TSM2L's thread-count factor (fewer threads, each looping over several
//   row tiles) becomes a persistent grid: `blocks` blocks, each streaming a
//   contiguous run of work units.
// - A work unit is one (row tile, k-chunk) pair. Units are split evenly over
//   the blocks in tile-major order (the "stream-K" idea), so every SM gets the
//   same number of bytes even when m is small and k large; otherwise TSM2R
//   with m = 20480 leaves a long tail. A tile whose chunks are split between
//   blocks writes partial sums to a workspace that Tsm2FixupKernel adds in a
//   fixed order, so results are bitwise reproducible (no float atomics).
// - The kKGroups threads sharing a row sit in one warp and add their partial
//   sums with shuffles at the end of the tile (a fixed butterfly order).
#pragma once

#include <cstdint>

#include "ffi/kernels/common.cuh"

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
};

// Which block owns unit u: the largest b with UnitBegin(b) <= u.
__host__ __device__ inline int64_t UnitBegin(int64_t b, int64_t units, int64_t blocks) {
  return b * units / blocks;
}

template <typename T, int NT, int kRows, int kKGroups, int kVecPerThread>
struct Tsm2Config {
  using Acc = AccType<T>;
  static constexpr int kRowsPerTile = kRows;
  static constexpr int kThreads = kRows * kKGroups;
  static constexpr int kSegK = kVecPerThread * kVec<T>;  // k per thread per chunk (t3)
  static constexpr int kChunkK = kKGroups * kSegK;       // t1
  static constexpr int kVecsPerRow = kChunkK / kVec<T>;
  // Rows of A in shared memory: a quarter-warp (2 rows x 4 k-groups) must hit
  // 8 distinct 16-byte bank groups. With one vector per thread a row is 4
  // groups wide and needs no padding; with two, the row stride is padded to
  // an odd number of groups.
  static constexpr int kRowBytes = kChunkK * static_cast<int>(sizeof(T));
  static constexpr int kRowStride =
      kVecPerThread == 1 || (kRowBytes / 16) % 2 ? kRowBytes : kRowBytes + 16;
  static constexpr int kAStageBytes = kRows * kRowStride;
  // B: one segment of kSegK rows per k-group, padded so that the 4 segments
  // start in distinct bank groups.
  static constexpr int kSegBytes = kSegK * NT * static_cast<int>(sizeof(Acc));
  static constexpr int kSegUnits = (kSegBytes + 15) / 16;
  static constexpr int kSegStride =  // in Acc elements
      (kSegUnits % 2 ? kSegUnits : kSegUnits + 1) * 16 / static_cast<int>(sizeof(Acc));
  static constexpr int kBStageElems = kKGroups * kSegStride;
  static constexpr int kBElems = kChunkK * NT;  // real elements per stage
  static constexpr int kBPerThread = (kBElems + kThreads - 1) / kThreads;
  static constexpr int kStageBytes = kAStageBytes + kBStageElems * static_cast<int>(sizeof(Acc));
  // As many stages as fit in 216 KB (of the 227 KB a block may use), at most 24.
  static constexpr int kStages = 216 * 1024 / kStageBytes < 24 ? 216 * 1024 / kStageBytes : 24;
  static constexpr int kSmemBytes = kStages * kStageBytes;
  // Output columns each thread of a row writes after the reduction.
  static constexpr int kColsPerThread = NT >= kKGroups ? NT / kKGroups : 1;
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "block size");
  static_assert(32 % kKGroups == 0, "the threads of a row must share a warp");
  static_assert(kVecPerThread == 1 || kVecPerThread == 2, "bank-conflict-free layouts only");
  static_assert(kStages >= 3, "need a pipeline");
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
  const int64_t row0 = uc.row_tile * Cfg::kRowsPerTile;
  const int64_t k0 = uc.chunk * Cfg::kChunkK;
  if (p.a_vec_ok) {
#pragma unroll
    for (int i = 0; i < Cfg::kRowsPerTile * Cfg::kVecsPerRow / Cfg::kThreads; ++i) {
      const int q = threadIdx.x + i * Cfg::kThreads;
      const int r = q / Cfg::kVecsPerRow;
      const int v = q % Cfg::kVecsPerRow;
      const int64_t gk = k0 + static_cast<int64_t>(v) * kVec<T>;
      const bool valid = row0 + r < p.m && gk < p.k;
      const T* src = valid ? a + (row0 + r) * p.k + gk : a;
      CpAsync16(stage + r * Cfg::kRowStride + v * 16, src, valid);
    }
  } else {
    for (int q = threadIdx.x; q < Cfg::kRowsPerTile * Cfg::kChunkK; q += Cfg::kThreads) {
      const int r = q / Cfg::kChunkK;
      const int kk = q % Cfg::kChunkK;
      const int64_t gk = k0 + kk;
      T val = T(0.0f);
      if (row0 + r < p.m && gk < p.k) val = a[(row0 + r) * p.k + gk];
      *reinterpret_cast<T*>(stage + r * Cfg::kRowStride + kk * sizeof(T)) = val;
    }
  }
}

// B tiles are small and shared by the whole block; they are read into
// registers one iteration ahead and written to shared memory after the
// compute, so their latency hides behind it.
template <typename T, typename Cfg, int NT>
__device__ __forceinline__ void LoadBRegs(const Tsm2Args& p, const Cursor& uc,
                                          AccType<T> (&regs)[Cfg::kBPerThread]) {
  const T* b = static_cast<const T*>(p.b) + uc.batch * p.b_batch_stride;
  const int64_t k0 = uc.chunk * Cfg::kChunkK;
  const int64_t n0 = uc.n_tile * NT;
#pragma unroll
  for (int i = 0; i < Cfg::kBPerThread; ++i) {
    const int e = threadIdx.x + i * Cfg::kThreads;
    const int kk = e / NT;
    const int j = e % NT;
    regs[i] = 0;
    if (e < Cfg::kBElems && k0 + kk < p.k && n0 + j < p.n) {
      regs[i] = ToAcc(__ldg(b + (k0 + kk) * p.n + n0 + j));
    }
  }
}

template <typename Cfg, int NT>
__device__ __forceinline__ void StoreBRegs(const typename Cfg::Acc (&regs)[Cfg::kBPerThread],
                                           typename Cfg::Acc* stage) {
#pragma unroll
  for (int i = 0; i < Cfg::kBPerThread; ++i) {
    const int e = threadIdx.x + i * Cfg::kThreads;
    const int kk = e / NT;
    if (e < Cfg::kBElems) {
      stage[(kk / Cfg::kSegK) * Cfg::kSegStride + (kk % Cfg::kSegK) * NT + e % NT] = regs[i];
    }
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

template <typename T, int NT, int kRows, int kKGroups, int kVecPerThread>
__global__ void __launch_bounds__(kRows* kKGroups, 1)
    Tsm2Kernel(const __grid_constant__ Tsm2Args p) {
  using Cfg = Tsm2Config<T, NT, kRows, kKGroups, kVecPerThread>;
  using Acc = typename Cfg::Acc;
  constexpr int kStages = Cfg::kStages;
  extern __shared__ __align__(16) char smem[];
  char* a_stages = smem;
  Acc* b_stages = reinterpret_cast<Acc*>(smem + kStages * Cfg::kAStageBytes);

  const int g = threadIdx.x % kKGroups;  // this thread's k-group
  const int r = threadIdx.x / kKGroups;  // this thread's row in the tile
  const int64_t u_begin = UnitBegin(blockIdx.x, p.units, p.blocks);
  const int64_t u_end = UnitBegin(blockIdx.x + 1, p.units, p.blocks);
  const int64_t count = u_end - u_begin;

  Cursor load_at = DecodeUnit(p, u_begin);  // next unit to stage
  Cursor comp_at = load_at;                 // unit being computed

  // Prologue: fill kStages - 1 stages.
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < count) {
      LoadATile<T, Cfg>(p, load_at, a_stages + s * Cfg::kAStageBytes);
      Acc regs[Cfg::kBPerThread];
      LoadBRegs<T, Cfg, NT>(p, load_at, regs);
      StoreBRegs<Cfg, NT>(regs, b_stages + s * Cfg::kBStageElems);
      Advance(p, load_at);
    }
    CpAsyncCommit();
  }

  Acc acc[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) acc[j] = 0;
  // B of the unit staged last iteration, waiting to be written to its slot.
  Acc b_pending[Cfg::kBPerThread];
  int pending_slot = -1;
  int slot = 0;                 // stage of unit i
  int slot_next = kStages - 1;  // stage of unit i + kStages - 1

  for (int64_t i = 0; i < count; ++i) {
    CpAsyncWait<kStages - 2>();  // this thread's copies for unit i have landed
    __syncthreads();             // everyone's have, and stage (i-1) is free again

    // Stage unit ip: A asynchronously; B into registers now and into shared
    // memory at the end of the next iteration, so its L2 latency hides behind
    // two compute phases.
    const int64_t ip = i + kStages - 1;
    Acc b_new[Cfg::kBPerThread];
    if (ip < count) {
      LoadATile<T, Cfg>(p, load_at, a_stages + slot_next * Cfg::kAStageBytes);
      LoadBRegs<T, Cfg, NT>(p, load_at, b_new);
      Advance(p, load_at);
    }
    CpAsyncCommit();

    // acc[j] += A[r, kk] * B[kk, j] over this thread's part of the chunk.
    // Vectors past k were zero-filled; skipping them saves the arithmetic
    // of a short-k tile.
    const int64_t k_left = p.k - comp_at.chunk * Cfg::kChunkK - g * Cfg::kSegK;
    const char* a_row = a_stages + slot * Cfg::kAStageBytes + r * Cfg::kRowStride +
                        g * Cfg::kSegK * static_cast<int>(sizeof(T));
    const Acc* b_seg = b_stages + slot * Cfg::kBStageElems + g * Cfg::kSegStride;
#pragma unroll
    for (int v = 0; v < kVecPerThread; ++v) {
      if (v * kVec<T> < k_left) {
        Acc av[kVec<T>];
        Unpack<T>(*reinterpret_cast<const uint4*>(a_row + v * 16), av);
#pragma unroll
        for (int e = 0; e < kVec<T>; ++e) {
          Acc bv[NT];
          LoadSmemRow<NT>(b_seg + (v * kVec<T> + e) * NT, bv);
#pragma unroll
          for (int j = 0; j < NT; ++j) acc[j] = fma(av[e], bv[j], acc[j]);
        }
      }
    }

    // B of unit ip - 1, loaded last iteration. Its slot was freed at the
    // previous barrier and is read only after the barrier of iteration ip - 1.
    if (pending_slot >= 0) {
      StoreBRegs<Cfg, NT>(b_pending, b_stages + pending_slot * Cfg::kBStageElems);
    }
#pragma unroll
    for (int e = 0; e < Cfg::kBPerThread; ++e) b_pending[e] = b_new[e];
    pending_slot = ip < count ? slot_next : -1;
    slot = slot + 1 == kStages ? 0 : slot + 1;
    slot_next = slot_next + 1 == kStages ? 0 : slot_next + 1;

    // End of this block's work on the current tile: add the k-groups' sums
    // and write C (or a partial sum, when other blocks own part of this tile).
    const Cursor uc = comp_at;
    Advance(p, comp_at);
    if (uc.chunk == p.chunks - 1 || i == count - 1) {
#pragma unroll
      for (int off = 1; off < kKGroups; off *= 2) {
#pragma unroll
        for (int j = 0; j < NT; ++j) acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], off);
      }
      // This block processed the tile's chunk 0 iff it did not start mid-tile.
      const bool begun_here = i >= uc.chunk;
      const bool finished_here = uc.chunk == p.chunks - 1;
      const int64_t row = uc.row_tile * kRows + r;
      const int64_t n0 = uc.n_tile * NT;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        // Thread g of a row writes columns [g, g + 1) * kColsPerThread.
        if (j / Cfg::kColsPerThread != g) continue;
        if (begun_here && finished_here) {
          if (row < p.m && n0 + j < p.n)
            StoreOut<T>(p, (uc.batch * p.m + row) * p.n + n0 + j, acc[j]);
        } else {
          const int slot_id = begun_here ? 1 : 0;  // 0: head of my range, 1: its tail
          static_cast<Acc*>(
              p.partials)[((static_cast<int64_t>(blockIdx.x) * 2 + slot_id) * kRows + r) * NT + j] =
              acc[j];
        }
      }
#pragma unroll
      for (int j = 0; j < NT; ++j) acc[j] = 0;
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

// TSM2S: C[m, n] = A[m, k] @ B[k, n] with A a few rows (m <= kSMaxM) and B
// large: a batch of vectors times a weight matrix.
//
// This is the paper's thread-per-row design as it fits row-major B: a row of
// B is contiguous along n, so each thread owns a few consecutive columns of
// B and C (kCpt, one 8- or 16-byte load per row) and walks down the rows,
// and a warp's loads of one row are one coalesced segment. All m rows of A
// are applied to each loaded vector (register reuse: every byte of B is read
// once for all m outputs).
//
// Rows of B reach shared memory through a cp.async ring (STuning::kStages stages of
// kSRowsPerStep rows), so the loads in flight hold no registers. Where n is not
// a whole number of copies (an odd n in bf16, say), the rows of a tile start at
// every alignment; each is then copied as the 16-byte vectors that hold it
// (a "window" one vector longer than the tile) and read from the element it
// starts at, so that any n streams in 16-byte copies. The rows of
// A a stage needs are staged beside them, transposed, so that one thread
// reads a row's m values of A with vector loads (broadcasts: every thread of
// the block reads the same ones). The eight warps of a block share its column
// tile and take different rows of each stage; they are added through shared
// memory at the end in warp order.
// The k rows are cut into splits (ffi/matmul/split_plan.h) to give every SM work;
// Tsm2SplitReduceKernel adds the splits in order.
#pragma once

#include <cstdint>

#include "ffi/common/kernel_utils.cuh"
#include "ffi/matmul/kernels/split_reduce.cuh"
#include "ffi/matmul/split_plan.h"

namespace tsm2 {

constexpr int kSRowsPerWarp = kSRowsPerStep / 8;

template <typename T>
struct SCols {
  static constexpr int kCpt = sizeof(T) == 8 ? 2 : 4;  // SColsPerThread
  static constexpr int kBytes = kCpt * static_cast<int>(sizeof(T));
  static constexpr int kTileCols = 32 * kCpt;
  // A stage row's slot: the tile's columns, or the 16-byte vectors that hold
  // them wherever the row starts (one more vector).
  static constexpr int kWindowVecs = kTileCols / kVec<T> + 1;
  static constexpr int kLd = kWindowVecs * kVec<T>;
  static constexpr int kBStageBytes = kSRowsPerStep * kLd * static_cast<int>(sizeof(T));
};

// Where row `row` of a tile of B starts in its stage slot: 0 for rows copied
// as they are, else the element of its first 16-byte vector it starts at.
// `base` is the shift of (b + col0), `n_mod` is n modulo the vector (both 0
// where rows are not windowed); b is 16-byte aligned, so the shift of
// b + row * n + col0 depends only on the low bits of row and n.
template <typename T>
struct SRowShift {
  int base = 0, n_mod = 0;
  __device__ __forceinline__ SRowShift(const SplitArgs& p, const T* b, int64_t col0) {
    if (p.b_window) {
      base = static_cast<int>(reinterpret_cast<uintptr_t>(b + col0) % 16 / sizeof(T));
      n_mod = static_cast<int>(p.n % kVec<T>);
    }
  }
  __device__ __forceinline__ int operator()(int64_t row) const {
    return (base + static_cast<int>(row & (kVec<T> - 1)) * n_mod) & (kVec<T> - 1);
  }
};

template <typename T, int MT, typename Tune = STuning>
struct SSmem {
  using Acc = AccType<T>;
  // A stage holds the B rows [kSRowsPerStep][kTileCols] (as T) and the A
  // columns [kSRowsPerStep][MT] (as Acc, so that one row's m values are one
  // vector load).
  static constexpr int kAStageBytes = kSRowsPerStep * MT * static_cast<int>(sizeof(Acc));
  static constexpr int kStageBytes = SCols<T>::kBStageBytes + kAStageBytes;
  static constexpr int kBytes = Tune::kStages * kStageBytes;
  static constexpr int kAPerThread = (kSRowsPerStep * MT + kSThreads - 1) / kSThreads;
};

// The tile column of this thread's sums c: vector loads give a thread kCpt
// neighbouring columns, element loads from windows columns 32 apart.
template <typename T>
__device__ __forceinline__ int SColOf(const SplitArgs& p, int c) {
  const int lane = threadIdx.x % 32;
  return p.b_window ? lane + 32 * c : lane * SCols<T>::kCpt + c;
}

// Queues the copy of B rows [r0, r0 + kSRowsPerStep) of this column tile into
// a stage, rows kLd elements apart. Rows past r_end are zero-filled; so are
// columns past n, except in a window, where they hold the next row's first
// elements (their sums are never stored).
template <typename T, int kLd = SCols<T>::kLd>
__device__ __forceinline__ void LoadSBStage(const SplitArgs& p, const T* b, int64_t col0,
                                            int64_t r0, int64_t r_end, char* stage) {
  constexpr int kCpt = SCols<T>::kCpt, kBytes = SCols<T>::kBytes;
  static_assert(kLd >= SCols<T>::kLd, "a slot holds a window");
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t col = col0 + lane * kCpt;
#pragma unroll
  for (int u = 0; u < kSRowsPerWarp; ++u) {
    const int r = warp * kSRowsPerWarp + u;
    const int64_t row = r0 + r;
    if (p.b_window) {
      // The vectors from the one that holds (row, col0) on; the last of B's
      // may run past its end, whose bytes are not read.
      const T* first = b + row * p.n + col0;
      first -= reinterpret_cast<uintptr_t>(first) % 16 / sizeof(T);
      const int64_t left = (b + p.k * p.n - first) * static_cast<int64_t>(sizeof(T));
      T* slot = reinterpret_cast<T*>(stage) + r * kLd;
      for (int v = lane; v < SCols<T>::kWindowVecs; v += 32) {
        const int64_t tail = left - 16 * int64_t{v};
        const int bytes = row >= r_end || tail <= 0 ? 0 : tail < 16 ? static_cast<int>(tail) : 16;
        CpAsync16Head(slot + v * kVec<T>, bytes > 0 ? first + v * kVec<T> : b, bytes);
      }
      continue;
    }
    T* dst = reinterpret_cast<T*>(stage) + r * kLd + lane * kCpt;
    if (p.vec_ok) {
      const bool valid = row < r_end && col < p.n;
      const T* src = valid ? b + row * p.n + col : b;
      if constexpr (kBytes == 16) {
        CpAsync16(dst, src, valid);
      } else {
        CpAsync8(dst, src, valid);
      }
    } else if constexpr (sizeof(T) >= 4) {
      // Element by element, still through cp.async: a load and a store
      // through registers waited for each element (grid seed 3: S f32
      // 1x10821x17697 at 56% of the read ceiling, aligned 2x11028x5720 at 84%).
#pragma unroll
      for (int c = 0; c < kCpt; ++c) {
        const bool valid = row < r_end && col + c < p.n;
        const T* src = valid ? b + row * p.n + col + c : b;
        if constexpr (sizeof(T) == 8) {
          CpAsync8(dst + c, src, valid);
        } else {
          CpAsync4(dst + c, src, valid);
        }
      }
    } else {  // bf16/f16 where B is not even 16-byte aligned (never an XLA buffer)
#pragma unroll
      for (int c = 0; c < kCpt; ++c) {
        dst[c] = row < r_end && col + c < p.n ? b[row * p.n + col + c] : T(0.0f);
      }
    }
  }
}

// A[i, r0 + r] for the rows of a stage, read into registers one step ahead
// and stored (transposed, as Acc) after the step's FMAs.
template <typename T, int MT>
__device__ __forceinline__ void LoadSARegs(const SplitArgs& p, const T* a, int64_t r0,
                                           int64_t r_end,
                                           AccType<T> (&regs)[SSmem<T, MT>::kAPerThread]) {
#pragma unroll
  for (int q = 0; q < SSmem<T, MT>::kAPerThread; ++q) {
    const int e = threadIdx.x + q * kSThreads;  // e = r * MT + i
    const int r = e / MT, i = e % MT;
    regs[q] = -0.0f;  // past r_end, -0 times B's +0 adds -0 (a sum's zero keeps its sign)
    if (e < kSRowsPerStep * MT && i < p.m && r0 + r < r_end) regs[q] = ToAcc(a[i * p.k + r0 + r]);
  }
}

template <typename T, int MT>
__device__ __forceinline__ void StoreSARegs(const AccType<T> (&regs)[SSmem<T, MT>::kAPerThread],
                                            char* stage) {
  AccType<T>* dst = reinterpret_cast<AccType<T>*>(stage + SCols<T>::kBStageBytes);
#pragma unroll
  for (int q = 0; q < SSmem<T, MT>::kAPerThread; ++q) {
    const int e = threadIdx.x + q * kSThreads;
    if (e < kSRowsPerStep * MT) dst[e] = regs[q];
  }
}

// No minimum blocks per SM: capping m = 16 at 128 registers (two blocks)
// spilled and measured slower at m = 4 and 16.
template <typename T, int MT, typename Tune>
__global__ void __launch_bounds__(kSThreads) Tsm2SKernel(const __grid_constant__ SplitArgs p) {
  using Acc = AccType<T>;
  using Sm = SSmem<T, MT, Tune>;
  constexpr int kStages = Tune::kStages;
  constexpr int kCpt = SCols<T>::kCpt;
  extern __shared__ __align__(16) char smem[];

  const SplitBlock blk = DecodeSplitBlock(p);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t col0 = blk.tile_n * p.tile_n;
  const int64_t r_begin = blk.split * p.split_len;
  const int64_t r_end = min(p.k, r_begin + p.split_len);
  const T* a = static_cast<const T*>(p.a) + blk.batch * p.a_batch_stride;
  const T* b = static_cast<const T*>(p.b) + blk.batch * p.b_batch_stride;
  const int64_t steps = (r_end - r_begin + kSRowsPerStep - 1) / kSRowsPerStep;
  const SRowShift<T> shift(p, b, col0);

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) {
      char* st = smem + s * Sm::kStageBytes;
      LoadSBStage<T>(p, b, col0, r_begin + s * kSRowsPerStep, r_end, st);
      Acc regs[Sm::kAPerThread];
      LoadSARegs<T, MT>(p, a, r_begin + s * kSRowsPerStep, r_end, regs);
      StoreSARegs<T, MT>(regs, st);
    }
    CpAsyncCommit();
  }

  Acc acc[MT][kCpt];
  InitSums(acc, p.k);
  for (int64_t it = 0; it < steps; ++it) {
    CpAsyncWait<kStages - 2>();
    __syncthreads();  // stage `it` has landed everywhere; stage it-1 is free
    const int64_t ip = it + kStages - 1;
    char* next = smem + (ip % kStages) * Sm::kStageBytes;
    Acc a_next[Sm::kAPerThread];
    if (ip < steps) {
      LoadSBStage<T>(p, b, col0, r_begin + ip * kSRowsPerStep, r_end, next);
      LoadSARegs<T, MT>(p, a, r_begin + ip * kSRowsPerStep, r_end, a_next);
    }
    CpAsyncCommit();

    // This warp's rows of the stage: each B vector meets all m rows of A.
    const char* st = smem + (it % kStages) * Sm::kStageBytes;
    const T* b_st = reinterpret_cast<const T*>(st);
    const Acc* a_st = reinterpret_cast<const Acc*>(st + SCols<T>::kBStageBytes);
    const int64_t r0 = r_begin + it * kSRowsPerStep;
#pragma unroll
    for (int u = 0; u < kSRowsPerWarp; ++u) {
      const int r = warp * kSRowsPerWarp + u;
      Acc bv[kCpt], av[MT];
      const T* bs = b_st + r * SCols<T>::kLd + lane * kCpt;
      if (p.b_window) {
        // The row starts anywhere in its first vector, so the loads are of
        // single elements: lane takes columns lane + 32 c, which keeps a
        // warp's loads on distinct banks (SColOf).
        bs = b_st + r * SCols<T>::kLd + shift(r0 + r) + lane;
#pragma unroll
        for (int c = 0; c < kCpt; ++c) bv[c] = ToAcc(bs[32 * c]);
      } else if constexpr (SCols<T>::kBytes == 16) {
        Unpack<T>(*reinterpret_cast<const uint4*>(bs), bv);
      } else {
        T raw[kCpt];
        memcpy(raw, bs, sizeof raw);
#pragma unroll
        for (int c = 0; c < kCpt; ++c) bv[c] = ToAcc(raw[c]);
      }
      LoadSmemRow<MT>(a_st + r * MT, av);
#pragma unroll
      for (int i = 0; i < MT; ++i) {
#pragma unroll
        for (int c = 0; c < kCpt; ++c) acc[i][c] = fma(av[i], bv[c], acc[i][c]);
      }
    }
    if (ip < steps) StoreSARegs<T, MT>(a_next, next);
  }
  CpAsyncWait<0>();
  __syncthreads();  // the ring is reused below

  // Add the warps in order, one row of the output at a time.
  Acc* red = reinterpret_cast<Acc*>(smem);  // [8][kTileCols]
  for (int i = 0; i < MT && i < p.m; ++i) {
#pragma unroll
    for (int c = 0; c < kCpt; ++c) red[warp * SCols<T>::kTileCols + SColOf<T>(p, c)] = acc[i][c];
    __syncthreads();
    if (threadIdx.x < SCols<T>::kTileCols) {
      Acc sum = -0.0f;
#pragma unroll
      for (int w = 0; w < kSThreads / 32; ++w) sum += red[w * SCols<T>::kTileCols + threadIdx.x];
      const int64_t j = col0 + threadIdx.x;
      if (j < p.n) StoreSplitOut<T>(p, blk, i, j, sum);
    }
    __syncthreads();
  }
}

}  // namespace tsm2

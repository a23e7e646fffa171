// TSM2T with flat stages: C[m, n] = A^T @ B (A given k x m, B k x n) where the
// rows of A or B are not whole 16-byte vectors and one block's tile covers C
// (split_plan.h TUsesFlat): the widths of random and real-program shapes,
// such as A.T @ B of 2 x 21 or 11 x 3 over millions of rows.
//
// The rows a stage takes are then one contiguous run of each operand, so a
// stage copies the 16-byte vectors that hold the run, whatever the row length
// or where the run starts in a vector (the tiled stages of tn.cuh copy such
// rows element by element: TN bf16 5341359 x 2 x 21 ran at 10% of the read
// ceiling). Element (r, c) of a run lies at `off + r * width + c` in its slot.
//
// Each thread holds an EM x EN block of C, its entries tp * EM + i and
// tq * EN + j, read from the stage one element at a time. Owning consecutive
// entries puts a row's EM + EN loads at one address each plus immediates; with
// entries tpm apart, each load took an address computation of its own (Nsight,
// H200: 75 instructions a row for TN f16 16 x 1492811 x 6, 32 of them FMAs). The
// tile is C rounded up to whole blocks, not to a power of two: at these widths
// the kernel is bound by issue slots (shared-memory loads, conversions and
// FMAs per row), and padded columns cost FMAs that produce nothing. Entries
// past C read whatever follows the run in its slot; their sums are dropped.
// Groups of threads take interleaved rows and are added at the end, as in
// tn.cuh.
#pragma once

#include <cstdint>

#include "ffi/common/kernel_utils.cuh"
#include "ffi/matmul/kernels/split_reduce.cuh"
#include "ffi/matmul/kernels/tn.cuh"
#include "ffi/matmul/split_plan.h"

namespace tsm2 {

// One 16-byte asynchronous copy to a shared-memory address.
__device__ __forceinline__ void CpAsync16To(unsigned dst, const char* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}

// Rows [r0, r_stop) of a row-major matrix of `rows` rows of `width` elements,
// all columns, as the 16-byte vectors that hold them, into `dst`; `src` is
// 16-byte aligned. Only the matrix's own bytes of its last vector are read
// (the rest of the slot's vector is zero-filled). Every vector but that one is
// whole, so the loop copies with a shared address and a source pointer that
// step per copy: with the bytes left worked out in 64 bits for each vector, it
// took 27 instructions a vector (Nsight, H200, TN f16 16 x 1492811 x 6).
template <typename T>
__device__ __forceinline__ void LoadTFlat(const T* src, int64_t width, int64_t rows, int64_t r0,
                                          int64_t r_stop, T* dst) {
  constexpr int kV = kVec<T>;
  const int64_t v0 = r0 * width / kV;
  const int count = static_cast<int>(CeilDiv(r_stop * width, kV) - v0);
  const char* from = reinterpret_cast<const char*>(src + v0 * kV);
  // Bytes from the run's first vector to the end of the matrix.
  const int64_t left = (rows * width - v0 * kV) * static_cast<int64_t>(sizeof(T));
  const int whole = static_cast<int>(min(static_cast<int64_t>(count), left / 16));
  unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(dst)) + 16u * threadIdx.x;
  const char* at = from + 16 * threadIdx.x;
  for (int q = threadIdx.x; q < whole; q += kTThreads) {
    CpAsync16To(to, at);
    to += 16u * kTThreads;
    at += 16 * kTThreads;
  }
  if (whole < count && threadIdx.x == whole % kTThreads) {
    CpAsync16Head(dst + whole * kV, from + 16 * int64_t{whole},
                  static_cast<int>(left - 16 * int64_t{whole}));
  }
}

template <typename T, int EM, int EN>
__global__ void __launch_bounds__(kTThreads, 2)
    Tsm2TFlatKernel(const __grid_constant__ SplitArgs p) {
  using Acc = AccType<T>;
  extern __shared__ __align__(16) char smem[];
  T* ring = reinterpret_cast<T*>(smem);

  const SplitBlock blk = DecodeSplitBlock(p);
  const int64_t r_begin = blk.split * p.split_len;
  const int64_t r_end = min(p.k, r_begin + p.split_len);
  const T* a = static_cast<const T*>(p.a) + blk.batch * p.a_batch_stride;
  const T* b = static_cast<const T*>(p.b) + blk.batch * p.b_batch_stride;

  const int m = static_cast<int>(p.m), n = static_cast<int>(p.n);
  const int tpm = static_cast<int>(p.tile_m) / EM, tpn = static_cast<int>(p.tile_n) / EN;
  const int tile_threads = tpm * tpn;
  const int groups = kTThreads / tile_threads;  // threads past groups * tile_threads idle
  const int g = threadIdx.x / tile_threads, t = threadIdx.x % tile_threads;
  const int tp = t % tpm, tq = t / tpm;
  const int step = static_cast<int>(p.step);
  const int slot = static_cast<int>(p.flat_a + p.flat_b);
  const int64_t steps = CeilDiv(r_end - r_begin, step);

  auto load = [&](int64_t s) {
    const int64_t r0 = r_begin + s * step;
    T* stage = ring + (s % kTStages) * slot;
    LoadTFlat<T>(a, m, p.k, r0, min(r0 + step, r_end), stage);
    LoadTFlat<T>(b, n, p.k, r0, min(r0 + step, r_end), stage + p.flat_a);
  };
  WaitForPrevious();  // launched as a programmatic dependent (launch_split.cuh)
#pragma unroll
  for (int s = 0; s < kTStages - 1; ++s) {
    if (s < steps) load(s);
    CpAsyncCommit();
  }

  Acc acc[EM][EN];
  InitSums(acc, p.k);
  for (int64_t it = 0; it < steps; ++it) {
    CpAsyncWait<kTStages - 2>();
    __syncthreads();  // stage `it` has landed everywhere; stage it-1 is free
    if (it + kTStages - 1 < steps) load(it + kTStages - 1);
    CpAsyncCommit();
    const int64_t r0 = r_begin + it * step;
    const T* stage = ring + (it % kTStages) * slot;
    const T* sa = stage + static_cast<int>(r0 * m % kVec<T>) + tp * EM;
    const T* sb = stage + p.flat_a + static_cast<int>(r0 * n % kVec<T>) + tq * EN;
    const int rows = static_cast<int>(min(static_cast<int64_t>(step), r_end - r0));
    for (int r = g < groups ? g : rows; r < rows; r += groups) {
      Acc x[EM], y[EN];
#pragma unroll
      for (int i = 0; i < EM; ++i) x[i] = ToAcc(sa[r * m + i]);
#pragma unroll
      for (int j = 0; j < EN; ++j) y[j] = ToAcc(sb[r * n + j]);
#pragma unroll
      for (int i = 0; i < EM; ++i) {
#pragma unroll
        for (int j = 0; j < EN; ++j) acc[i][j] = fma(x[i], y[j], acc[i][j]);
      }
    }
  }
  CpAsyncWait<0>();
  AllowNextToStart();

  // Entry e of the block of the tile's thread u, in row-major order, is
  // C[row, col]; entries past C are dropped.
  auto store = [&](int u, int e, Acc v) {
    const int row = u % tpm * EM + e / EN, col = u / tpm * EN + e % EN;
    if (row < m && col < n) StoreSplitOut<T>(p, blk, row, col, v);
  };
  if (groups > 1) {
    StoreGroupSums(acc, g, groups, t, tile_threads, smem, store);
    return;
  }
  if (g != 0) return;  // threads past the tile's
#pragma unroll
  for (int e = 0; e < EM * EN; ++e) store(t, e, acc[e / EN][e % EN]);
}

}  // namespace tsm2

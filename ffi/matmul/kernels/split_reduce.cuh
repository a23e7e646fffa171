// What the S and T kernels share: their launch arguments and the pass that
// adds the partial sums of split contractions (see ffi/matmul/split_plan.h).
#pragma once

#include <cstdint>

#include "ffi/common/kernel_utils.cuh"
#include "ffi/common/pdl.cuh"

namespace tsm2 {

constexpr int kReduceThreads = 256;

struct SplitArgs {
  const void* a;
  const void* b;
  void* c;
  void* partials;  // [batch][splits][m][n] accumulators when splits > 1
  int64_t m, k, n;
  int64_t a_batch_stride, b_batch_stride;  // elements; 0 = shared
  int64_t tile_m, tile_n, tiles_m, tiles_n;
  int64_t step, splits, split_len;
  bool out_f32;            // C is f32 although T is bf16/f16
  bool vec_ok;             // operand rows are whole, aligned vectors: 16-byte copies are safe
  bool b_window;           // S: B's rows are copied as the 16-byte vectors that hold them
  int64_t flat_a, flat_b;  // T flat stages (split_plan.h TUsesFlat): elements of each run's slot
};

// Block -> (batch, output tile, split); splits vary fastest so that the
// blocks sharing an output tile run side by side.
struct SplitBlock {
  int64_t batch, tile_m, tile_n, split;
};
// In 32 bits: u is a block (or cluster) index and the counts divide the grid,
// so all are below 2^31, and a 64-bit division is a long software routine on
// the path of every block's first load.
__device__ __forceinline__ SplitBlock DecodeSplitBlockAt(const SplitArgs& p, int64_t u64) {
  const auto splits = static_cast<uint32_t>(p.splits), tiles_n = static_cast<uint32_t>(p.tiles_n),
             tiles_m = static_cast<uint32_t>(p.tiles_m);
  auto u = static_cast<uint32_t>(u64);
  SplitBlock s;
  s.split = u % splits;
  u /= splits;
  s.tile_n = u % tiles_n;
  u /= tiles_n;
  s.tile_m = u % tiles_m;
  s.batch = u / tiles_m;
  return s;
}
__device__ __forceinline__ SplitBlock DecodeSplitBlock(const SplitArgs& p) {
  return DecodeSplitBlockAt(p, blockIdx.x);
}

// Where a block's sums for C[batch, i, j] go: C itself when the contraction
// is not split, else the block's slot in the partial sums.
template <typename T>
__device__ __forceinline__ void StoreSplitOut(const SplitArgs& p, const SplitBlock& s, int64_t i,
                                              int64_t j, AccType<T> v) {
  const int64_t e = i * p.n + j;
  if (p.splits > 1) {
    static_cast<AccType<T>*>(p.partials)[(s.batch * p.splits + s.split) * p.m * p.n + e] = v;
  } else if (p.out_f32) {
    static_cast<float*>(p.c)[s.batch * p.m * p.n + e] = static_cast<float>(v);
  } else {
    FromAcc(v, static_cast<T*>(p.c) + s.batch * p.m * p.n + e);
  }
}

// Drops a 128-byte line of global memory from L2 without writing it back.
__device__ __forceinline__ void DiscardL2Line(const void* line) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("discard.global.L2 [%0], 128;\n" ::"l"(line) : "memory");
#endif
}

// C = sum over splits of the partial sums, in an order fixed by the plan
// alone, so that the result does not depend on scheduling.
// - kWarpsOverSplits (many splits, T): a block takes 32 consecutive outputs,
//   lane l output l, warp w splits w, w + 8, ...; the 8 warps' sums are then
//   added in warp order. Each load of a warp is 32 neighbouring outputs of one
//   split; a warp per output instead reads one value per 32-byte
//   sector (TN f32 and bf16 1e6 x 16 x 256 ran 1% faster this way on an H100).
//   With `discard` (the host checks that every warp's loads are whole 128-byte
//   lines of its own), each line is dropped from L2 once read. The T kernels
//   write their partials just before this pass, so they are still dirty in L2,
//   and their write-back cost the next kernel's stream DRAM time: TN f64 1e6 x
//   16 x 256 (264 splits of 32 KB) 735.8 -> 731.2 us, as fast as an empty
//   second launch (730.3).
// - Else a thread adds one output's splits in split order.
template <typename T, bool kWarpsOverSplits>
__global__ void __launch_bounds__(kReduceThreads)
    Tsm2SplitReduceKernel(const __grid_constant__ SplitArgs p, int64_t batch, bool discard) {
  using Acc = AccType<T>;
  constexpr int kWarps = kReduceThreads / 32;
  // Outputs a block takes per pass, and the splits a thread steps over.
  constexpr int kOutputs = kWarpsOverSplits ? 32 : kReduceThreads;
  constexpr int kSplitStride = kWarpsOverSplits ? kWarps : 1;
  constexpr int kPerLine = 128 / static_cast<int>(sizeof(Acc));
  __shared__ Acc warp_sums[kWarpsOverSplits ? kWarps : 1][32];
  const int64_t mn = p.m * p.n, outputs = batch * mn;
  const Acc* part = static_cast<const Acc*>(p.partials);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int first = kWarpsOverSplits ? warp : 0;
  const bool drops = kWarpsOverSplits && discard && lane % kPerLine == 0;
  WaitForPrevious();  // launched as a programmatic dependent of the S or T kernel
  for (int64_t o0 = blockIdx.x * int64_t{kOutputs}; o0 < outputs;
       o0 += int64_t{gridDim.x} * kOutputs) {
    const int64_t o = o0 + (kWarpsOverSplits ? lane : threadIdx.x);
    Acc sum = -0.0f;
    if (o < outputs) {
      // kBatch loads issued before their adds: one chain of dependent loads
      // took 5.5-5.8 us for 16 splits of 4096 outputs (Nsight, S bf16
      // 1x4096x4096, 16 blocks). The adds keep split order, so results are
      // the same bits as adding one split at a time.
      constexpr int kBatch = 8;
      const Acc* src = part + o / mn * p.splits * mn + o % mn;
      int64_t s = first;
      for (; s + (kBatch - 1) * kSplitStride < p.splits; s += kBatch * kSplitStride) {
        Acc v[kBatch];
#pragma unroll
        for (int u = 0; u < kBatch; ++u) v[u] = src[(s + u * kSplitStride) * mn];
#pragma unroll
        for (int u = 0; u < kBatch; ++u) sum += v[u];
        if (discard) {
          __syncwarp();  // every lane has its values before a line goes
#pragma unroll
          for (int u = 0; u < kBatch; ++u) {
            if (drops) DiscardL2Line(src + (s + u * kSplitStride) * mn);
          }
        }
      }
      for (; s < p.splits; s += kSplitStride) {
        sum += src[s * mn];
        if (discard) {
          __syncwarp();
          if (drops) DiscardL2Line(src + s * mn);
        }
      }
    }
    if constexpr (kWarpsOverSplits) {
      warp_sums[warp][lane] = sum;
      __syncthreads();
      sum = -0.0f;
      if (warp == 0) {
#pragma unroll
        for (int w = 0; w < kWarps; ++w) sum += warp_sums[w][lane];
      }
      __syncthreads();  // warp_sums is free for the next pass
      if (warp != 0) continue;
    }
    if (o >= outputs) continue;
    if (p.out_f32) {
      static_cast<float*>(p.c)[o] = static_cast<float>(sum);
    } else {
      FromAcc(sum, static_cast<T*>(p.c) + o);
    }
  }
}

}  // namespace tsm2

// What the S and T kernels share: their launch arguments and the pass that
// adds the partial sums of split contractions (see ffi/split_plans.h).
#pragma once

#include <cstdint>

#include "ffi/kernels/common.cuh"

namespace tsm2 {

struct SplitArgs {
  const void* a;
  const void* b;
  void* c;
  void* partials;  // [batch][splits][m][n] accumulators when splits > 1
  int64_t m, k, n;
  int64_t a_batch_stride, b_batch_stride;  // elements; 0 = shared
  int64_t tile_m, tile_n, tiles_m, tiles_n;
  int64_t step, splits, split_len;
  bool out_f32;  // C is f32 although T is bf16/f16
  bool vec_ok;   // operand rows are whole, aligned vectors: 16-byte copies are safe
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

// C = sum over splits of the partial sums, in an order fixed by the plan
// alone, so that the result does not depend on scheduling. With kWarpEach a
// warp adds one output's splits (lane l takes splits l, l + 32, ..., then a
// fixed shuffle tree), which keeps hundreds of splits from serializing on
// one thread's load latency; else a thread adds them in split order.
template <typename T, bool kWarpEach>
__global__ void Tsm2SplitReduceKernel(const __grid_constant__ SplitArgs p, int64_t batch) {
  using Acc = AccType<T>;
  const int64_t mn = p.m * p.n;
  const Acc* part = static_cast<const Acc*>(p.partials);
  const int64_t worker = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int lanes = kWarpEach ? 32 : 1;
  const int lane = kWarpEach ? threadIdx.x % 32 : 0;
  // Whole warps iterate together (the loop bound is the same for a warp).
  for (int64_t o = worker / lanes; o < batch * mn; o += stride / lanes) {
    const int64_t b = o / mn, e = o % mn;
    // kBatch loads issued before their adds: one chain of dependent loads
    // took 5.5-5.8 us for 16 splits of 4096 outputs (Nsight, S bf16
    // 1x4096x4096, 16 blocks). The adds keep split order, so results are
    // the same bits as adding one split at a time.
    constexpr int kBatch = 8;
    const Acc* src = part + b * p.splits * mn + e;
    Acc sum = 0;
    int64_t s = lane;
    for (; s + (kBatch - 1) * lanes < p.splits; s += kBatch * lanes) {
      Acc v[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) v[u] = src[(s + u * lanes) * mn];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) sum += v[u];
    }
    for (; s < p.splits; s += lanes) sum += src[s * mn];
    if constexpr (kWarpEach) {
#pragma unroll
      for (int d = 16; d > 0; d /= 2) sum += __shfl_down_sync(0xffffffffu, sum, d);
      if (lane != 0) continue;
    }
    if (p.out_f32) {
      static_cast<float*>(p.c)[o] = static_cast<float>(sum);
    } else {
      FromAcc(sum, static_cast<T*>(p.c) + o);
    }
  }
}

}  // namespace tsm2

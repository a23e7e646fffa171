// A streaming read of a whole buffer: the bandwidth ceiling the benchmark
// harness reports every case against. Each block XORs the 32-bit words it
// read into one output word, so the loads cannot be optimised away.
#pragma once

#include <cstdint>

namespace tsm2 {

template <int kThreads, int kUnroll>
__global__ void __launch_bounds__(kThreads)
    StreamReadKernel(const uint4* __restrict__ x, int64_t n_vec, const uint8_t* __restrict__ tail,
                     int tail_bytes, uint32_t* __restrict__ out) {
  uint32_t acc = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  // kUnroll independent 16-byte loads in flight per thread.
  for (; i + (kUnroll - 1) * stride < n_vec; i += kUnroll * stride) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = __ldcs(x + i + u * stride);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n_vec; i += stride) {
    const uint4 v = __ldcs(x + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (blockIdx.x == 0 && threadIdx.x < tail_bytes) acc ^= tail[threadIdx.x];

  __shared__ uint32_t warp_acc[kThreads / 32];
#pragma unroll
  for (int off = 16; off > 0; off /= 2) acc ^= __shfl_xor_sync(0xffffffffu, acc, off);
  if (threadIdx.x % 32 == 0) warp_acc[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t total = 0;
    for (int w = 0; w < kThreads / 32; ++w) total ^= warp_acc[w];
    out[blockIdx.x] = total;
  }
}

}  // namespace tsm2

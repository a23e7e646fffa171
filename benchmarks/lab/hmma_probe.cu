// mma.sync m16n8k8 TF32 probe: how many cycles one HMMA costs a sub-partition
// and how long one takes, with W warps a block (one block an SM, 132 blocks)
// and C independent accumulator chains a warp. It sets the tensor-pipe floor
// the k-means tensor-core steps are judged against: on an H100, ~6.1 cycles
// an HMMA a sub-partition once 4 chains are in flight, ~25 cycles of latency.
//
// Build (benchmarks/lab/README.md): cmake -DTSM2_BUILD_LAB=ON, or nvcc alone:
//   nvcc -O3 -std=c++17 -arch=sm_90 -I. benchmarks/lab/hmma_probe.cu -o build/labs/hmma_probe
#include <cstdint>
#include <cstdio>

#include "ffi/common/tf32.cuh"

// Operands are 0 or 1.0 (finite whatever threadIdx is); the sums are stored
// so that the compiler keeps every HMMA.
template <int C>
__global__ void Probe(float* out, long long* cyc, int iters) {
  uint32_t a[4] = {threadIdx.x, threadIdx.x * 3u, threadIdx.x * 5u, 7u};
  for (int i = 0; i < 4; ++i) a[i] &= 0x3f800000u;
  uint32_t b0 = 0x3f800000u & threadIdx.x, b1 = b0;
  float acc[C][4] = {};
  __syncthreads();
  long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int c = 0; c < C; ++c) tsm2::MmaTf32(acc[c], a, b0, b1);
  }
  __syncthreads();
  long long t1 = clock64();
  float s = 0;
  for (int c = 0; c < C; ++c) s += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
  if (threadIdx.x == 0) cyc[blockIdx.x] = t1 - t0;
}
template <int C>
void Run(int warps, float* out, long long* cyc) {
  const int iters = 4096;
  Probe<C><<<132, 32 * warps>>>(out, cyc, iters);
  Probe<C><<<132, 32 * warps>>>(out, cyc, iters);
  cudaDeviceSynchronize();
  long long h[132];
  cudaMemcpy(h, cyc, sizeof h, cudaMemcpyDeviceToHost);
  double m = 0;
  for (int i = 0; i < 132; ++i) m += h[i];
  m /= 132;
  const double hmma_per_sp = double(iters) * C * warps / 4;
  printf("warps/SM %2d chains %d: %.2f cycles per HMMA per SP, chain latency %.1f cycles\n", warps,
         C, m / hmma_per_sp, m / iters);
}
int main() {
  float* out;
  long long* cyc;
  cudaMalloc(&out, 132 * 1024 * 4);
  cudaMalloc(&cyc, 132 * 8);
  for (int w : {4, 8, 16}) {
    Run<1>(w, out, cyc);
    Run<2>(w, out, cyc);
    Run<4>(w, out, cyc);
    Run<8>(w, out, cyc);
  }
  return 0;
}

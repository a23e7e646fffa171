// Rows of a row-major matrix in registered (mapped) host memory, copied into
// a device buffer by the SMs: tsm2_host_rows. The first row comes from device
// memory (a chunk index times the rows per chunk), so one compiled program
// reads every chunk. Rows past the matrix are written as zeros. Where the
// host staged a copy of the chunk it expected (hostmem/staging.h) and the
// index is that chunk, the rows come from the copy in device memory instead.
#pragma once

#include <cstdint>

#include "ffi/hostmem/staging.h"

namespace tsm2 {

// Each thread keeps kUnroll loads of V (16 bytes where the rows allow) in
// flight: reads over the host link wait ~1-2 us each, so the link fills
// only with many outstanding (Little's law: ~55 GB/s x ~2 us is ~110 KB
// across the GPU, which a few resident blocks per SM exceed).
template <typename V, int kThreads, int kUnroll>
__global__ void __launch_bounds__(kThreads)
    HostRowsKernel(const V* __restrict__ src, int64_t total_rows, int64_t row_vecs,
                   const int32_t* __restrict__ chunk, int64_t rows, V* __restrict__ dst,
                   const StagedChunk staged) {
  const int64_t index = *chunk;
  const bool hit = staged.data != nullptr && index == staged.chunk;
  if (staged.counters != nullptr && blockIdx.x == 0 && threadIdx.x == 0) {
    atomicAdd(&staged.counters[!hit], 1);
    *reinterpret_cast<volatile unsigned long long*>(staged.seen) =
        (static_cast<unsigned long long>(staged.serial) << 32) | static_cast<uint32_t>(index);
  }
  const int64_t first = index * rows;
  // A negative chunk or one past the end reads nothing: all zeros.
  const int64_t valid_rows = first < 0 ? 0 : (total_rows > first ? total_rows - first : 0);
  const int64_t valid = (valid_rows < rows ? valid_rows : rows) * row_vecs;
  const int64_t total = rows * row_vecs;
  const V* from =
      hit ? static_cast<const V*>(staged.data) : src + (first < 0 ? 0 : first) * row_vecs;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < total;
       i += kUnroll * stride) {
    V v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t at = i + u * stride;
      v[u] = at < valid ? from[at] : V{};
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t at = i + u * stride;
      if (at < total) dst[at] = v[u];
    }
  }
}

}  // namespace tsm2

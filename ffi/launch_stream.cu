// Launch of the streaming-read kernel (benchmark ceiling).
#include "ffi/kernels/stream_read.cuh"
#include "ffi/launch.h"

namespace tsm2 {

cudaError_t LaunchStreamRead(const void* x, int64_t bytes, uint32_t* out, int64_t blocks,
                             cudaStream_t stream) {
  constexpr int kThreads = 256;
  if (blocks <= 0) return cudaSuccess;
  if (blocks > (int64_t{1} << 31) - 1) return cudaErrorInvalidValue;
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0) return cudaErrorMisalignedAddress;
  const int64_t n_vec = bytes / 16;
  const int tail = static_cast<int>(bytes % 16);
  StreamReadKernel<kThreads, 4><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      static_cast<const uint4*>(x), n_vec, static_cast<const uint8_t*>(x) + n_vec * 16, tail, out);
  return cudaGetLastError();
}

}  // namespace tsm2

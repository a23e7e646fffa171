// Launches of the benchmark harness's own kernels: the streaming read (its
// bandwidth ceiling) and the device clock (its timer).
#include "ffi/harness/kernels/stream_read.cuh"
#include "ffi/harness/launcher.h"

namespace tsm2 {

Status LaunchStreamRead(const void* x, int64_t bytes, uint32_t* out, int64_t blocks,
                        cudaStream_t stream) {
  constexpr int kThreads = 256;
  if (blocks <= 0) return Status{};
  if (blocks > (int64_t{1} << 31) - 1) {
    return TSM2_FAIL(cudaErrorInvalidValue, "LaunchStreamRead: more than 2^31 - 1 blocks");
  }
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0) {
    return TSM2_FAIL(cudaErrorMisalignedAddress, "LaunchStreamRead: x is not 16-byte aligned");
  }
  const int64_t n_vec = bytes / 16;
  const int tail = static_cast<int>(bytes % 16);
  StreamReadKernel<kThreads, 4><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      static_cast<const uint4*>(x), n_vec, static_cast<const uint8_t*>(x) + n_vec * 16, tail, out);
  TSM2_RETURN_IF_LAUNCH_FAILED("StreamReadKernel");
  return Status{};
}

namespace {
// The GPU's nanosecond clock, as two u32 words (low, high): JAX without x64
// has no u64 arrays.
__global__ void DeviceClockKernel(uint32_t* out) {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  out[0] = static_cast<uint32_t>(t);
  out[1] = static_cast<uint32_t>(t >> 32);
}
}  // namespace

Status LaunchDeviceClock(uint32_t* out, cudaStream_t stream) {
  DeviceClockKernel<<<1, 1, 0, stream>>>(out);
  TSM2_RETURN_IF_LAUNCH_FAILED("DeviceClockKernel");
  return Status{};
}

}  // namespace tsm2

// Programmatic dependent launch: a kernel launched with LaunchDependent may be
// scheduled while the kernel before it on the stream is still finishing, which
// hides the launch gap between short kernels that follow one another (an ABFT
// check's pass, its split sum and the judgement; a TSM2T product and the sum of
// its splits). Such a kernel calls WaitForPrevious before its first access to
// global memory (the previous kernel's writes are visible only after it), and
// a kernel lets the next one be scheduled early with AllowNextToStart. Both
// are no-ops before sm_90, where LaunchDependent launches plainly.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "ffi/common/device.h"

namespace tsm2 {

__device__ __forceinline__ void WaitForPrevious() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void AllowNextToStart() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// The launch attribute that makes a launch a programmatic dependent (for
// launches that set other attributes too, such as a cluster shape).
inline cudaLaunchAttribute DependentLaunchAttribute() {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  return attr;
}

template <typename... Params, typename... Args>
cudaError_t LaunchDependent(void (*kernel)(Params...), unsigned blocks, int threads, int smem,
                            cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(blocks);
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = static_cast<size_t>(smem);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1] = {DependentLaunchAttribute()};
  cfg.attrs = attr;
  cfg.numAttrs = ComputeMajorAtLeast(9) ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

}  // namespace tsm2

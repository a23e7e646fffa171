// Host entry points of the harness's kernels (kernels/stream_read.cuh and the
// device clock in launch.cu), without XLA: the FFI handlers
// (cuda_handler.cc) and the lab programs' read ceiling use them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ffi/common/status.h"

namespace tsm2 {

// Reads `bytes` bytes at `x` once with 16-byte loads and writes one XOR word
// per block to out[0..blocks): the bandwidth ceiling of the benchmark harness.
Status LaunchStreamRead(const void* x, int64_t bytes, uint32_t* out, int64_t blocks,
                        cudaStream_t stream);

// Writes the GPU's %globaltimer (ns) to out[0] (low word) and out[1] (high
// word) once every earlier kernel on `stream` is done: the harness's timer.
Status LaunchDeviceClock(uint32_t* out, cudaStream_t stream);

}  // namespace tsm2

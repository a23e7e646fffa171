// Host entry point of the host-rows copy (kernels/host_rows.cuh), without
// XLA: the FFI handler (cuda_handler.cc) calls it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ffi/common/status.h"
#include "ffi/hostmem/staging.h"

namespace tsm2 {

// Copies rows [chunk * rows, chunk * rows + rows) of the total_rows x
// row_bytes row-major matrix at `src` (mapped host memory, the address the
// device sees) to `dst` (rows x row_bytes), zeros past total_rows. `chunk`
// is a device int32. Loads are as wide as `src` and row_bytes allow (16
// bytes when both are multiples of 16); `dst` must be 16-byte aligned. Where
// `staged` holds a copy of the chunk the index names, it is read instead.
Status LaunchHostRows(const void* src, int64_t total_rows, int64_t row_bytes, const int32_t* chunk,
                      int64_t rows, void* dst, const StagedChunk& staged, cudaStream_t stream);

}  // namespace tsm2

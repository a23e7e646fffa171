// Launch of the host-rows copy: the widest load the source's alignment and
// row length allow, a grid of a few blocks per SM striding over the chunk.
#include <algorithm>

#include "ffi/common/device.h"
#include "ffi/hostmem/kernels/host_rows.cuh"
#include "ffi/hostmem/launcher.h"

namespace tsm2 {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 8;
// Blocks per SM: 2048 threads each with kUnroll loads in flight is far more
// than the link needs, and leaves the grid-stride loop short.
constexpr int kBlocksPerSm = 4;

template <typename V>
Status Launch(const void* src, int64_t total_rows, int64_t row_bytes, const int32_t* chunk,
              int64_t rows, void* dst, const StagedChunk& staged, cudaStream_t stream) {
  const int64_t row_vecs = row_bytes / static_cast<int64_t>(sizeof(V));
  const int64_t total = rows * row_vecs;
  int sms = 0;
  TSM2_CUDA_RETURN_IF_ERROR(SmCount(&sms));
  const int64_t wanted = (total + int64_t{kThreads} * kUnroll - 1) / (int64_t{kThreads} * kUnroll);
  const int blocks = static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>(wanted, static_cast<int64_t>(sms) * kBlocksPerSm)));
  HostRowsKernel<V, kThreads, kUnroll><<<blocks, kThreads, 0, stream>>>(
      static_cast<const V*>(src), total_rows, row_vecs, chunk, rows, static_cast<V*>(dst), staged);
  TSM2_RETURN_IF_LAUNCH_FAILED("HostRowsKernel");
  return Status{};
}

}  // namespace

Status LaunchHostRows(const void* src, int64_t total_rows, int64_t row_bytes, const int32_t* chunk,
                      int64_t rows, void* dst, const StagedChunk& staged, cudaStream_t stream) {
  if (rows <= 0 || row_bytes <= 0) return Status{};
  if (reinterpret_cast<uintptr_t>(dst) % 16 != 0) {
    return TSM2_FAIL(cudaErrorMisalignedAddress, "LaunchHostRows: dst is not 16-byte aligned");
  }
  // Every row starts at src + r * row_bytes, so a width that divides both the
  // base address and the row length aligns every load.
  const uint64_t both = reinterpret_cast<uintptr_t>(src) | static_cast<uint64_t>(row_bytes);
  if (both % 16 == 0)
    return Launch<uint4>(src, total_rows, row_bytes, chunk, rows, dst, staged, stream);
  if (both % 8 == 0)
    return Launch<uint2>(src, total_rows, row_bytes, chunk, rows, dst, staged, stream);
  if (both % 4 == 0) {
    return Launch<uint32_t>(src, total_rows, row_bytes, chunk, rows, dst, staged, stream);
  }
  if (both % 2 == 0) {
    return Launch<uint16_t>(src, total_rows, row_bytes, chunk, rows, dst, staged, stream);
  }
  return Launch<uint8_t>(src, total_rows, row_bytes, chunk, rows, dst, staged, stream);
}

}  // namespace tsm2

// The CUDA handler of tsm2_host_rows (handlers.h): checks the chunk index
// and the result against the attributes, has the chunk it expects copied
// ahead (staging.h), launches on XLA's stream, reports a failure as an
// ffi::Error.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <mutex>
#include <string>

#include "ffi/common/cuda_error.h"
#include "ffi/common/ffi_helpers.h"
#include "ffi/hostmem/handlers.h"
#include "ffi/hostmem/launcher.h"

namespace tsm2 {
namespace {

ffi::Error HostRowsImpl(cudaStream_t stream, ffi::AnyBuffer chunk, ffi::Result<ffi::AnyBuffer> out,
                        uint64_t host_ptr, int64_t total_rows, int64_t row_bytes) {
  if (!HasShape(chunk, ffi::DataType::S32, {})) {
    return ffi::Error::InvalidArgument("tsm2_host_rows: chunk must be an s32 scalar, got " +
                                       DescribeBuffer(chunk));
  }
  auto dims = out->dimensions();
  const int64_t rows = dims.size() >= 1 ? dims[0] : 0;
  const std::string what =
      "host_ptr=" + std::to_string(host_ptr) + ", total_rows=" + std::to_string(total_rows) +
      ", row_bytes=" + std::to_string(row_bytes) + ", result=" + DescribeBuffer(*out);
  if (host_ptr == 0 || total_rows < 0 || row_bytes < 1 || dims.size() < 1 ||
      static_cast<int64_t>(out->size_bytes()) != rows * row_bytes) {
    return ffi::Error::InvalidArgument(
        "tsm2_host_rows: need host_ptr != 0, total_rows >= 0, row_bytes >= 1 and a result of "
        "[rows, ...] holding rows * row_bytes bytes; got " +
        what);
  }
  (void)cudaGetLastError();  // never blame this launch for an earlier failure
  ChunkStaging* staging = nullptr;
  TSM2_FFI_RETURN_IF_LAUNCH_FAILED(
      "tsm2_host_rows",
      StagingFor(HostRowsSource{static_cast<uintptr_t>(host_ptr), total_rows, row_bytes, rows},
                 &staging),
      what);
  std::unique_lock<std::mutex> lock;
  StagedChunk staged;
  if (staging != nullptr && rows > 0) {
    lock = std::unique_lock<std::mutex>(staging->mutex());
    TSM2_FFI_RETURN_IF_LAUNCH_FAILED("tsm2_host_rows", staging->Begin(stream, &staged), what);
  }
  TSM2_FFI_RETURN_IF_LAUNCH_FAILED(
      "tsm2_host_rows",
      LaunchHostRows(reinterpret_cast<const void*>(static_cast<uintptr_t>(host_ptr)), total_rows,
                     row_bytes, static_cast<const int32_t*>(chunk.untyped_data()), rows,
                     out->untyped_data(), staged, stream),
      what);
  if (lock.owns_lock()) {
    TSM2_FFI_RETURN_IF_LAUNCH_FAILED("tsm2_host_rows", staging->End(stream), what);
  }
  return ffi::Error::Success();
}

}  // namespace
}  // namespace tsm2

XLA_FFI_DEFINE_HANDLER_SYMBOL(Tsm2HostRowsCuda, tsm2::HostRowsImpl,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<xla::ffi::AnyBuffer>()  // s32[]: the chunk index
                                  .Ret<xla::ffi::AnyBuffer>()  // [rows, ...]: the chunk's rows
                                  .Attr<uint64_t>("host_ptr")  // the device's address of row 0
                                  .Attr<int64_t>("total_rows")
                                  .Attr<int64_t>("row_bytes"));

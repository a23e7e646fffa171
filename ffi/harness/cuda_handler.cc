// The CUDA handlers of the harness's targets (handlers.h): check the result
// buffer, launch on XLA's stream, report a failure as an ffi::Error.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "ffi/common/cuda_error.h"
#include "ffi/common/ffi_helpers.h"
#include "ffi/harness/handlers.h"
#include "ffi/harness/launcher.h"

namespace tsm2 {
namespace {

ffi::Error StreamReadImpl(cudaStream_t stream, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> out) {
  if (out->element_type() != ffi::DataType::U32 || out->dimensions().size() != 1) {
    return ffi::Error::InvalidArgument("tsm2_stream_read: result must be a 1-D u32 array, got " +
                                       DescribeBuffer(*out));
  }
  (void)cudaGetLastError();  // never blame this launch for an earlier failure
  TSM2_FFI_RETURN_IF_LAUNCH_FAILED(
      "tsm2_stream_read",
      LaunchStreamRead(x.untyped_data(), static_cast<int64_t>(x.size_bytes()),
                       static_cast<uint32_t*>(out->untyped_data()),
                       static_cast<int64_t>(out->element_count()), stream),
      "x=" + DescribeBuffer(x));
  return ffi::Error::Success();
}

// Operands are ignored: they only order the stamp after whatever made them.
ffi::Error DeviceClockImpl(cudaStream_t stream, ffi::RemainingArgs,
                           ffi::Result<ffi::AnyBuffer> out) {
  if (out->element_type() != ffi::DataType::U32 || out->element_count() != 2) {
    return ffi::Error::InvalidArgument("tsm2_device_clock: result must be u32[2], got " +
                                       DescribeBuffer(*out));
  }
  (void)cudaGetLastError();
  TSM2_FFI_RETURN_IF_LAUNCH_FAILED(
      "tsm2_device_clock", LaunchDeviceClock(static_cast<uint32_t*>(out->untyped_data()), stream),
      "");
  return ffi::Error::Success();
}

}  // namespace
}  // namespace tsm2

XLA_FFI_DEFINE_HANDLER_SYMBOL(Tsm2StreamReadCuda, tsm2::StreamReadImpl,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<xla::ffi::AnyBuffer>()   // x: any dtype and shape
                                  .Ret<xla::ffi::AnyBuffer>(),  // u32[blocks]: XOR per block
                              {xla::ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(Tsm2DeviceClockCuda, tsm2::DeviceClockImpl,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::PlatformStream<cudaStream_t>>()
                                  .RemainingArgs()              // dependencies only
                                  .Ret<xla::ffi::AnyBuffer>(),  // u32[2]: ns, low word first
                              {xla::ffi::Traits::kCmdBufferCompatible});

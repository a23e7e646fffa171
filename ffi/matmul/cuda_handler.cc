// XLA FFI handlers for the CUDA targets: decode and validate the buffers,
// plan the launch, launch on XLA's stream and turn any CUDA error into an
// ffi::Error that names the op, shapes and dtypes.
//
// The partial sums of tiles split between blocks go to a second result that
// XLA allocates (sized by _tsm2_ext.workspace_bytes_per_block), so a call
// never allocates or synchronizes and the handler is CUDA-graph compatible.
#include <cuda_runtime_api.h>

#include <string>

#include "ffi/handlers.h"
#include "ffi/matmul/launcher.h"
#include "ffi/matmul/problem.h"
#include "ffi/matmul/handlers.h"

namespace tsm2 {
namespace {

ffi::Error CudaFailure(std::string_view op, const std::string& what, cudaError_t err,
                       const ffi::AnyBuffer& a, const ffi::AnyBuffer& b, const ffi::AnyBuffer& c) {
  return ffi::Error::Internal(std::string(op) + ": " + what + " failed: " + cudaGetErrorName(err) +
                              " (" + cudaGetErrorString(err) + ") for a=" + DescribeBuffer(a) +
                              ", b=" + DescribeBuffer(b) + ", c=" + DescribeBuffer(c));
}

ffi::Error MatmulCudaImpl(cudaStream_t stream, ffi::AnyBuffer a, ffi::AnyBuffer b,
                          ffi::Result<ffi::AnyBuffer> c, ffi::Result<ffi::AnyBuffer> workspace,
                          int32_t kernel, int32_t layout) {
  constexpr std::string_view kOp = "tsm2_matmul (cuda)";
  // Our statically linked runtime keeps its own last-error state; clear it so
  // a launch is never blamed for an earlier, already reported failure.
  (void)cudaGetLastError();
  MatmulProblem prob;
  if (auto err = DecodeMatmul(kOp, a, b, *c, layout, &prob); !err.success()) return err;
  if (auto err = CheckKernel(kOp, kernel, prob.layout); !err.success()) return err;
  if (prob.batch == 0 || prob.m == 0 || prob.n == 0) return ffi::Error::Success();
  if (prob.k == 0) {  // an empty sum: all-zero bits are +0.0 in every float type
    cudaError_t e = cudaMemsetAsync(c->untyped_data(), 0, c->size_bytes(), stream);
    return e == cudaSuccess ? ffi::Error::Success() : CudaFailure(kOp, "memset", e, a, b, *c);
  }

  DeviceMatmul p;
  p.a = a.untyped_data();
  p.b = b.untyped_data();
  p.c = c->untyped_data();
  p.batch = prob.batch;
  p.m = prob.m;
  p.k = prob.k;
  p.n = prob.n;
  p.a_batch_stride = prob.a_batch_stride;
  p.b_batch_stride = prob.b_batch_stride;
  p.type = ToElemType(prob.dtype);
  p.layout = prob.layout;
  p.out_f32 = prob.out_dtype != prob.dtype;
  MatmulPlan plan;
  if (cudaError_t e = PlanMatmul(p, static_cast<Kernel>(kernel), workspace->size_bytes(), &plan);
      e != cudaSuccess) {
    return CudaFailure(kOp, "planning the launch", e, a, b, *c);
  }
  if (cudaError_t e = LaunchMatmul(p, plan, workspace->untyped_data(), stream); e != cudaSuccess) {
    return CudaFailure(kOp, "kernel launch", e, a, b, *c);
  }
  return ffi::Error::Success();
}

ffi::Error StreamReadImpl(cudaStream_t stream, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> out) {
  if (out->element_type() != ffi::DataType::U32 || out->dimensions().size() != 1) {
    return ffi::Error::InvalidArgument("tsm2_stream_read: result must be a 1-D u32 array, got " +
                                       DescribeBuffer(*out));
  }
  cudaError_t e = LaunchStreamRead(x.untyped_data(), static_cast<int64_t>(x.size_bytes()),
                                   static_cast<uint32_t*>(out->untyped_data()),
                                   static_cast<int64_t>(out->element_count()), stream);
  if (e != cudaSuccess) {
    return ffi::Error::Internal(std::string("tsm2_stream_read: launch failed: ") +
                                cudaGetErrorString(e) + " for x=" + DescribeBuffer(x));
  }
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
  cudaError_t e = LaunchDeviceClock(static_cast<uint32_t*>(out->untyped_data()), stream);
  if (e != cudaSuccess) {
    return ffi::Error::Internal(std::string("tsm2_device_clock: launch failed: ") +
                                cudaGetErrorString(e));
  }
  return ffi::Error::Success();
}

}  // namespace
}  // namespace tsm2

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Tsm2MatmulCuda, tsm2::MatmulCudaImpl,
    tsm2::MatmulSignature(xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()),
    {xla::ffi::Traits::kCmdBufferCompatible});

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

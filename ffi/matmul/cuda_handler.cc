// The CUDA handler of tsm2_matmul: decode and validate the call
// (problem.h), hand its element type to the one dispatch
// (ffi/common/dispatch.h), plan the launch once (PlanMatmul, plan.cuh) and
// run the plan on XLA's stream (LaunchMatmul), turning a failure into an
// ffi::Error that names the op, what failed, and the buffers.
//
// The partial sums of contractions split between blocks go to the
// `workspace` result, which XLA allocates at the size Python asked for
// (_tsm2_ext.workspace_bytes, from the same plans), so a call never
// allocates or synchronizes and the handler is CUDA-graph compatible.
#include <cuda_runtime_api.h>

#include <string>

#include "ffi/common/cuda_error.h"
#include "ffi/common/dispatch.h"
#include "ffi/common/ffi_helpers.h"
#include "ffi/matmul/handlers.h"
#include "ffi/matmul/launcher.h"
#include "ffi/matmul/problem.h"

namespace tsm2 {
namespace {

ffi::Error MatmulCudaImpl(cudaStream_t stream, ffi::AnyBuffer a, ffi::AnyBuffer b,
                          ffi::Result<ffi::AnyBuffer> c, ffi::Result<ffi::AnyBuffer> workspace,
                          int32_t kernel, int32_t layout) {
  constexpr std::string_view kOp = "tsm2_matmul (cuda)";
  // Our statically linked runtime keeps its own last-error state; clear it so
  // a launch is never blamed for an earlier, already reported failure.
  (void)cudaGetLastError();
  MatmulProblem prob;
  TSM2_FFI_RETURN_IF_ERROR(DecodeMatmul(kOp, a, b, *c, kernel, layout, &prob));
  // Described only when a call fails: the success path builds no strings.
  const auto operands = [&] {
    return "a=" + DescribeBuffer(a) + ", b=" + DescribeBuffer(b) + ", c=" + DescribeBuffer(*c);
  };
  if (prob.batch == 0 || prob.m == 0 || prob.n == 0) return ffi::Error::Success();
  if (prob.k == 0) {  // an empty sum: all-zero bits are +0.0 in every float type
    TSM2_FFI_RETURN_IF_CUDA_ERROR(
        kOp, cudaMemsetAsync(c->untyped_data(), 0, c->size_bytes(), stream), operands());
    return ffi::Error::Success();
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
  p.layout = prob.layout;
  p.out_f32 = prob.out_dtype != prob.dtype;
  p.workspace = workspace->untyped_data();
  p.workspace_bytes = workspace->size_bytes();
  return DispatchElemType(kOp, prob.dtype, [&](auto elem) -> ffi::Error {
    MatmulPlan plan;
    TSM2_FFI_RETURN_IF_LAUNCH_FAILED(kOp, PlanMatmul<decltype(elem)::value>(p, prob.kernel, &plan),
                                     operands());
    TSM2_FFI_RETURN_IF_LAUNCH_FAILED(kOp, LaunchMatmul(p, plan, stream), operands());
    return ffi::Error::Success();
  });
}

}  // namespace
}  // namespace tsm2

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Tsm2MatmulCuda, tsm2::MatmulCudaImpl,
    tsm2::MatmulSignature(xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()),
    {xla::ffi::Traits::kCmdBufferCompatible});

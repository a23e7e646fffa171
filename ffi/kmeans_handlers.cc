// XLA FFI handler of the CUDA `tsm2_kmeans_step` target: validate (the same
// checks as the CPU reference), check that the fused kernel takes (d, k),
// launch on XLA's stream. The workspace (one partial per block) is a result
// XLA allocates, sized by _tsm2_ext.kmeans_plan, so the handler never
// allocates or synchronizes and is CUDA-graph compatible.
#include <cuda_runtime_api.h>

#include <string>

#include "ffi/handlers.h"
#include "ffi/kmeans_plan.h"
#include "ffi/kmeans_problem.h"
#include "ffi/launch_kmeans.h"
#include "ffi/signatures.h"

namespace tsm2 {
namespace {

ffi::Error KmeansCudaImpl(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer c, ffi::AnyBuffer w,
                          ffi::Result<ffi::AnyBuffer> labels, ffi::Result<ffi::AnyBuffer> mind,
                          ffi::Result<ffi::AnyBuffer> sums, ffi::Result<ffi::AnyBuffer> counts,
                          ffi::Result<ffi::AnyBuffer> inertia,
                          ffi::Result<ffi::AnyBuffer> workspace) {
  constexpr std::string_view kOp = "tsm2_kmeans_step (cuda)";
  (void)cudaGetLastError();  // never blame this launch for an earlier failure
  KmeansProblem p;
  if (auto err = DecodeKmeans(kOp, x, c, w, *labels, *mind, *sums, *counts, *inertia, &p);
      !err.success()) {
    return err;
  }
  const int itemsize = ItemSize(p.dtype);
  if (!KmeansSupported(itemsize, p.d, p.k)) {
    return ffi::Error::InvalidArgument(
        std::string(kOp) + ": the fused kernel takes 1 <= k <= " + std::to_string(kKmeansMaxK) +
        " and 1 <= d <= " + std::to_string(kKmeansMaxD) + " (fewer for f64: see " +
        "_tsm2_ext.kmeans_plan), got x=" + DescribeBuffer(x) + ", c=" + DescribeBuffer(c) +
        "; use jax_tsm2.kmeans.fused.lloyd_step, which falls back to the jnp path");
  }
  DeviceKmeans d;
  d.x = x.untyped_data();
  d.c = c.untyped_data();
  d.w = w.untyped_data();
  d.labels = static_cast<int32_t*>(labels->untyped_data());
  d.mind = mind->untyped_data();
  d.sums = sums->untyped_data();
  d.counts = counts->untyped_data();
  d.inertia = inertia->untyped_data();
  d.n = p.n;
  d.d = p.d;
  d.k = p.k;
  d.type = ToElemType(p.dtype);
  if (cudaError_t e =
          LaunchKmeansStep(d, workspace->untyped_data(), workspace->size_bytes(), stream);
      e != cudaSuccess) {
    return ffi::Error::Internal(std::string(kOp) + ": launch failed: " + cudaGetErrorName(e) +
                                " (" + cudaGetErrorString(e) + ") for x=" + DescribeBuffer(x) +
                                ", c=" + DescribeBuffer(c) + ", workspace of " +
                                std::to_string(workspace->size_bytes()) + " bytes");
  }
  return ffi::Error::Success();
}

}  // namespace
}  // namespace tsm2

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Tsm2KmeansStepCuda, tsm2::KmeansCudaImpl,
    tsm2::KmeansStepSignature(xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()),
    {xla::ffi::Traits::kCmdBufferCompatible});

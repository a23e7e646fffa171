// The CUDA handlers of tsm2_kmeans_assign and tsm2_kmeans_sums: validate
// with the CPU references' checks (tiled_problem.h), hand the element type
// to the one dispatch, launch on XLA's stream (tiled_launcher.h). The
// workspaces are results XLA allocates, sized by _tsm2_ext.kmeans_tiled_plan,
// so the handlers never allocate or synchronize and are CUDA-graph
// compatible.
#include <cuda_runtime_api.h>

#include <string>

#include "ffi/common/cuda_error.h"
#include "ffi/common/dispatch.h"
#include "ffi/common/ffi_helpers.h"
#include "ffi/kmeans/handlers.h"
#include "ffi/kmeans/tiled_launcher.h"
#include "ffi/kmeans/tiled_problem.h"

namespace tsm2 {
namespace {

ffi::Error KmeansAssignCudaImpl(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer x_sq,
                                ffi::AnyBuffer c, ffi::Result<ffi::AnyBuffer> labels,
                                ffi::Result<ffi::AnyBuffer> mind,
                                ffi::Result<ffi::AnyBuffer> workspace, int32_t precision) {
  constexpr std::string_view kOp = "tsm2_kmeans_assign (cuda)";
  (void)cudaGetLastError();  // never blame this launch for an earlier failure
  KmeansAssignProblem p;
  TSM2_FFI_RETURN_IF_ERROR(DecodeKmeansAssign(kOp, x, x_sq, c, *labels, *mind, precision, &p));
  DeviceKmeansAssign a;
  a.x = x.untyped_data();
  a.c = c.untyped_data();
  a.x_sq = static_cast<const float*>(x_sq.untyped_data());
  a.labels = static_cast<int32_t*>(labels->untyped_data());
  a.mind = static_cast<float*>(mind->untyped_data());
  a.workspace = workspace->untyped_data();
  a.workspace_bytes = workspace->size_bytes();
  a.n = p.n;
  a.d = p.d;
  a.k = p.k;
  a.precision = p.precision;
  return DispatchElemType(kOp, p.dtype, [&](auto elem) -> ffi::Error {
    constexpr ElemType kE = decltype(elem)::value;
    if constexpr (kE == ElemType::kF64) {
      return ffi::Error::InvalidArgument(std::string(kOp) + ": f64 has no tiled assignment");
    } else {
      TSM2_FFI_RETURN_IF_LAUNCH_FAILED(kOp, LaunchKmeansAssign<kE>(a, stream),
                                       "x=" + DescribeBuffer(x) + ", c=" + DescribeBuffer(c) +
                                           ", workspace of " +
                                           std::to_string(workspace->size_bytes()) + " bytes");
      return ffi::Error::Success();
    }
  });
}

ffi::Error KmeansSumsCudaImpl(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer w,
                              ffi::AnyBuffer labels, ffi::AnyBuffer mind,
                              ffi::Result<ffi::AnyBuffer> sums, ffi::Result<ffi::AnyBuffer> counts,
                              ffi::Result<ffi::AnyBuffer> inertia,
                              ffi::Result<ffi::AnyBuffer> workspace, int64_t bucket, int64_t chunks,
                              int64_t piece) {
  constexpr std::string_view kOp = "tsm2_kmeans_sums (cuda)";
  (void)cudaGetLastError();  // never blame this launch for an earlier failure
  KmeansSumsProblem p;
  TSM2_FFI_RETURN_IF_ERROR(DecodeKmeansSums(kOp, x, w, labels, mind, *sums, *counts, *inertia,
                                            bucket, chunks, piece, &p));
  DeviceKmeansSums s;
  s.x = x.untyped_data();
  s.w = w.untyped_data();
  s.labels = static_cast<const int32_t*>(labels.untyped_data());
  s.mind = mind.untyped_data();
  s.sums = sums->untyped_data();
  s.counts = counts->untyped_data();
  s.inertia = inertia->untyped_data();
  s.workspace = workspace->untyped_data();
  s.workspace_bytes = workspace->size_bytes();
  s.n = p.n;
  s.d = p.d;
  s.k = p.k;
  s.bucket = bucket;
  s.chunks = chunks;
  s.piece = piece;
  return DispatchElemType(kOp, p.dtype, [&](auto elem) -> ffi::Error {
    TSM2_FFI_RETURN_IF_LAUNCH_FAILED(kOp, LaunchKmeansSums<decltype(elem)::value>(s, stream),
                                     "x=" + DescribeBuffer(x) + ", sums=" + DescribeBuffer(*sums) +
                                         ", workspace of " +
                                         std::to_string(workspace->size_bytes()) + " bytes");
    return ffi::Error::Success();
  });
}

}  // namespace
}  // namespace tsm2

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Tsm2KmeansAssignCuda, tsm2::KmeansAssignCudaImpl,
    tsm2::KmeansAssignSignature(
        xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()),
    {xla::ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Tsm2KmeansSumsCuda, tsm2::KmeansSumsCudaImpl,
    tsm2::KmeansSumsSignature(xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()),
    {xla::ffi::Traits::kCmdBufferCompatible});

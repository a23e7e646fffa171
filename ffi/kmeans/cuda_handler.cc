// The CUDA handlers of tsm2_kmeans_step (validate with the same checks as
// the CPU reference, check that the fused kernel takes (d, k), hand the
// element type to the one dispatch, plan once and run the plan on XLA's
// stream) and of tsm2_kmeans_update (the centroids at the end of an
// iteration). The workspace (one partial per block) is a result XLA
// allocates, sized by _tsm2_ext.kmeans_plan, so the handlers never allocate
// or synchronize and are CUDA-graph compatible.
#include <cuda_runtime_api.h>

#include <string>

#include "ffi/common/cuda_error.h"
#include "ffi/common/dispatch.h"
#include "ffi/common/ffi_helpers.h"
#include "ffi/kmeans/handlers.h"
#include "ffi/kmeans/launcher.h"
#include "ffi/kmeans/plan.h"
#include "ffi/kmeans/problem.h"

namespace tsm2 {
namespace {

// The step (check 0), the row-checked step (1, row_faults and row_margin set)
// or the checked step with fault injection (2, inject set too).
ffi::Error KmeansCudaCommon(std::string_view kOp, int check, cudaStream_t stream, ffi::AnyBuffer x,
                            ffi::AnyBuffer c, ffi::AnyBuffer w, ffi::Result<ffi::AnyBuffer> labels,
                            ffi::Result<ffi::AnyBuffer> mind, ffi::Result<ffi::AnyBuffer> sums,
                            ffi::Result<ffi::AnyBuffer> counts, ffi::Result<ffi::AnyBuffer> inertia,
                            ffi::AnyBuffer* row_faults, ffi::AnyBuffer* row_margin,
                            const ffi::AnyBuffer* inject, ffi::Result<ffi::AnyBuffer> workspace) {
  (void)cudaGetLastError();  // never blame this launch for an earlier failure
  KmeansProblem p;
  TSM2_FFI_RETURN_IF_ERROR(
      DecodeKmeans(kOp, x, c, w, *labels, *mind, *sums, *counts, *inertia, &p));
  if (check > 0) {
    TSM2_FFI_RETURN_IF_ERROR(DecodeKmeansCheck(kOp, *row_faults, *row_margin, inject));
  }
  // Described only when a call fails: the success path builds no strings.
  const auto operands = [&] {
    return "x=" + DescribeBuffer(x) + ", c=" + DescribeBuffer(c) + ", workspace of " +
           std::to_string(workspace->size_bytes()) + " bytes";
  };
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
  d.workspace = workspace->untyped_data();
  d.workspace_bytes = workspace->size_bytes();
  if (check > 0) {
    d.row_faults = static_cast<int32_t*>(row_faults->untyped_data());
    d.row_margin = static_cast<float*>(row_margin->untyped_data());
  }
  if (check == 2) d.inject = static_cast<const KmeansInjection*>(inject->untyped_data());
  return DispatchElemType(kOp, p.dtype, [&](auto elem) -> ffi::Error {
    constexpr ElemType kE = decltype(elem)::value;
    if (!KmeansSupported(ItemSize(kE), p.d, p.k)) {
      return ffi::Error::InvalidArgument(
          std::string(kOp) + ": the fused kernel takes 1 <= k <= " + std::to_string(kKmeansMaxK) +
          " and 1 <= d <= " + std::to_string(kKmeansMaxD) + " (fewer for f64: see " +
          "_tsm2_ext.kmeans_plan), got x=" + DescribeBuffer(x) + ", c=" + DescribeBuffer(c) +
          "; use jax_tsm2.kmeans.fused.lloyd_step, which falls back to the jnp path");
    }
    KmeansStepPlan plan;
    const Status planned = check == 0   ? PlanKmeansStep<kE>(d, &plan)
                           : check == 1 ? PlanKmeansStepChecked<kE, 1>(d, &plan)
                                        : PlanKmeansStepChecked<kE, 2>(d, &plan);
    TSM2_FFI_RETURN_IF_LAUNCH_FAILED(kOp, planned, operands());
    TSM2_FFI_RETURN_IF_LAUNCH_FAILED(kOp, LaunchKmeansStep(d, plan, stream), operands());
    return ffi::Error::Success();
  });
}

ffi::Error KmeansCudaImpl(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer c, ffi::AnyBuffer w,
                          ffi::Result<ffi::AnyBuffer> labels, ffi::Result<ffi::AnyBuffer> mind,
                          ffi::Result<ffi::AnyBuffer> sums, ffi::Result<ffi::AnyBuffer> counts,
                          ffi::Result<ffi::AnyBuffer> inertia,
                          ffi::Result<ffi::AnyBuffer> workspace) {
  return KmeansCudaCommon("tsm2_kmeans_step (cuda)", 0, stream, x, c, w, labels, mind, sums, counts,
                          inertia, nullptr, nullptr, nullptr, workspace);
}

ffi::Error KmeansCheckedCudaImpl(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer c,
                                 ffi::AnyBuffer w, ffi::Result<ffi::AnyBuffer> labels,
                                 ffi::Result<ffi::AnyBuffer> mind, ffi::Result<ffi::AnyBuffer> sums,
                                 ffi::Result<ffi::AnyBuffer> counts,
                                 ffi::Result<ffi::AnyBuffer> inertia,
                                 ffi::Result<ffi::AnyBuffer> row_faults,
                                 ffi::Result<ffi::AnyBuffer> row_margin,
                                 ffi::Result<ffi::AnyBuffer> workspace) {
  return KmeansCudaCommon("tsm2_kmeans_step_checked (cuda)", 1, stream, x, c, w, labels, mind, sums,
                          counts, inertia, &*row_faults, &*row_margin, nullptr, workspace);
}

ffi::Error KmeansInjectCudaImpl(
    cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer c, ffi::AnyBuffer w,
    ffi::AnyBuffer inject, ffi::Result<ffi::AnyBuffer> labels, ffi::Result<ffi::AnyBuffer> mind,
    ffi::Result<ffi::AnyBuffer> sums, ffi::Result<ffi::AnyBuffer> counts,
    ffi::Result<ffi::AnyBuffer> inertia, ffi::Result<ffi::AnyBuffer> row_faults,
    ffi::Result<ffi::AnyBuffer> row_margin, ffi::Result<ffi::AnyBuffer> workspace) {
  return KmeansCudaCommon("tsm2_kmeans_step_checked_inject (cuda)", 2, stream, x, c, w, labels,
                          mind, sums, counts, inertia, &*row_faults, &*row_margin, &inject,
                          workspace);
}

// tsm2_kmeans_update: x fixes n, d and the element type; every other buffer
// must match it in the accumulator type.
ffi::Error KmeansUpdateCudaImpl(cudaStream_t stream, ffi::AnyBuffer sums, ffi::AnyBuffer counts,
                                ffi::AnyBuffer c_old, ffi::AnyBuffer mind, ffi::AnyBuffer x,
                                ffi::AnyBuffer w, ffi::AnyBuffer labels,
                                ffi::Result<ffi::AnyBuffer> c_new,
                                ffi::Result<ffi::AnyBuffer> workspace) {
  constexpr std::string_view kOp = "tsm2_kmeans_update (cuda)";
  (void)cudaGetLastError();  // never blame this launch for an earlier failure
  auto fail = [&](const std::string& why) {
    return ffi::Error::InvalidArgument(
        std::string(kOp) + ": " + why + " (sums=" + DescribeBuffer(sums) +
        ", counts=" + DescribeBuffer(counts) + ", c_old=" + DescribeBuffer(c_old) +
        ", mind=" + DescribeBuffer(mind) + ", x=" + DescribeBuffer(x) + ", w=" + DescribeBuffer(w) +
        ", labels=" + DescribeBuffer(labels) + ", c_new=" + DescribeBuffer(*c_new) + ")");
  };
  auto xd = x.dimensions();
  if (xd.size() != 2 || !IsSupportedInput(x.element_type())) {
    return fail("x must be 2-D f32, f64, bf16 or f16");
  }
  const int64_t n = xd[0], d = xd[1], k = sums.dimensions().size() == 2 ? sums.dimensions()[0] : -1;
  const ffi::DataType acc = AccDataType(x.element_type());
  if (k < 1 || !HasShape(sums, acc, {k, d}) || !HasShape(c_old, acc, {k, d}) ||
      !HasShape(*c_new, acc, {k, d}) || !HasShape(counts, acc, {k}) || !HasShape(mind, acc, {n}) ||
      !HasShape(w, acc, {n}) || !HasShape(labels, ffi::DataType::S32, {n})) {
    return fail(
        "need sums, c_old, c_new [k, d], counts [k], mind and w [n] in x's accumulator "
        "dtype, labels s32[n]");
  }
  if (static_cast<int64_t>(workspace->size_bytes()) < KmeansUpdateWorkspaceBytes(k)) {
    return fail("workspace of " + std::to_string(workspace->size_bytes()) + " bytes, needs " +
                std::to_string(KmeansUpdateWorkspaceBytes(k)));
  }
  DeviceKmeansUpdate u;
  u.sums = sums.untyped_data();
  u.counts = counts.untyped_data();
  u.c_old = c_old.untyped_data();
  u.mind = mind.untyped_data();
  u.x = x.untyped_data();
  u.w = w.untyped_data();
  u.labels = static_cast<const int32_t*>(labels.untyped_data());
  u.c_new = c_new->untyped_data();
  u.workspace = workspace->untyped_data();
  u.n = n;
  u.d = d;
  u.k = k;
  return DispatchElemType(kOp, x.element_type(), [&](auto elem) -> ffi::Error {
    TSM2_FFI_RETURN_IF_LAUNCH_FAILED(kOp, LaunchKmeansUpdate<decltype(elem)::value>(u, stream),
                                     "x=" + DescribeBuffer(x) + ", sums=" + DescribeBuffer(sums));
    return ffi::Error::Success();
  });
}

}  // namespace
}  // namespace tsm2

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Tsm2KmeansStepCuda, tsm2::KmeansCudaImpl,
    tsm2::KmeansStepSignature(xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()),
    {xla::ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Tsm2KmeansStepCheckedCuda, tsm2::KmeansCheckedCudaImpl,
    tsm2::KmeansStepCheckedSignature(
        xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()),
    {xla::ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Tsm2KmeansStepInjectCuda, tsm2::KmeansInjectCudaImpl,
    tsm2::KmeansStepInjectSignature(
        xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()),
    {xla::ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Tsm2KmeansUpdateCuda, tsm2::KmeansUpdateCudaImpl,
    tsm2::KmeansUpdateSignature(
        xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()),
    {xla::ffi::Traits::kCmdBufferCompatible});

// The CUDA handlers of the ABFT targets tsm2_colsums, tsm2_repair_column,
// tsm2_abft_judge, tsm2_abft_encode and tsm2_abft_verify(_inject): validate
// (the same checks as the CPU reference), hand the element and accumulator
// types to the one dispatch, launch on XLA's stream, and turn a CUDA failure
// into an ffi::Error naming the op and the buffers. Workspaces are results
// XLA allocates (sized by _tsm2_ext.colsums_plan, abft_encode_workspace,
// abft_verify_workspace and repair_blocks), so the handlers never allocate or
// synchronize and are CUDA-graph compatible.
#include <cuda_runtime_api.h>

#include <string>

#include "ffi/abft/handlers.h"
#include "ffi/abft/launcher.h"
#include "ffi/abft/problem.h"
#include "ffi/common/cuda_error.h"
#include "ffi/common/dispatch.h"
#include "ffi/common/ffi_helpers.h"

namespace tsm2 {
namespace {

ffi::Error ColsumsCudaImpl(cudaStream_t stream, ffi::AnyBuffer m, ffi::AnyBuffer v,
                           ffi::Result<ffi::AnyBuffer> out, ffi::Result<ffi::AnyBuffer> workspace,
                           int32_t abs_rows) {
  constexpr std::string_view kOp = "tsm2_colsums (cuda)";
  (void)cudaGetLastError();  // never blame this launch for an earlier failure
  ColsumsProblem p;
  TSM2_FFI_RETURN_IF_ERROR(DecodeColsums(kOp, m, v, *out, abs_rows, &p));
  DeviceColsums d;
  d.m = m.untyped_data();
  d.v = v.untyped_data();
  d.out = out->untyped_data();
  d.rows = p.rows;
  d.cols = p.cols;
  d.r = p.r;
  d.abs_rows = p.abs_rows;
  d.workspace = workspace->untyped_data();
  d.workspace_bytes = workspace->size_bytes();
  // Described only when a call fails: the success path builds no strings.
  const auto operands = [&] {
    return "m=" + DescribeBuffer(m) + ", v=" + DescribeBuffer(v) + ", workspace of " +
           std::to_string(workspace->size_bytes()) + " bytes";
  };
  return DispatchElemAndAcc(kOp, p.dtype, p.acc, [&](auto elem, auto acc) -> ffi::Error {
    ColsumsLaunchPlan plan;
    TSM2_FFI_RETURN_IF_LAUNCH_FAILED(
        kOp, (PlanColsumsLaunch<decltype(elem)::value, decltype(acc)::value>(d, &plan)),
        operands());
    TSM2_FFI_RETURN_IF_LAUNCH_FAILED(kOp, LaunchColsums(d, plan, stream), operands());
    return ffi::Error::Success();
  });
}

ffi::Error RepairCudaImpl(cudaStream_t stream, ffi::AnyBuffer flag, ffi::AnyBuffer j,
                          ffi::AnyBuffer a, ffi::AnyBuffer b, ffi::AnyBuffer c,
                          ffi::Result<ffi::AnyBuffer> c_out, ffi::Result<ffi::AnyBuffer> old_col,
                          ffi::Result<ffi::AnyBuffer> exact, ffi::Result<ffi::AnyBuffer> scale,
                          ffi::Result<ffi::AnyBuffer> workspace) {
  constexpr std::string_view kOp = "tsm2_repair_column (cuda)";
  (void)cudaGetLastError();
  RepairProblem p;
  TSM2_FFI_RETURN_IF_ERROR(
      DecodeRepair(kOp, flag, j, a, b, c, *c_out, *old_col, *exact, *scale, *workspace, &p));
  DeviceRepair d;
  d.flag = flag.untyped_data();
  d.flag_bool = p.flag_bool;
  d.j = static_cast<const int32_t*>(j.untyped_data());
  d.a = a.untyped_data();
  d.b = b.untyped_data();
  d.c = c.untyped_data();
  d.c_out = c_out->untyped_data();
  d.old_col = old_col->untyped_data();
  d.exact = exact->untyped_data();
  d.scale = scale->untyped_data();
  d.block_ok = static_cast<int32_t*>(workspace->untyped_data());
  d.m = p.m;
  d.k = p.k;
  d.n = p.n;
  // Described only when a call fails: the success path builds no strings.
  const auto operands = [&] {
    return "a=" + DescribeBuffer(a) + ", b=" + DescribeBuffer(b) + ", c=" + DescribeBuffer(c);
  };
  return DispatchElemAndAcc(kOp, p.dtype, p.acc, [&](auto elem, auto acc) -> ffi::Error {
    TSM2_FFI_RETURN_IF_LAUNCH_FAILED(
        kOp, (LaunchRepairColumn<decltype(elem)::value, decltype(acc)::value>(d, stream)),
        operands());
    return ffi::Error::Success();
  });
}

ffi::Error JudgeCudaImpl(cudaStream_t stream, ffi::AnyBuffer resid, ffi::AnyBuffer threshold,
                         ffi::AnyBuffer factor, ffi::AnyBuffer floor, ffi::AnyBuffer a,
                         ffi::AnyBuffer b, ffi::AnyBuffer c, ffi::Result<ffi::AnyBuffer> c_out,
                         ffi::Result<ffi::AnyBuffer> errors_detected,
                         ffi::Result<ffi::AnyBuffer> corrected, ffi::Result<ffi::AnyBuffer> row,
                         ffi::Result<ffi::AnyBuffer> col, ffi::Result<ffi::AnyBuffer> magnitude,
                         ffi::Result<ffi::AnyBuffer> uncorrectable,
                         ffi::Result<ffi::AnyBuffer> old_col, ffi::Result<ffi::AnyBuffer> exact,
                         ffi::Result<ffi::AnyBuffer> scale, ffi::Result<ffi::AnyBuffer> state) {
  constexpr std::string_view kOp = "tsm2_abft_judge (cuda)";
  (void)cudaGetLastError();
  RepairProblem p;
  const JudgeBuffers x{
      &resid,      &threshold,      &factor,           &floor,      &a,      &b,
      &c,          &*c_out,         &*errors_detected, &*corrected, &*row,   &*col,
      &*magnitude, &*uncorrectable, &*old_col,         &*exact,     &*scale, &*state};
  TSM2_FFI_RETURN_IF_ERROR(DecodeJudge(kOp, x, &p));
  DeviceJudge d;
  d.repair.a = a.untyped_data();
  d.repair.b = b.untyped_data();
  d.repair.c = c.untyped_data();
  d.repair.c_out = c_out->untyped_data();
  d.repair.old_col = old_col->untyped_data();
  d.repair.exact = exact->untyped_data();
  d.repair.scale = scale->untyped_data();
  d.repair.m = p.m;
  d.repair.k = p.k;
  d.repair.n = p.n;
  d.resid = resid.untyped_data();
  d.threshold = threshold.untyped_data();
  d.factor = factor.untyped_data();
  d.floor = floor.untyped_data();
  d.state = static_cast<int32_t*>(state->untyped_data());
  d.verdict = VerdictOutOf(errors_detected, corrected, row, col, magnitude, uncorrectable);
  // Described only when a call fails: the success path builds no strings.
  const auto operands = [&] {
    return "a=" + DescribeBuffer(a) + ", b=" + DescribeBuffer(b) + ", c=" + DescribeBuffer(c);
  };
  return DispatchElemAndAcc(kOp, p.dtype, p.acc, [&](auto elem, auto acc) -> ffi::Error {
    TSM2_FFI_RETURN_IF_LAUNCH_FAILED(
        kOp, (LaunchJudge<decltype(elem)::value, decltype(acc)::value>(d, stream)), operands());
    return ffi::Error::Success();
  });
}

ffi::Error EncodeCudaImpl(cudaStream_t stream, ffi::AnyBuffer a, ffi::AnyBuffer b,
                          ffi::Result<ffi::AnyBuffer> stats,
                          ffi::Result<ffi::AnyBuffer> workspace) {
  constexpr std::string_view kOp = "tsm2_abft_encode (cuda)";
  (void)cudaGetLastError();
  AbftPassProblem p;
  TSM2_FFI_RETURN_IF_ERROR(DecodeAbftEncode(kOp, a, b, *stats, &p));
  DeviceAbftEncode d;
  d.a = a.untyped_data();
  d.b = b.untyped_data();
  d.stats = stats->untyped_data();
  d.workspace = workspace->untyped_data();
  d.workspace_bytes = workspace->size_bytes();
  d.m = p.m;
  d.k = p.k;
  d.n = p.n;
  const auto operands = [&] {
    return "a=" + DescribeBuffer(a) + ", b=" + DescribeBuffer(b) + ", workspace of " +
           std::to_string(workspace->size_bytes()) + " bytes";
  };
  return DispatchElemAndAcc(kOp, p.dtype, p.acc, [&](auto elem, auto acc) -> ffi::Error {
    TSM2_FFI_RETURN_IF_LAUNCH_FAILED(
        kOp, (LaunchAbftEncode<decltype(elem)::value, decltype(acc)::value>(d, stream)),
        operands());
    return ffi::Error::Success();
  });
}

// tsm2_abft_verify and tsm2_abft_verify_inject (c_out non-null).
ffi::Error VerifyCommon(std::string_view op, cudaStream_t stream, const ffi::AnyBuffer& c,
                        const ffi::AnyBuffer& stats, const ffi::AnyBuffer& model,
                        ffi::AnyBuffer* c_out, ffi::AnyBuffer* resid, ffi::AnyBuffer* threshold,
                        ffi::AnyBuffer* workspace, int64_t row, int64_t col, int32_t bit) {
  (void)cudaGetLastError();
  AbftPassProblem p;
  TSM2_FFI_RETURN_IF_ERROR(DecodeAbftVerify(op, c, stats, model, *resid, *threshold, &p));
  if (c_out != nullptr) TSM2_FFI_RETURN_IF_ERROR(DecodeInjection(op, p, *c_out, row, col, bit));
  DeviceAbftVerify d;
  d.c = c.untyped_data();
  d.c_out = c_out != nullptr ? c_out->untyped_data() : nullptr;
  d.stats = stats.untyped_data();
  d.model = model.untyped_data();
  d.resid = resid->untyped_data();
  d.threshold = threshold->untyped_data();
  d.workspace = workspace->untyped_data();
  d.workspace_bytes = workspace->size_bytes();
  d.m = p.m;
  d.n = p.n;
  d.inject = c_out != nullptr;
  d.inject_row = row;
  d.inject_col = col;
  d.inject_bit = bit;
  const auto operands = [&] {
    return "c=" + DescribeBuffer(c) + ", workspace of " + std::to_string(workspace->size_bytes()) +
           " bytes";
  };
  return DispatchElemAndAcc(op, p.dtype, p.acc, [&](auto elem, auto acc) -> ffi::Error {
    TSM2_FFI_RETURN_IF_LAUNCH_FAILED(
        op, (LaunchAbftVerify<decltype(elem)::value, decltype(acc)::value>(d, stream)), operands());
    return ffi::Error::Success();
  });
}

ffi::Error VerifyCudaImpl(cudaStream_t stream, ffi::AnyBuffer c, ffi::AnyBuffer stats,
                          ffi::AnyBuffer model, ffi::Result<ffi::AnyBuffer> resid,
                          ffi::Result<ffi::AnyBuffer> threshold,
                          ffi::Result<ffi::AnyBuffer> workspace) {
  return VerifyCommon("tsm2_abft_verify (cuda)", stream, c, stats, model, nullptr, &*resid,
                      &*threshold, &*workspace, -1, -1, 0);
}

ffi::Error VerifyInjectCudaImpl(cudaStream_t stream, ffi::AnyBuffer c, ffi::AnyBuffer stats,
                                ffi::AnyBuffer model, ffi::Result<ffi::AnyBuffer> c_out,
                                ffi::Result<ffi::AnyBuffer> resid,
                                ffi::Result<ffi::AnyBuffer> threshold,
                                ffi::Result<ffi::AnyBuffer> workspace, int64_t inject_row,
                                int64_t inject_col, int32_t inject_bit) {
  return VerifyCommon("tsm2_abft_verify_inject (cuda)", stream, c, stats, model, &*c_out, &*resid,
                      &*threshold, &*workspace, inject_row, inject_col, inject_bit);
}

}  // namespace
}  // namespace tsm2

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Tsm2AbftEncodeCuda, tsm2::EncodeCudaImpl,
    tsm2::AbftEncodeSignature(xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()),
    {xla::ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Tsm2AbftVerifyCuda, tsm2::VerifyCudaImpl,
    tsm2::AbftVerifySignature(xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()),
    {xla::ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Tsm2AbftVerifyInjectCuda, tsm2::VerifyInjectCudaImpl,
    tsm2::AbftVerifyInjectSignature(
        xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()),
    {xla::ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Tsm2ColsumsCuda, tsm2::ColsumsCudaImpl,
    tsm2::ColsumsSignature(xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()),
    {xla::ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Tsm2RepairColumnCuda, tsm2::RepairCudaImpl,
    tsm2::RepairColumnSignature(
        xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()),
    {xla::ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Tsm2AbftJudgeCuda, tsm2::JudgeCudaImpl,
    tsm2::AbftJudgeSignature(xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()),
    {xla::ffi::Traits::kCmdBufferCompatible});

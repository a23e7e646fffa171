// The CUDA handler of tsm2_abft_rows: validate the call (row_check_problem.h,
// shared with the CPU reference), hand the element type to the one dispatch and
// launch the fused row check (launch_rows.cu) on XLA's stream. The workspace
// is a result sized by _tsm2_ext.abft_rows_workspace, so the handler never
// allocates or synchronizes and is CUDA-graph compatible.
#include <cuda_runtime_api.h>

#include <string>

#include "ffi/abft/handlers.h"
#include "ffi/abft/launcher.h"
#include "ffi/abft/row_check.h"
#include "ffi/abft/row_check_problem.h"
#include "ffi/common/cuda_error.h"
#include "ffi/common/dispatch.h"
#include "ffi/common/ffi_helpers.h"

namespace tsm2 {
namespace {

ffi::Error RowsCudaImpl(cudaStream_t stream, ffi::AnyBuffer a, ffi::AnyBuffer b,
                        ffi::AnyBuffer weights, ffi::Result<ffi::AnyBuffer> c,
                        ffi::Result<ffi::AnyBuffer> errors, ffi::Result<ffi::AnyBuffer> corrected,
                        ffi::Result<ffi::AnyBuffer> row, ffi::Result<ffi::AnyBuffer> col,
                        ffi::Result<ffi::AnyBuffer> magnitude,
                        ffi::Result<ffi::AnyBuffer> uncorrectable,
                        ffi::Result<ffi::AnyBuffer> workspace, ffi::Span<const double> model,
                        bool b_t, int64_t inject_row, int64_t inject_col, int32_t inject_bit) {
  constexpr std::string_view kOp = "tsm2_abft_rows (cuda)";
  (void)cudaGetLastError();  // never blame this launch for an earlier failure
  RowsProblem p;
  TSM2_FFI_RETURN_IF_ERROR(DecodeRows(
      kOp, a, b, weights, *c, {&*errors, &*corrected, &*row, &*col, &*magnitude, &*uncorrectable},
      model, b_t, inject_row, inject_col, inject_bit, &p));
  const auto operands = [&] {
    return "a=" + DescribeBuffer(a) + ", b=" + DescribeBuffer(b) + ", c=" + DescribeBuffer(*c);
  };
  DeviceRowCheck d;
  d.a = a.untyped_data();
  d.b = b.untyped_data();
  d.col_weights = weights.untyped_data();
  d.c = c->untyped_data();
  for (int q = 0; q < kRowModelLen; ++q) d.model[q] = model[q];
  d.m = p.m;
  d.k = p.k;
  d.n = p.n;
  d.b_t = p.b_t;
  d.inject_row = p.inject_row;
  d.inject_col = p.inject_col;
  d.inject_bit = p.inject_bit;
  d.verdict = VerdictOutOf(errors, corrected, row, col, magnitude, uncorrectable);
  d.workspace = workspace->untyped_data();
  d.workspace_bytes = workspace->size_bytes();
  return DispatchElemType(kOp, a.element_type(), [&](auto elem) -> ffi::Error {
    TSM2_FFI_RETURN_IF_LAUNCH_FAILED(kOp, LaunchRowCheck<decltype(elem)::value>(d, stream),
                                     operands());
    return ffi::Error::Success();
  });
}

}  // namespace
}  // namespace tsm2

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    Tsm2AbftRowsCuda, tsm2::RowsCudaImpl,
    tsm2::AbftRowsSignature(xla::ffi::Ffi::Bind().Ctx<xla::ffi::PlatformStream<cudaStream_t>>()),
    {xla::ffi::Traits::kCmdBufferCompatible});

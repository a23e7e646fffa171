// The CUDA handler of tsm2_abft_rows: validate the call (shapes, dtypes, the
// model vector, the injection), hand the element type to the one dispatch and
// launch the fused row check (launch_rows.cu) on XLA's stream. The workspace
// is a result sized by _tsm2_ext.abft_rows_workspace, so the handler never
// allocates or synchronizes and is CUDA-graph compatible.
#include <cuda_runtime_api.h>

#include <string>

#include "ffi/abft/handlers.h"
#include "ffi/abft/launcher.h"
#include "ffi/abft/row_check.h"
#include "ffi/common/cuda_error.h"
#include "ffi/common/dispatch.h"
#include "ffi/common/ffi_helpers.h"

namespace tsm2 {
namespace {

ffi::Error RowsCudaImpl(cudaStream_t stream, ffi::AnyBuffer a, ffi::AnyBuffer b,
                        ffi::Result<ffi::AnyBuffer> c, ffi::Result<ffi::AnyBuffer> errors,
                        ffi::Result<ffi::AnyBuffer> corrected, ffi::Result<ffi::AnyBuffer> row,
                        ffi::Result<ffi::AnyBuffer> col, ffi::Result<ffi::AnyBuffer> magnitude,
                        ffi::Result<ffi::AnyBuffer> uncorrectable,
                        ffi::Result<ffi::AnyBuffer> workspace, ffi::Span<const double> model,
                        bool b_t, int64_t inject_row, int64_t inject_col, int32_t inject_bit) {
  constexpr std::string_view kOp = "tsm2_abft_rows (cuda)";
  (void)cudaGetLastError();  // never blame this launch for an earlier failure
  const auto operands = [&] {
    return "a=" + DescribeBuffer(a) + ", b=" + DescribeBuffer(b) + ", c=" + DescribeBuffer(*c);
  };
  const auto fail = [&](const std::string& why) {
    return ffi::Error::InvalidArgument(std::string(kOp) + ": " + why + " (" + operands() + ")");
  };
  const auto ad = a.dimensions(), bd = b.dimensions();
  if (ad.size() != 2 || bd.size() != 2) return fail("a and b must be matrices");
  if (a.element_type() != b.element_type() || !IsSupportedInput(a.element_type())) {
    return fail("a and b must share one dtype of f32, f64, bf16 or f16");
  }
  const int64_t m = ad[0], k = ad[1], n = b_t ? bd[0] : bd[1];
  if ((b_t ? bd[1] : bd[0]) != k) return fail("contraction dimensions differ");
  const ffi::DataType acc =
      a.element_type() == ffi::DataType::F64 ? ffi::DataType::F64 : ffi::DataType::F32;
  if (!HasShape(*c, acc, {m, n})) return fail("c must be [m, n] in the accumulator dtype");
  if (model.size() != kRowModelLen) {
    return fail("the model attribute must hold " + std::to_string(kRowModelLen) + " values");
  }
  if (!HasShape(*errors, ffi::DataType::S32, {}) || !HasShape(*row, ffi::DataType::S32, {}) ||
      !HasShape(*col, ffi::DataType::S32, {}) || !HasShape(*corrected, ffi::DataType::PRED, {}) ||
      !HasShape(*uncorrectable, ffi::DataType::PRED, {}) || !HasShape(*magnitude, acc, {})) {
    return fail("the verdict's results must be scalars s32, pred, s32, s32, acc, pred");
  }
  if (inject_row >= 0 && (inject_row >= m || inject_col < 0 || inject_col >= n || inject_bit < 0 ||
                          inject_bit >= (acc == ffi::DataType::F64 ? 64 : 32))) {
    return fail("injection (" + std::to_string(inject_row) + ", " + std::to_string(inject_col) +
                ", bit " + std::to_string(inject_bit) + ") is outside C or its bits");
  }
  if (m == 0 || n == 0 || k == 0) {
    return fail("the fused check takes m, k, n >= 1 (jax_tsm2.abft routes others elsewhere)");
  }
  DeviceRowCheck d;
  d.a = a.untyped_data();
  d.b = b.untyped_data();
  d.c = c->untyped_data();
  for (int q = 0; q < kRowModelLen; ++q) d.model[q] = model[q];
  d.m = m;
  d.k = k;
  d.n = n;
  d.b_t = b_t;
  d.inject_row = inject_row;
  d.inject_col = inject_col;
  d.inject_bit = inject_bit;
  d.errors_detected = static_cast<int32_t*>(errors->untyped_data());
  d.corrected = static_cast<bool*>(corrected->untyped_data());
  d.row = static_cast<int32_t*>(row->untyped_data());
  d.col = static_cast<int32_t*>(col->untyped_data());
  d.magnitude = magnitude->untyped_data();
  d.uncorrectable = static_cast<bool*>(uncorrectable->untyped_data());
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

// Decodes and validates one `tsm2_abft_rows` call, for the CPU reference and
// the CUDA handler alike, so that a malformed call fails the same way on
// either platform with the op, the shapes and the dtypes in the message.
#pragma once

#include <climits>
#include <cstdint>
#include <string>
#include <string_view>

#include "ffi/abft/row_check.h"
#include "ffi/common/dispatch.h"
#include "ffi/common/ffi_helpers.h"
#include "xla/ffi/api/ffi.h"

namespace tsm2 {

struct RowsProblem {
  int64_t m = 0, k = 0, n = 0;
  bool b_t = false;
  ffi::DataType dtype = ffi::DataType::INVALID;  // of a and b
  ffi::DataType acc = ffi::DataType::INVALID;    // of c and the magnitude
  int64_t inject_row = -1, inject_col = -1;
  int32_t inject_bit = 0;
};

// The verdict's results, in the order of the call's results after c.
struct RowsVerdictBuffers {
  ffi::AnyBuffer* errors;
  ffi::AnyBuffer* corrected;
  ffi::AnyBuffer* row;
  ffi::AnyBuffer* col;
  ffi::AnyBuffer* magnitude;
  ffi::AnyBuffer* uncorrectable;
};

inline ffi::Error DecodeRows(std::string_view op, const ffi::AnyBuffer& a, const ffi::AnyBuffer& b,
                             const ffi::AnyBuffer& weights, const ffi::AnyBuffer& c,
                             const RowsVerdictBuffers& v, ffi::Span<const double> model, bool b_t,
                             int64_t inject_row, int64_t inject_col, int32_t inject_bit,
                             RowsProblem* p) {
  const auto fail = [&](const std::string& why) {
    return ffi::Error::InvalidArgument(std::string(op) + ": " + why + " (a=" + DescribeBuffer(a) +
                                       ", b=" + DescribeBuffer(b) + ", c=" + DescribeBuffer(c) +
                                       ")");
  };
  const auto ad = a.dimensions(), bd = b.dimensions();
  if (ad.size() != 2 || bd.size() != 2) return fail("a and b must be matrices");
  if (a.element_type() != b.element_type() || !IsSupportedInput(a.element_type())) {
    return fail("a and b must share one dtype of f32, f64, bf16 or f16");
  }
  p->m = ad[0];
  p->k = ad[1];
  p->n = b_t ? bd[0] : bd[1];
  p->b_t = b_t;
  p->dtype = a.element_type();
  p->acc = p->dtype == ffi::DataType::F64 ? ffi::DataType::F64 : ffi::DataType::F32;
  if ((b_t ? bd[1] : bd[0]) != p->k) return fail("contraction dimensions differ");
  if (!HasShape(c, p->acc, {p->m, p->n})) return fail("c must be [m, n] in the accumulator dtype");
  if (!HasShape(weights, p->acc, {p->n})) {
    return fail("weights must be [n] in the accumulator dtype, got " + DescribeBuffer(weights));
  }
  // The verdict's row and the list of flagged rows are 32-bit.
  if (p->m > INT32_MAX) return fail("the fused check takes at most 2^31 - 1 rows");
  if (model.size() != kRowModelLen) {
    return fail("the model attribute must hold " + std::to_string(kRowModelLen) + " values");
  }
  if (!HasShape(*v.errors, ffi::DataType::S32, {}) || !HasShape(*v.row, ffi::DataType::S32, {}) ||
      !HasShape(*v.col, ffi::DataType::S32, {}) ||
      !HasShape(*v.corrected, ffi::DataType::PRED, {}) ||
      !HasShape(*v.uncorrectable, ffi::DataType::PRED, {}) || !HasShape(*v.magnitude, p->acc, {})) {
    return fail("the verdict's results must be scalars s32, pred, s32, s32, acc, pred");
  }
  const int bits = p->acc == ffi::DataType::F64 ? 64 : 32;
  if (inject_row >= 0 && (inject_row >= p->m || inject_col < 0 || inject_col >= p->n ||
                          inject_bit < 0 || inject_bit >= bits)) {
    return fail("injection (" + std::to_string(inject_row) + ", " + std::to_string(inject_col) +
                ", bit " + std::to_string(inject_bit) + ") is outside C or its bits");
  }
  if (p->m == 0 || p->n == 0 || p->k == 0) {
    return fail("the fused check takes m, k, n >= 1 (jax_tsm2.abft routes others elsewhere)");
  }
  p->inject_row = inject_row;
  p->inject_col = inject_col;
  p->inject_bit = inject_bit;
  return ffi::Error::Success();
}

}  // namespace tsm2

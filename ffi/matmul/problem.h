// Decodes and validates the buffers and attributes of one `tsm2_matmul`
// call.
//
// Both the CPU reference handler and the CUDA handler go through
// DecodeMatmul, so a malformed call fails the same way on either platform,
// with the op name, shapes and dtypes in the message. Python checks shapes at
// trace time; this is the second line of defence for callers that bind the
// FFI target directly.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ffi/common/dispatch.h"
#include "ffi/common/ffi_helpers.h"
#include "ffi/matmul/kinds.h"
#include "xla/ffi/api/ffi.h"

namespace tsm2 {

// C[batch] = op(A[batch]) @ op(B[batch]). A batch stride of 0 means that
// operand is shared by every batch entry.
struct MatmulProblem {
  int64_t batch = 1;
  int64_t m = 0;
  int64_t k = 0;
  int64_t n = 0;
  int64_t a_batch_stride = 0;  // in elements
  int64_t b_batch_stride = 0;  // in elements
  Kernel kernel = Kernel::kTsm2r;
  Layout layout = Layout::kNN;
  ffi::DataType dtype = ffi::DataType::INVALID;      // of A and B
  ffi::DataType out_dtype = ffi::DataType::INVALID;  // of C
};

// "0 = tsm2r, 1 = tsm2l, ..." and "0 = nn, ...", from kinds.h.
template <typename E, size_t N, typename Name>
std::string IdList(const E (&values)[N], Name name) {
  std::string out;
  for (E v : values) {
    out += (out.empty() ? "" : ", ") + std::to_string(static_cast<int32_t>(v)) + " = " + name(v);
  }
  return out;
}

// Fills `p` from the buffers and the `kernel` and `layout` attributes, or
// returns InvalidArgument naming what is wrong.
inline ffi::Error DecodeMatmul(std::string_view op, const ffi::AnyBuffer& a,
                               const ffi::AnyBuffer& b, const ffi::AnyBuffer& c, int32_t kernel,
                               int32_t layout, MatmulProblem* p) {
  auto fail = [&](const std::string& why) {
    return ffi::Error::InvalidArgument(
        std::string(op) + ": " + why + " (kernel " + std::to_string(kernel) + ", layout " +
        std::to_string(layout) + ", a=" + DescribeBuffer(a) + ", b=" + DescribeBuffer(b) +
        ", c=" + DescribeBuffer(c) + ")");
  };
  if (!KernelFromId(kernel, &p->kernel)) {
    return fail("unknown kernel id (" + IdList(kKernels, KernelName) + ")");
  }
  if (!LayoutFromId(layout, &p->layout)) {
    return fail("unknown layout (" + IdList(kLayouts, LayoutName) + ")");
  }
  if (!KernelTakesLayout(p->kernel, p->layout)) {
    return fail(std::string("kernel ") + KernelName(p->kernel) + " does not take layout " +
                LayoutName(p->layout));
  }
  auto ad = a.dimensions();
  auto bd = b.dimensions();
  auto cd = c.dimensions();
  if (ad.size() < 2 || ad.size() > 3 || bd.size() < 2 || bd.size() > 3) {
    return fail("operands must have rank 2 or 3");
  }
  const size_t c_rank = (ad.size() == 3 || bd.size() == 3) ? 3 : 2;
  if (cd.size() != c_rank) return fail("result rank does not match the operands");
  if (a.element_type() != b.element_type()) return fail("operands must share one dtype");
  if (!IsSupportedInput(a.element_type())) return fail("dtype must be f32, f64, bf16 or f16");
  const bool half =
      a.element_type() == ffi::DataType::BF16 || a.element_type() == ffi::DataType::F16;
  if (c.element_type() != a.element_type() && !(half && c.element_type() == ffi::DataType::F32)) {
    return fail("result dtype must equal the operand dtype (or f32 for bf16/f16 operands)");
  }

  const int64_t a_batch = ad.size() == 3 ? ad[0] : 1;
  const int64_t b_batch = bd.size() == 3 ? bd[0] : 1;
  const int64_t batch = c_rank == 3 ? cd[0] : 1;
  const bool a_t = p->layout == Layout::kTN, b_t = p->layout == Layout::kNT;
  const int64_t a_rows = ad[ad.size() - 2], a_cols = ad[ad.size() - 1];
  const int64_t b_rows = bd[bd.size() - 2], b_cols = bd[bd.size() - 1];
  p->m = a_t ? a_cols : a_rows;
  p->k = a_t ? a_rows : a_cols;
  const int64_t kb = b_t ? b_cols : b_rows;
  p->n = b_t ? b_rows : b_cols;
  if (kb != p->k) return fail("contraction dimensions differ");
  if (cd[c_rank - 2] != p->m || cd[c_rank - 1] != p->n) return fail("result shape is not [m, n]");
  if ((a_batch != 1 && a_batch != batch) || (b_batch != 1 && b_batch != batch)) {
    return fail("batch dimensions must equal the result's or be 1");
  }
  p->batch = batch;
  p->a_batch_stride = a_batch == 1 ? 0 : p->m * p->k;
  p->b_batch_stride = b_batch == 1 ? 0 : p->k * p->n;
  p->dtype = a.element_type();
  p->out_dtype = c.element_type();
  return ffi::Error::Success();
}

}  // namespace tsm2

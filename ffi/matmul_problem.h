// Decodes and validates the buffers of one `tsm2_matmul` call.
//
// Both the CPU reference handler and the CUDA handler go through
// DecodeMatmul, so a malformed call fails the same way on either platform,
// with the op name, shapes and dtypes in the message. Python checks shapes at
// trace time; this is the second line of defence for callers that bind the
// FFI target directly.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>

#include "xla/ffi/api/ffi.h"

namespace tsm2 {

namespace ffi = xla::ffi;

// Which kernel family a call runs. The value travels as the i32 attribute
// `kernel`; Python's router (jax_tsm2/routing.py) picks it.
enum class Kernel : int32_t {
  kTsm2r = 0,  // regular A (m x k, k large) times tall-and-skinny B (k x n)
  kTsm2l = 1,  // tall-and-skinny A (m x k, k small) times small B (k x n)
};

// C[batch] = A[batch] @ B[batch], all row-major. A batch stride of 0 means
// that operand is shared by every batch entry.
struct MatmulProblem {
  int64_t batch = 1;
  int64_t m = 0;
  int64_t k = 0;
  int64_t n = 0;
  int64_t a_batch_stride = 0;                        // in elements
  int64_t b_batch_stride = 0;                        // in elements
  ffi::DataType dtype = ffi::DataType::INVALID;      // of A and B
  ffi::DataType out_dtype = ffi::DataType::INVALID;  // of C
};

inline const char* DTypeName(ffi::DataType t) {
  switch (t) {
    case ffi::DataType::F16:
      return "f16";
    case ffi::DataType::BF16:
      return "bf16";
    case ffi::DataType::F32:
      return "f32";
    case ffi::DataType::F64:
      return "f64";
    case ffi::DataType::S32:
      return "s32";
    case ffi::DataType::U32:
      return "u32";
    default:
      return "unsupported";
  }
}

inline std::string DescribeBuffer(const ffi::AnyBuffer& x) {
  std::ostringstream os;
  os << DTypeName(x.element_type()) << "[";
  auto dims = x.dimensions();
  for (size_t i = 0; i < dims.size(); ++i) os << (i ? "," : "") << dims[i];
  os << "]";
  return os.str();
}

inline bool IsSupportedInput(ffi::DataType t) {
  return t == ffi::DataType::F32 || t == ffi::DataType::F64 || t == ffi::DataType::BF16 ||
         t == ffi::DataType::F16;
}

// Fills `p` from the buffers, or returns InvalidArgument naming what is wrong.
inline ffi::Error DecodeMatmul(std::string_view op, const ffi::AnyBuffer& a,
                               const ffi::AnyBuffer& b, const ffi::AnyBuffer& c, MatmulProblem* p) {
  auto fail = [&](const std::string& why) {
    std::ostringstream os;
    os << op << ": " << why << " (a=" << DescribeBuffer(a) << ", b=" << DescribeBuffer(b)
       << ", c=" << DescribeBuffer(c) << ")";
    return ffi::Error::InvalidArgument(os.str());
  };
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
  p->m = ad[ad.size() - 2];
  p->k = ad[ad.size() - 1];
  const int64_t kb = bd[bd.size() - 2];
  p->n = bd[bd.size() - 1];
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

inline ffi::Error CheckKernel(std::string_view op, int32_t kernel) {
  if (kernel != static_cast<int32_t>(Kernel::kTsm2r) &&
      kernel != static_cast<int32_t>(Kernel::kTsm2l)) {
    return ffi::Error::InvalidArgument(std::string(op) + ": unknown kernel id " +
                                       std::to_string(kernel) + " (0 = tsm2r, 1 = tsm2l)");
  }
  return ffi::Error::Success();
}

}  // namespace tsm2

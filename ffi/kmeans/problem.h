// Decodes and validates the buffers of one `tsm2_kmeans_step` call, for the
// CPU reference and the CUDA handler alike (same checks, same messages).
//
// Contract: x [n, d] and c [k, d] of one float dtype; w [n] in the
// accumulator dtype (f64 for f64 inputs, f32 otherwise); results labels s32[n],
// mind acc[n], sums acc[k, d], counts acc[k], inertia acc[] and a u8
// workspace (CUDA: KmeansWorkspaceBytes; the CPU target ignores it).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ffi/common/dispatch.h"
#include "ffi/common/ffi_helpers.h"
#include "xla/ffi/api/ffi.h"

namespace tsm2 {

struct KmeansProblem {
  int64_t n = 0, d = 0, k = 0;
  ffi::DataType dtype = ffi::DataType::INVALID;  // of x and c
  ffi::DataType acc = ffi::DataType::INVALID;    // of w and the float results
};

inline ffi::Error DecodeKmeans(std::string_view op, const ffi::AnyBuffer& x,
                               const ffi::AnyBuffer& c, const ffi::AnyBuffer& w,
                               const ffi::AnyBuffer& labels, const ffi::AnyBuffer& mind,
                               const ffi::AnyBuffer& sums, const ffi::AnyBuffer& counts,
                               const ffi::AnyBuffer& inertia, KmeansProblem* p) {
  auto fail = [&](const std::string& why) {
    return ffi::Error::InvalidArgument(
        std::string(op) + ": " + why + " (x=" + DescribeBuffer(x) + ", c=" + DescribeBuffer(c) +
        ", w=" + DescribeBuffer(w) + ", labels=" + DescribeBuffer(labels) +
        ", mind=" + DescribeBuffer(mind) + ", sums=" + DescribeBuffer(sums) +
        ", counts=" + DescribeBuffer(counts) + ", inertia=" + DescribeBuffer(inertia) + ")");
  };
  auto xd = x.dimensions();
  auto cd = c.dimensions();
  if (xd.size() != 2 || cd.size() != 2) return fail("x and c must be 2-D: [n, d] and [k, d]");
  if (x.element_type() != c.element_type()) return fail("x and c must share one dtype");
  if (!IsSupportedInput(x.element_type())) return fail("dtype must be f32, f64, bf16 or f16");
  p->n = xd[0];
  p->d = xd[1];
  p->k = cd[0];
  p->dtype = x.element_type();
  p->acc = AccDataType(p->dtype);
  if (cd[1] != p->d) return fail("x and c must have the same number of columns d");
  if (p->k < 1 || p->d < 1) return fail("need k >= 1 and d >= 1");
  if (!HasShape(w, p->acc, {p->n})) return fail("w must be [n] in the accumulator dtype");
  if (!HasShape(labels, ffi::DataType::S32, {p->n})) return fail("labels must be s32[n]");
  if (!HasShape(mind, p->acc, {p->n})) return fail("mind must be [n] in the accumulator dtype");
  if (!HasShape(sums, p->acc, {p->k, p->d}))
    return fail("sums must be [k, d] in the accumulator dtype");
  if (!HasShape(counts, p->acc, {p->k})) return fail("counts must be [k] in the accumulator dtype");
  if (!HasShape(inertia, p->acc, {}))
    return fail("inertia must be a scalar in the accumulator dtype");
  return ffi::Error::Success();
}

// The checked step's extra buffers: row_faults s32[], row_margin f32[] and,
// where given, the injection s32[4] (active, row, centroid, bit).
inline ffi::Error DecodeKmeansCheck(std::string_view op, const ffi::AnyBuffer& row_faults,
                                    const ffi::AnyBuffer& row_margin,
                                    const ffi::AnyBuffer* inject) {
  if (!HasShape(row_faults, ffi::DataType::S32, {}) ||
      !HasShape(row_margin, ffi::DataType::F32, {})) {
    return ffi::Error::InvalidArgument(
        std::string(op) + ": row_faults must be s32[] and row_margin f32[] (got " +
        DescribeBuffer(row_faults) + ", " + DescribeBuffer(row_margin) + ")");
  }
  if (inject != nullptr && !HasShape(*inject, ffi::DataType::S32, {4})) {
    return ffi::Error::InvalidArgument(
        std::string(op) + ": inject must be s32[4] (active, row, centroid, bit), got " +
        DescribeBuffer(*inject));
  }
  return ffi::Error::Success();
}

}  // namespace tsm2

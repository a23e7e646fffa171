// Decodes and validates the buffers of the ABFT targets `tsm2_colsums` and
// `tsm2_repair_column` (and `tsm2_abft_judge`), for the CPU reference and the CUDA handlers alike
// (same checks, same messages). Python checks everything at trace time
// (jax_tsm2/abft_calls.py); this is the second line of defence.
//
// tsm2_colsums: M [rows, cols] (f16/bf16/f32/f64), V [r, rows] in the
// accumulator dtype Acc (f32 or f64), 1 <= r <= 4; results out [r, cols] Acc
// and a u8 workspace (CUDA: ColsumsWorkspaceBytes; the CPU target ignores
// it); attribute abs_rows in [0, 2^r).
//
// tsm2_repair_column: flag (s32 or pred scalar), j (s32 scalar), A [m, k],
// B [k, n], C [m, n] of one dtype T; results C_out [m, n] T (aliased to C),
// old_col [m] T, exact [m] Acc, scale [m] Acc and an s32 workspace
// [RepairBlocks(m)] (one finite flag per block; the CPU target ignores it).
//
// tsm2_abft_judge: see DecodeJudge.
//
// tsm2_abft_encode: A [m, k], B [k, n] of one dtype T, m, k, n >= 1; results
// stats [kStatRows, n] in the accumulator dtype Acc (f32 or f64) and a u8
// workspace (CUDA: AbftEncodeWorkspaceBytes).
//
// tsm2_abft_verify: C [m, n] of T, stats [kStatRows, n] and model
// [kModelLen] of Acc; results resid [2, n] and threshold [n] of Acc and a u8
// workspace (AbftVerifyWorkspaceBytes). tsm2_abft_verify_inject: the same
// with C_out [m, n] (aliased to C) first among the results, and the
// attributes inject_row, inject_col, inject_bit.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ffi/abft/checksum.h"
#include "ffi/abft/plan.h"
#include "ffi/common/dispatch.h"
#include "ffi/common/ffi_helpers.h"
#include "xla/ffi/api/ffi.h"

namespace tsm2 {

inline bool IsAccType(ffi::DataType t) {
  return t == ffi::DataType::F32 || t == ffi::DataType::F64;
}

struct ColsumsProblem {
  int64_t rows = 0, cols = 0;
  int r = 0;
  uint32_t abs_rows = 0;
  ffi::DataType dtype = ffi::DataType::INVALID;  // of M
  ffi::DataType acc = ffi::DataType::INVALID;    // of V and out
};

inline ffi::Error DecodeColsums(std::string_view op, const ffi::AnyBuffer& m,
                                const ffi::AnyBuffer& v, const ffi::AnyBuffer& out,
                                int32_t abs_rows, ColsumsProblem* p) {
  auto fail = [&](const std::string& why) {
    return ffi::Error::InvalidArgument(std::string(op) + ": " + why + " (m=" + DescribeBuffer(m) +
                                       ", v=" + DescribeBuffer(v) + ", out=" + DescribeBuffer(out) +
                                       ", abs_rows=" + std::to_string(abs_rows) + ")");
  };
  auto md = m.dimensions();
  auto vd = v.dimensions();
  if (md.size() != 2 || vd.size() != 2) return fail("m and v must be 2-D: [rows, cols], [r, rows]");
  if (!IsSupportedInput(m.element_type())) return fail("m must be f32, f64, bf16 or f16");
  if (!IsAccType(v.element_type())) return fail("v must be f32 or f64 (the accumulator dtype)");
  p->rows = md[0];
  p->cols = md[1];
  p->r = static_cast<int>(vd[0]);
  p->dtype = m.element_type();
  p->acc = v.element_type();
  if (vd[0] < 1 || vd[0] > kColsumsMaxR) return fail("v must have 1 to 4 rows");
  if (vd[1] != p->rows) return fail("v must have one column per row of m");
  if (abs_rows < 0 || abs_rows >= (1 << p->r)) return fail("abs_rows must be in [0, 2^r)");
  p->abs_rows = static_cast<uint32_t>(abs_rows);
  if (!HasShape(out, p->acc, {p->r, p->cols})) return fail("out must be [r, cols] in v's dtype");
  return ffi::Error::Success();
}

struct RepairProblem {
  int64_t m = 0, k = 0, n = 0;
  bool flag_bool = false;
  ffi::DataType dtype = ffi::DataType::INVALID;  // of A, B, C
  ffi::DataType acc = ffi::DataType::INVALID;    // of exact and scale
};

// The checks tsm2_repair_column and tsm2_abft_judge share: A, B, C, C_out
// and the column buffers old_col, exact, scale. `fail` builds the error.
template <typename Fail>
ffi::Error DecodeRepairOperands(const ffi::AnyBuffer& a, const ffi::AnyBuffer& b,
                                const ffi::AnyBuffer& c, const ffi::AnyBuffer& c_out,
                                const ffi::AnyBuffer& old_col, const ffi::AnyBuffer& exact,
                                const ffi::AnyBuffer& scale, const Fail& fail, RepairProblem* p) {
  auto ad = a.dimensions();
  auto bd = b.dimensions();
  if (ad.size() != 2 || bd.size() != 2) return fail("a and b must be 2-D");
  p->m = ad[0];
  p->k = ad[1];
  p->n = bd[1];
  p->dtype = a.element_type();
  p->acc = exact.element_type();
  if (!IsSupportedInput(p->dtype)) return fail("a must be f32, f64, bf16 or f16");
  if (!IsAccType(p->acc)) return fail("exact must be f32 or f64 (the accumulator dtype)");
  if (bd[0] != p->k) return fail("contraction dimensions differ");
  if (!HasShape(b, p->dtype, {p->k, p->n})) return fail("b must share a's dtype");
  if (!HasShape(c, p->dtype, {p->m, p->n})) return fail("c must be [m, n] in a's dtype");
  if (!HasShape(c_out, p->dtype, {p->m, p->n})) return fail("c_out must be like c");
  if (!HasShape(old_col, p->dtype, {p->m})) return fail("old_col must be [m] in a's dtype");
  if (!HasShape(exact, p->acc, {p->m})) return fail("exact must be [m]");
  if (!HasShape(scale, p->acc, {p->m})) return fail("scale must be [m] like exact");
  return ffi::Error::Success();
}

inline ffi::Error DecodeRepair(std::string_view op, const ffi::AnyBuffer& flag,
                               const ffi::AnyBuffer& j, const ffi::AnyBuffer& a,
                               const ffi::AnyBuffer& b, const ffi::AnyBuffer& c,
                               const ffi::AnyBuffer& c_out, const ffi::AnyBuffer& old_col,
                               const ffi::AnyBuffer& exact, const ffi::AnyBuffer& scale,
                               const ffi::AnyBuffer& workspace, RepairProblem* p) {
  auto fail = [&](const std::string& why) {
    return ffi::Error::InvalidArgument(
        std::string(op) + ": " + why + " (flag=" + DescribeBuffer(flag) +
        ", j=" + DescribeBuffer(j) + ", a=" + DescribeBuffer(a) + ", b=" + DescribeBuffer(b) +
        ", c=" + DescribeBuffer(c) + ", exact=" + DescribeBuffer(exact) + ")");
  };
  const bool flag_s32 = HasShape(flag, ffi::DataType::S32, {});
  p->flag_bool = HasShape(flag, ffi::DataType::PRED, {});
  if (!flag_s32 && !p->flag_bool) return fail("flag must be an s32 or pred scalar");
  if (!HasShape(j, ffi::DataType::S32, {})) return fail("j must be an s32 scalar");
  if (auto err = DecodeRepairOperands(a, b, c, c_out, old_col, exact, scale, fail, p);
      !err.success()) {
    return err;
  }
  if (!HasShape(workspace, ffi::DataType::S32, {RepairBlocks(p->m)})) {
    return fail("workspace must be s32[" + std::to_string(RepairBlocks(p->m)) + "]");
  }
  return ffi::Error::Success();
}

// tsm2_abft_judge's buffers: operands resid [2, n], threshold [n], factor
// and floor (scalars), all Acc, then A, B, C as for the repair; results
// C_out, the verdict (errors_detected s32, corrected pred, row s32, col s32,
// magnitude Acc, uncorrectable pred: scalars), old_col, exact, scale and the
// s32 state [JudgeStateSize(m)].
struct JudgeBuffers {
  const ffi::AnyBuffer *resid, *threshold, *factor, *floor, *a, *b, *c;
  const ffi::AnyBuffer *c_out, *errors_detected, *corrected, *row, *col, *magnitude, *uncorrectable,
      *old_col, *exact, *scale, *state;
};

inline ffi::Error DecodeJudge(std::string_view op, const JudgeBuffers& x, RepairProblem* p) {
  auto fail = [&](const std::string& why) {
    return ffi::Error::InvalidArgument(
        std::string(op) + ": " + why + " (resid=" + DescribeBuffer(*x.resid) +
        ", threshold=" + DescribeBuffer(*x.threshold) + ", a=" + DescribeBuffer(*x.a) +
        ", b=" + DescribeBuffer(*x.b) + ", c=" + DescribeBuffer(*x.c) + ")");
  };
  if (auto err =
          DecodeRepairOperands(*x.a, *x.b, *x.c, *x.c_out, *x.old_col, *x.exact, *x.scale, fail, p);
      !err.success()) {
    return err;
  }
  const ffi::DataType acc = p->acc, s32 = ffi::DataType::S32, pred = ffi::DataType::PRED;
  if (!HasShape(*x.resid, acc, {2, p->n})) return fail("resid must be [2, n] in exact's dtype");
  if (!HasShape(*x.threshold, acc, {p->n})) return fail("threshold must be [n] like resid");
  if (!HasShape(*x.factor, acc, {}) || !HasShape(*x.floor, acc, {}) ||
      !HasShape(*x.magnitude, acc, {})) {
    return fail("factor, floor and magnitude must be scalars like resid");
  }
  if (!HasShape(*x.errors_detected, s32, {}) || !HasShape(*x.row, s32, {}) ||
      !HasShape(*x.col, s32, {}) || !HasShape(*x.corrected, pred, {}) ||
      !HasShape(*x.uncorrectable, pred, {})) {
    return fail("errors_detected, row, col must be s32 and corrected, uncorrectable pred scalars");
  }
  if (!HasShape(*x.state, s32, {JudgeStateSize(p->m)})) {
    return fail("state must be s32[" + std::to_string(JudgeStateSize(p->m)) + "]");
  }
  return ffi::Error::Success();
}

struct AbftPassProblem {
  int64_t m = 0, k = 0, n = 0;                   // C = A @ B is m x n; k is 0 for verify
  ffi::DataType dtype = ffi::DataType::INVALID;  // of A, B or C
  ffi::DataType acc = ffi::DataType::INVALID;    // of stats, model and the results
};

inline ffi::Error DecodeAbftEncode(std::string_view op, const ffi::AnyBuffer& a,
                                   const ffi::AnyBuffer& b, const ffi::AnyBuffer& stats,
                                   AbftPassProblem* p) {
  auto fail = [&](const std::string& why) {
    return ffi::Error::InvalidArgument(std::string(op) + ": " + why + " (a=" + DescribeBuffer(a) +
                                       ", b=" + DescribeBuffer(b) +
                                       ", stats=" + DescribeBuffer(stats) + ")");
  };
  auto ad = a.dimensions();
  auto bd = b.dimensions();
  if (ad.size() != 2 || bd.size() != 2) return fail("a and b must be 2-D");
  p->m = ad[0];
  p->k = ad[1];
  p->n = bd[1];
  p->dtype = a.element_type();
  p->acc = stats.element_type();
  if (!IsSupportedInput(p->dtype)) return fail("a must be f32, f64, bf16 or f16");
  if (!IsAccType(p->acc)) return fail("stats must be f32 or f64 (the accumulator dtype)");
  if (!HasShape(b, p->dtype, {p->k, p->n})) return fail("b must be [k, n] in a's dtype");
  if (p->m < 1 || p->k < 1 || p->n < 1) return fail("m, k and n must be >= 1");
  if (!HasShape(stats, p->acc, {kStatRows, p->n})) return fail("stats must be [7, n]");
  return ffi::Error::Success();
}

// The operands and results tsm2_abft_verify and tsm2_abft_verify_inject share.
inline ffi::Error DecodeAbftVerify(std::string_view op, const ffi::AnyBuffer& c,
                                   const ffi::AnyBuffer& stats, const ffi::AnyBuffer& model,
                                   const ffi::AnyBuffer& resid, const ffi::AnyBuffer& threshold,
                                   AbftPassProblem* p) {
  auto fail = [&](const std::string& why) {
    return ffi::Error::InvalidArgument(std::string(op) + ": " + why + " (c=" + DescribeBuffer(c) +
                                       ", stats=" + DescribeBuffer(stats) +
                                       ", model=" + DescribeBuffer(model) + ")");
  };
  auto cd = c.dimensions();
  if (cd.size() != 2) return fail("c must be 2-D");
  p->m = cd[0];
  p->n = cd[1];
  p->dtype = c.element_type();
  p->acc = stats.element_type();
  if (!IsSupportedInput(p->dtype)) return fail("c must be f32, f64, bf16 or f16");
  if (!IsAccType(p->acc)) return fail("stats must be f32 or f64 (the accumulator dtype)");
  if (p->m < 1 || p->n < 1) return fail("m and n must be >= 1");
  if (!HasShape(stats, p->acc, {kStatRows, p->n})) return fail("stats must be [7, n]");
  if (!HasShape(model, p->acc, {kModelLen})) return fail("model must be [12] like stats");
  if (!HasShape(resid, p->acc, {2, p->n})) return fail("resid must be [2, n] like stats");
  if (!HasShape(threshold, p->acc, {p->n})) return fail("threshold must be [n] like stats");
  return ffi::Error::Success();
}

// The fault tsm2_abft_verify_inject plants: bit `bit` of C[row, col].
inline ffi::Error DecodeInjection(std::string_view op, const AbftPassProblem& p,
                                  const ffi::AnyBuffer& c_out, int64_t row, int64_t col,
                                  int32_t bit) {
  const int bits = 8 * static_cast<int>(ffi::ByteWidth(p.dtype));
  if (!HasShape(c_out, p.dtype, {p.m, p.n})) {
    return ffi::Error::InvalidArgument(std::string(op) + ": c_out must be like c");
  }
  if (row < 0 || row >= p.m || col < 0 || col >= p.n || bit < 0 || bit >= bits) {
    return ffi::Error::InvalidArgument(
        std::string(op) + ": inject needs 0 <= row < " + std::to_string(p.m) + ", 0 <= col < " +
        std::to_string(p.n) + " and 0 <= bit < " + std::to_string(bits) + ", got (" +
        std::to_string(row) + ", " + std::to_string(col) + ", " + std::to_string(bit) + ")");
  }
  return ffi::Error::Success();
}

}  // namespace tsm2

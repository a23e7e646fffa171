// Decodes and validates the buffers of tsm2_kmeans_assign and
// tsm2_kmeans_sums, for the CPU references and the CUDA handlers alike (same
// checks, same messages).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ffi/common/dispatch.h"
#include "ffi/common/ffi_helpers.h"
#include "ffi/kmeans/tiled_plan.h"
#include "xla/ffi/api/ffi.h"

namespace tsm2 {

// Sizes the kernels index with 32-bit integers.
constexpr int64_t kKmeansTiledMaxDim = (int64_t{1} << 31) - 1024;

struct KmeansAssignProblem {
  int64_t n = 0, d = 0, k = 0;
  ffi::DataType dtype = ffi::DataType::INVALID;
  KmeansPrecision precision = KmeansPrecision::kFloat32;
};

inline ffi::Error DecodeKmeansAssign(std::string_view op, const ffi::AnyBuffer& x,
                                     const ffi::AnyBuffer& x_sq, const ffi::AnyBuffer& c,
                                     const ffi::AnyBuffer& labels, const ffi::AnyBuffer& mind,
                                     int32_t precision, KmeansAssignProblem* p) {
  auto fail = [&](const std::string& why) {
    return ffi::Error::InvalidArgument(
        std::string(op) + ": " + why + " (x=" + DescribeBuffer(x) + ", x_sq=" +
        DescribeBuffer(x_sq) + ", c=" + DescribeBuffer(c) + ", labels=" + DescribeBuffer(labels) +
        ", mind=" + DescribeBuffer(mind) + ", precision=" + std::to_string(precision) + ")");
  };
  auto xd = x.dimensions();
  auto cd = c.dimensions();
  if (xd.size() != 2 || cd.size() != 2) return fail("x and c must be 2-D: [n, d] and [k, d]");
  if (x.element_type() != c.element_type()) return fail("x and c must share one dtype");
  const ffi::DataType t = x.element_type();
  if (t != ffi::DataType::F32 && t != ffi::DataType::BF16 && t != ffi::DataType::F16) {
    return fail("dtype must be f32, bf16 or f16");
  }
  p->n = xd[0];
  p->d = xd[1];
  p->k = cd[0];
  p->dtype = t;
  if (cd[1] != p->d) return fail("x and c must have the same number of columns d");
  if (p->k < 1 || p->d < 1) return fail("need k >= 1 and d >= 1");
  if (p->k > kKmeansTiledMaxDim || p->d > kKmeansTiledMaxDim) return fail("k or d too large");
  if (!HasShape(x_sq, ffi::DataType::F32, {p->n})) return fail("x_sq must be f32[n]");
  if (!HasShape(labels, ffi::DataType::S32, {p->n})) return fail("labels must be s32[n]");
  if (!HasShape(mind, ffi::DataType::F32, {p->n})) return fail("mind must be f32[n]");
  if (precision != static_cast<int32_t>(KmeansPrecision::kFloat32) &&
      precision != static_cast<int32_t>(KmeansPrecision::kTensorFloat32)) {
    return fail("precision must be 0 (float32) or 1 (tensorfloat32)");
  }
  p->precision = static_cast<KmeansPrecision>(precision);
  return ffi::Error::Success();
}

struct KmeansSumsProblem {
  int64_t n = 0, d = 0, k = 0;
  ffi::DataType dtype = ffi::DataType::INVALID;  // of x
  ffi::DataType acc = ffi::DataType::INVALID;
  KmeansSumsPlan plan;  // from the attributes
};

inline ffi::Error DecodeKmeansSums(std::string_view op, const ffi::AnyBuffer& x,
                                   const ffi::AnyBuffer& w, const ffi::AnyBuffer& labels,
                                   const ffi::AnyBuffer& mind, const ffi::AnyBuffer& sums,
                                   const ffi::AnyBuffer& counts, const ffi::AnyBuffer& inertia,
                                   int64_t bucket, int64_t chunks, int64_t piece,
                                   KmeansSumsProblem* p) {
  auto fail = [&](const std::string& why) {
    return ffi::Error::InvalidArgument(
        std::string(op) + ": " + why + " (x=" + DescribeBuffer(x) + ", w=" + DescribeBuffer(w) +
        ", labels=" + DescribeBuffer(labels) + ", mind=" + DescribeBuffer(mind) +
        ", sums=" + DescribeBuffer(sums) + ", counts=" + DescribeBuffer(counts) +
        ", inertia=" + DescribeBuffer(inertia) + ", bucket=" + std::to_string(bucket) +
        ", chunks=" + std::to_string(chunks) + ", piece=" + std::to_string(piece) + ")");
  };
  auto xd = x.dimensions();
  auto sd = sums.dimensions();
  if (xd.size() != 2 || sd.size() != 2) return fail("x and sums must be 2-D: [n, d] and [k, d]");
  if (!IsSupportedInput(x.element_type())) return fail("dtype must be f32, f64, bf16 or f16");
  p->n = xd[0];
  p->d = xd[1];
  p->k = sd[0];
  p->dtype = x.element_type();
  p->acc = AccDataType(p->dtype);
  if (p->k < 1 || p->d < 1) return fail("need k >= 1 and d >= 1");
  if (p->k > kKmeansTiledMaxDim || p->d > kKmeansTiledMaxDim) return fail("k or d too large");
  if (!HasShape(sums, p->acc, {p->k, p->d}))
    return fail("sums must be [k, d] in the accumulator dtype");
  if (!HasShape(w, p->acc, {p->n})) return fail("w must be [n] in the accumulator dtype");
  if (!HasShape(labels, ffi::DataType::S32, {p->n})) return fail("labels must be s32[n]");
  if (!HasShape(mind, p->acc, {p->n})) return fail("mind must be [n] in the accumulator dtype");
  if (!HasShape(counts, p->acc, {p->k})) return fail("counts must be [k] in the accumulator dtype");
  if (!HasShape(inertia, p->acc, {}))
    return fail("inertia must be a scalar in the accumulator dtype");
  const int acc_size = p->acc == ffi::DataType::F64 ? 8 : 4;
  if (piece < 0 || piece > kKmeansTiledMaxDim) {
    return fail("piece must be >= 0 (0: buckets of clusters; > 0: sorted rows) and fit 31 bits");
  }
  if (piece > 0) {
    if (chunks < 1 || chunks > kSortMaxChunks) {
      return fail("the sorted path (piece > 0) takes 1 to " + std::to_string(kSortMaxChunks) +
                  " chunks");
    }
    p->plan = KmeansSumsPlanWith(acc_size, p->n, p->d, p->k, p->k, chunks, piece);
    return ffi::Error::Success();
  }
  p->plan = KmeansSumsPlanWith(acc_size, p->n, p->d, p->k, bucket, chunks);
  if (!p->plan.ok || p->plan.buckets > 65535 || chunks > kKmeansTiledMaxDim) {
    return fail("bucket and chunks must be >= 1, with at most 65535 buckets");
  }
  return ffi::Error::Success();
}

}  // namespace tsm2

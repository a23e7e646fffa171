// The CPU reference of tsm2_kmeans_step: plain loops behind the same handler
// signature and validation as the CUDA target, with the CUDA kernel's
// formulas, so that the CPU test suite can run the fused path end to end.
// It is not meant to be fast.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "ffi/common/cpu_elements.h"
#include "ffi/common/dispatch.h"
#include "ffi/common/ffi_helpers.h"
#include "ffi/kmeans/handlers.h"
#include "ffi/kmeans/problem.h"
#include "ffi/kmeans/row_check.h"

namespace tsm2 {
namespace {

// What the checked reference adds: its outputs and the injection (or none).
struct KmeansCheckOut {
  int32_t* faults = nullptr;
  float* margin = nullptr;
  KmeansInjection inject;
};

template <typename Acc>
Acc FlipBit(Acc v, int bit) {
  using U = std::conditional_t<sizeof(Acc) == 8, uint64_t, uint32_t>;
  U u;
  std::memcpy(&u, &v, sizeof u);
  u ^= U{1} << (bit & (8 * sizeof(U) - 1));
  std::memcpy(&v, &u, sizeof u);
  return v;
}

// One Lloyd step row by row in Acc (f64 for f64, f32 otherwise):
// dist = max((||x||^2 - 2 x.c) + ||c||^2, 0) with NaN kept, argmin with the
// lowest index on ties and NaN first, then sums, counts and inertia. With
// `check`, the per-row distance check of the checked step (row_check.h), the
// injected distance flipped first.
template <ElemType E, typename Acc = std::conditional_t<E == ElemType::kF64, double, float>>
void KmeansReference(const KmeansProblem& p, const void* x, const void* c, const Acc* w,
                     int32_t* labels, Acc* mind, Acc* sums, Acc* counts, Acc* inertia,
                     KmeansCheckOut* check = nullptr) {
  using In = HostElem<E>;
  const int64_t n = p.n, d = p.d, k = p.k;
  std::vector<Acc> cc(k * d), csq(k, Acc(0)), xr(d), cs(d, Acc(0));
  for (int64_t j = 0; j < k; ++j) {
    for (int64_t e = 0; e < d; ++e) {
      cc[j * d + e] = static_cast<Acc>(In::Load(c, j * d + e));
      csq[j] += cc[j * d + e] * cc[j * d + e];
    }
  }
  // The check's constants: s = sum_j c_j, sum_j ||c_j||^2, and the
  // threshold of sequential dots over d terms.
  Acc csq_tot = 0;
  double tau = 0, eta = 0;
  if (check != nullptr) {
    for (int64_t j = 0; j < k; ++j) {
      for (int64_t e = 0; e < d; ++e) cs[e] += cc[j * d + e];
      csq_tot += csq[j];
    }
    KmeansRowTolerance(static_cast<int>(sizeof(Acc)), static_cast<double>(d),
                       static_cast<double>(d), d, k, &tau, &eta);
    *check->faults = 0;
    *check->margin = 0;
  }
  std::fill(sums, sums + k * d, Acc(0));
  std::fill(counts, counts + k, Acc(0));
  Acc total = 0;
  for (int64_t i = 0; i < n; ++i) {
    Acc xsq = 0;
    for (int64_t e = 0; e < d; ++e) {
      xr[e] = static_cast<Acc>(In::Load(x, i * d + e));
      xsq += xr[e] * xr[e];
    }
    Acc best = 0, dsum = 0;
    int32_t label = 0;
    for (int64_t j = 0; j < k; ++j) {
      Acc dot = 0;
      for (int64_t e = 0; e < d; ++e) dot += xr[e] * cc[j * d + e];
      Acc dist = (xsq - 2 * dot) + csq[j];
      if (check != nullptr) {
        const KmeansInjection& in = check->inject;
        if (in.active != 0 && in.row == i && in.centroid == j) dist = FlipBit(dist, in.bit);
        dsum += dist;
      }
      if (dist < 0) dist = 0;
      const Acc key = dist != dist ? Acc(-1) : dist;  // distances are >= 0: -1 ranks NaN first
      if (j == 0 || key < best) {
        best = key;
        label = static_cast<int32_t>(j);
      }
    }
    if (check != nullptr) {
      Acc q = 0;
      for (int64_t e = 0; e < d; ++e) q += xr[e] * cs[e];
      const Acc kf = static_cast<Acc>(k);
      const Acc r = std::fma(kf, xsq, Acc(-2) * q) + csq_tot;
      const Acc t =
          std::fma(static_cast<Acc>(tau), std::fma(kf, xsq, csq_tot), static_cast<Acc>(eta));
      if (std::isfinite(t) && std::isfinite(r)) {
        const Acc err = std::fabs(dsum - r);
        if (!(err <= t)) ++*check->faults;
        const float ratio = static_cast<float>(err / t);
        if (ratio > *check->margin) *check->margin = ratio;
      }
    }
    const Acc md = best < 0 ? std::numeric_limits<Acc>::quiet_NaN() : best;
    labels[i] = label;
    mind[i] = md;
    total += w[i] * md;
    counts[label] += w[i];
    for (int64_t e = 0; e < d; ++e) sums[label * d + e] += w[i] * xr[e];
  }
  *inertia = total;
}

// The step, or with `check` the checked step (and with `inject` its fault).
ffi::Error KmeansCpuCommon(std::string_view kOp, ffi::AnyBuffer x, ffi::AnyBuffer c,
                           ffi::AnyBuffer w, const ffi::AnyBuffer* inject,
                           ffi::Result<ffi::AnyBuffer> labels, ffi::Result<ffi::AnyBuffer> mind,
                           ffi::Result<ffi::AnyBuffer> sums, ffi::Result<ffi::AnyBuffer> counts,
                           ffi::Result<ffi::AnyBuffer> inertia, ffi::AnyBuffer* row_faults,
                           ffi::AnyBuffer* row_margin) {
  KmeansProblem p;
  TSM2_FFI_RETURN_IF_ERROR(
      DecodeKmeans(kOp, x, c, w, *labels, *mind, *sums, *counts, *inertia, &p));
  KmeansCheckOut check;
  if (row_faults != nullptr) {
    TSM2_FFI_RETURN_IF_ERROR(DecodeKmeansCheck(kOp, *row_faults, *row_margin, inject));
    check.faults = static_cast<int32_t*>(row_faults->untyped_data());
    check.margin = static_cast<float*>(row_margin->untyped_data());
    if (inject != nullptr) {
      std::memcpy(&check.inject, inject->untyped_data(), sizeof check.inject);
    }
  }
  return DispatchElemType(kOp, p.dtype, [&](auto elem) {
    constexpr ElemType kE = decltype(elem)::value;
    using Acc = std::conditional_t<kE == ElemType::kF64, double, float>;
    KmeansReference<kE>(
        p, x.untyped_data(), c.untyped_data(), static_cast<const Acc*>(w.untyped_data()),
        static_cast<int32_t*>(labels->untyped_data()), static_cast<Acc*>(mind->untyped_data()),
        static_cast<Acc*>(sums->untyped_data()), static_cast<Acc*>(counts->untyped_data()),
        static_cast<Acc*>(inertia->untyped_data()), row_faults != nullptr ? &check : nullptr);
    return ffi::Error::Success();
  });
}

ffi::Error KmeansCpuImpl(ffi::AnyBuffer x, ffi::AnyBuffer c, ffi::AnyBuffer w,
                         ffi::Result<ffi::AnyBuffer> labels, ffi::Result<ffi::AnyBuffer> mind,
                         ffi::Result<ffi::AnyBuffer> sums, ffi::Result<ffi::AnyBuffer> counts,
                         ffi::Result<ffi::AnyBuffer> inertia,
                         ffi::Result<ffi::AnyBuffer> /*workspace*/) {
  return KmeansCpuCommon("tsm2_kmeans_step (cpu)", x, c, w, nullptr, labels, mind, sums, counts,
                         inertia, nullptr, nullptr);
}

ffi::Error KmeansCheckedCpuImpl(ffi::AnyBuffer x, ffi::AnyBuffer c, ffi::AnyBuffer w,
                                ffi::Result<ffi::AnyBuffer> labels,
                                ffi::Result<ffi::AnyBuffer> mind, ffi::Result<ffi::AnyBuffer> sums,
                                ffi::Result<ffi::AnyBuffer> counts,
                                ffi::Result<ffi::AnyBuffer> inertia,
                                ffi::Result<ffi::AnyBuffer> row_faults,
                                ffi::Result<ffi::AnyBuffer> row_margin,
                                ffi::Result<ffi::AnyBuffer> /*workspace*/) {
  return KmeansCpuCommon("tsm2_kmeans_step_checked (cpu)", x, c, w, nullptr, labels, mind, sums,
                         counts, inertia, &*row_faults, &*row_margin);
}

ffi::Error KmeansInjectCpuImpl(ffi::AnyBuffer x, ffi::AnyBuffer c, ffi::AnyBuffer w,
                               ffi::AnyBuffer inject, ffi::Result<ffi::AnyBuffer> labels,
                               ffi::Result<ffi::AnyBuffer> mind, ffi::Result<ffi::AnyBuffer> sums,
                               ffi::Result<ffi::AnyBuffer> counts,
                               ffi::Result<ffi::AnyBuffer> inertia,
                               ffi::Result<ffi::AnyBuffer> row_faults,
                               ffi::Result<ffi::AnyBuffer> row_margin,
                               ffi::Result<ffi::AnyBuffer> /*workspace*/) {
  return KmeansCpuCommon("tsm2_kmeans_step_checked_inject (cpu)", x, c, w, &inject, labels, mind,
                         sums, counts, inertia, &*row_faults, &*row_margin);
}

}  // namespace
}  // namespace tsm2

XLA_FFI_DEFINE_HANDLER_SYMBOL(Tsm2KmeansStepCpu, tsm2::KmeansCpuImpl,
                              tsm2::KmeansStepSignature(xla::ffi::Ffi::Bind()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(Tsm2KmeansStepCheckedCpu, tsm2::KmeansCheckedCpuImpl,
                              tsm2::KmeansStepCheckedSignature(xla::ffi::Ffi::Bind()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(Tsm2KmeansStepInjectCpu, tsm2::KmeansInjectCpuImpl,
                              tsm2::KmeansStepInjectSignature(xla::ffi::Ffi::Bind()));

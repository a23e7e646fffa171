// The CPU reference of tsm2_kmeans_step: plain loops behind the same handler
// signature and validation as the CUDA target, with the CUDA kernel's
// formulas, so that the CPU test suite can run the fused path end to end.
// It is not meant to be fast.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "ffi/common/cpu_elements.h"
#include "ffi/common/dispatch.h"
#include "ffi/common/ffi_helpers.h"
#include "ffi/kmeans/handlers.h"
#include "ffi/kmeans/problem.h"

namespace tsm2 {
namespace {

// One Lloyd step row by row in Acc (f64 for f64, f32 otherwise):
// dist = max((||x||^2 - 2 x.c) + ||c||^2, 0) with NaN kept, argmin with the
// lowest index on ties and NaN first, then sums, counts and inertia.
template <ElemType E, typename Acc = std::conditional_t<E == ElemType::kF64, double, float>>
void KmeansReference(const KmeansProblem& p, const void* x, const void* c, const Acc* w,
                     int32_t* labels, Acc* mind, Acc* sums, Acc* counts, Acc* inertia) {
  using In = HostElem<E>;
  const int64_t n = p.n, d = p.d, k = p.k;
  std::vector<Acc> cc(k * d), csq(k, Acc(0)), xr(d);
  for (int64_t j = 0; j < k; ++j) {
    for (int64_t e = 0; e < d; ++e) {
      cc[j * d + e] = static_cast<Acc>(In::Load(c, j * d + e));
      csq[j] += cc[j * d + e] * cc[j * d + e];
    }
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
    Acc best = 0;
    int32_t label = 0;
    for (int64_t j = 0; j < k; ++j) {
      Acc dot = 0;
      for (int64_t e = 0; e < d; ++e) dot += xr[e] * cc[j * d + e];
      Acc dist = (xsq - 2 * dot) + csq[j];
      if (dist < 0) dist = 0;
      const Acc key = dist != dist ? Acc(-1) : dist;  // distances are >= 0: -1 ranks NaN first
      if (j == 0 || key < best) {
        best = key;
        label = static_cast<int32_t>(j);
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

ffi::Error KmeansCpuImpl(ffi::AnyBuffer x, ffi::AnyBuffer c, ffi::AnyBuffer w,
                         ffi::Result<ffi::AnyBuffer> labels, ffi::Result<ffi::AnyBuffer> mind,
                         ffi::Result<ffi::AnyBuffer> sums, ffi::Result<ffi::AnyBuffer> counts,
                         ffi::Result<ffi::AnyBuffer> inertia,
                         ffi::Result<ffi::AnyBuffer> /*workspace*/) {
  constexpr std::string_view kOp = "tsm2_kmeans_step (cpu)";
  KmeansProblem p;
  TSM2_FFI_RETURN_IF_ERROR(
      DecodeKmeans(kOp, x, c, w, *labels, *mind, *sums, *counts, *inertia, &p));
  return DispatchElemType(kOp, p.dtype, [&](auto elem) {
    constexpr ElemType kE = decltype(elem)::value;
    using Acc = std::conditional_t<kE == ElemType::kF64, double, float>;
    KmeansReference<kE>(
        p, x.untyped_data(), c.untyped_data(), static_cast<const Acc*>(w.untyped_data()),
        static_cast<int32_t*>(labels->untyped_data()), static_cast<Acc*>(mind->untyped_data()),
        static_cast<Acc*>(sums->untyped_data()), static_cast<Acc*>(counts->untyped_data()),
        static_cast<Acc*>(inertia->untyped_data()));
    return ffi::Error::Success();
  });
}

}  // namespace
}  // namespace tsm2

XLA_FFI_DEFINE_HANDLER_SYMBOL(Tsm2KmeansStepCpu, tsm2::KmeansCpuImpl,
                              tsm2::KmeansStepSignature(xla::ffi::Ffi::Bind()));

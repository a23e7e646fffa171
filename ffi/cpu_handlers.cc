// CPU references for `tsm2_matmul` and `tsm2_kmeans_step`: straightforward
// loops behind the same handler signatures and validation as the CUDA targets.
//
// It exists so that the CPU test suite can force the custom-call path and
// check primitive -> lowering -> FFI handler -> result end to end on a machine
// without a GPU. It is not meant to be fast.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "ffi/cpu_elements.h"
#include "ffi/handlers.h"
#include "ffi/kmeans_problem.h"
#include "ffi/matmul_problem.h"
#include "ffi/signatures.h"

namespace tsm2 {
namespace {

// Accumulates in the same precision as the CUDA kernels (f64 for f64, f32
// otherwise) so that the two targets round alike.
template <typename Acc>
void Reference(const MatmulProblem& p, const void* a, const void* b, void* c) {
  // Element (i, l) of op(A) and (l, j) of op(B), whatever the layout.
  const bool a_t = p.layout == Layout::kTN, b_t = p.layout == Layout::kNT;
  const int64_t a_si = a_t ? 1 : p.k, a_sl = a_t ? p.m : 1;
  const int64_t b_sl = b_t ? 1 : p.n, b_sj = b_t ? p.k : 1;
  for (int64_t bi = 0; bi < p.batch; ++bi) {
    const int64_t a0 = bi * p.a_batch_stride, b0 = bi * p.b_batch_stride, c0 = bi * p.m * p.n;
    for (int64_t i = 0; i < p.m; ++i) {
      for (int64_t j = 0; j < p.n; ++j) {
        // -0.0 is the identity of IEEE addition (a sum of -0 terms stays -0); an
        // empty sum is +0, as jnp gives it.
        Acc acc = p.k > 0 ? Acc(-0.0) : Acc(0);
        for (int64_t l = 0; l < p.k; ++l) {
          acc += static_cast<Acc>(LoadAs(p.dtype, a, a0 + i * a_si + l * a_sl)) *
                 static_cast<Acc>(LoadAs(p.dtype, b, b0 + l * b_sl + j * b_sj));
        }
        StoreAs(p.out_dtype, c, c0 + i * p.n + j, acc);
      }
    }
  }
}

ffi::Error MatmulCpuImpl(ffi::AnyBuffer a, ffi::AnyBuffer b, ffi::Result<ffi::AnyBuffer> c,
                         ffi::Result<ffi::AnyBuffer> /*workspace*/, int32_t kernel,
                         int32_t layout) {
  constexpr std::string_view kOp = "tsm2_matmul (cpu)";
  MatmulProblem p;
  if (auto err = DecodeMatmul(kOp, a, b, *c, layout, &p); !err.success()) return err;
  if (auto err = CheckKernel(kOp, kernel, p.layout); !err.success()) return err;
  if (p.dtype == ffi::DataType::F64) {
    Reference<double>(p, a.untyped_data(), b.untyped_data(), c->untyped_data());
  } else {
    Reference<float>(p, a.untyped_data(), b.untyped_data(), c->untyped_data());
  }
  return ffi::Error::Success();
}

// One Lloyd step with the CUDA kernel's formulas, row by row in Acc:
// dist = max((||x||^2 - 2 x.c) + ||c||^2, 0) with NaN kept, argmin with the
// lowest index on ties and NaN first, then sums, counts and inertia.
template <typename Acc>
void KmeansReference(const KmeansProblem& p, const void* x, const void* c, const Acc* w,
                     int32_t* labels, Acc* mind, Acc* sums, Acc* counts, Acc* inertia) {
  const int64_t n = p.n, d = p.d, k = p.k;
  std::vector<Acc> cc(k * d), csq(k, Acc(0)), xr(d);
  for (int64_t j = 0; j < k; ++j) {
    for (int64_t e = 0; e < d; ++e) {
      cc[j * d + e] = static_cast<Acc>(LoadAs(p.dtype, c, j * d + e));
      csq[j] += cc[j * d + e] * cc[j * d + e];
    }
  }
  std::fill(sums, sums + k * d, Acc(0));
  std::fill(counts, counts + k, Acc(0));
  Acc total = 0;
  for (int64_t i = 0; i < n; ++i) {
    Acc xsq = 0;
    for (int64_t e = 0; e < d; ++e) {
      xr[e] = static_cast<Acc>(LoadAs(p.dtype, x, i * d + e));
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
  if (auto err = DecodeKmeans(kOp, x, c, w, *labels, *mind, *sums, *counts, *inertia, &p);
      !err.success()) {
    return err;
  }
  auto* lab = static_cast<int32_t*>(labels->untyped_data());
  if (p.acc == ffi::DataType::F64) {
    KmeansReference<double>(
        p, x.untyped_data(), c.untyped_data(), static_cast<const double*>(w.untyped_data()), lab,
        static_cast<double*>(mind->untyped_data()), static_cast<double*>(sums->untyped_data()),
        static_cast<double*>(counts->untyped_data()),
        static_cast<double*>(inertia->untyped_data()));
  } else {
    KmeansReference<float>(
        p, x.untyped_data(), c.untyped_data(), static_cast<const float*>(w.untyped_data()), lab,
        static_cast<float*>(mind->untyped_data()), static_cast<float*>(sums->untyped_data()),
        static_cast<float*>(counts->untyped_data()), static_cast<float*>(inertia->untyped_data()));
  }
  return ffi::Error::Success();
}

}  // namespace
}  // namespace tsm2

XLA_FFI_DEFINE_HANDLER_SYMBOL(Tsm2KmeansStepCpu, tsm2::KmeansCpuImpl,
                              tsm2::KmeansStepSignature(xla::ffi::Ffi::Bind()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(Tsm2MatmulCpu, tsm2::MatmulCpuImpl,
                              tsm2::MatmulSignature(xla::ffi::Ffi::Bind()));

// CPU references for the ABFT targets `tsm2_colsums`, `tsm2_repair_column`,
// `tsm2_abft_judge`, `tsm2_abft_encode` and `tsm2_abft_verify(_inject)`: plain
// loops behind the same handler signatures and validation as the CUDA ones,
// accumulating as the kernels do (in another order: rows in sequence). The
// checksum passes are jax_tsm2.abft's default formulation on CPU, since they
// sum in f64 or double-double whatever jax_enable_x64 says; they are not fast.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "ffi/abft/checksum.h"
#include "ffi/abft/handlers.h"
#include "ffi/abft/problem.h"
#include "ffi/common/cpu_elements.h"
#include "ffi/common/dispatch.h"
#include "ffi/common/ffi_helpers.h"

namespace tsm2 {
namespace {

template <ElemType E, typename Acc>
void ColsumsReference(const ColsumsProblem& p, const void* m, const Acc* v, Acc* out) {
  using In = HostElem<E>;
  std::fill(out, out + p.r * p.cols, Acc(0));
  for (int64_t i = 0; i < p.rows; ++i) {
    for (int q = 0; q < p.r; ++q) {
      const Acc w = v[q * p.rows + i];
      const bool abs_q = (p.abs_rows >> q) & 1u;
      Acc* o = out + q * p.cols;
      for (int64_t c = 0; c < p.cols; ++c) {
        const Acc x = static_cast<Acc>(In::Load(m, i * p.cols + c));
        o[c] = std::fma(w, abs_q ? std::fabs(x) : x, o[c]);
      }
    }
  }
}

ffi::Error ColsumsCpuImpl(ffi::AnyBuffer m, ffi::AnyBuffer v, ffi::Result<ffi::AnyBuffer> out,
                          ffi::Result<ffi::AnyBuffer> /*workspace*/, int32_t abs_rows) {
  ColsumsProblem p;
  if (auto err = DecodeColsums("tsm2_colsums (cpu)", m, v, *out, abs_rows, &p); !err.success()) {
    return err;
  }
  return DispatchElemAndAcc("tsm2_colsums (cpu)", p.dtype, p.acc, [&](auto elem, auto acc) {
    using Acc = AccCType<decltype(acc)::value>;
    ColsumsReference<decltype(elem)::value, Acc>(p, m.untyped_data(),
                                                 static_cast<const Acc*>(v.untyped_data()),
                                                 static_cast<Acc*>(out->untyped_data()));
    return ffi::Error::Success();
  });
}

// bf16/f16 columns with f64 accumulators round through f32 here (HostElem)
// but straight from f64 on CUDA; jax_tsm2.abft never asks for that pairing.
template <ElemType E, typename Acc>
void RepairReference(const RepairProblem& p, int64_t j, const void* a, const void* b, const void* c,
                     void* c_out, void* old_col, Acc* exact, Acc* scale) {
  using In = HostElem<E>;
  bool finite = true;
  for (int64_t i = 0; i < p.m; ++i) {
    Acc ex = 0, sc = 0;
    for (int64_t l = 0; l < p.k; ++l) {
      const Acc x = static_cast<Acc>(In::Load(a, i * p.k + l));
      const Acc y = static_cast<Acc>(In::Load(b, l * p.n + j));
      ex = std::fma(x, y, ex);
      sc = std::fma(std::fabs(x), std::fabs(y), sc);
    }
    In::Store(old_col, i, In::Load(c, i * p.n + j));
    exact[i] = ex;
    scale[i] = sc;
    finite = finite && std::isfinite(ex);
  }
  if (!finite) return;  // C stays as it was: the caller reports the fault uncorrectable
  for (int64_t i = 0; i < p.m; ++i) In::Store(c_out, i * p.n + j, exact[i]);
}

ffi::Error RepairCpuImpl(ffi::AnyBuffer flag, ffi::AnyBuffer j, ffi::AnyBuffer a, ffi::AnyBuffer b,
                         ffi::AnyBuffer c, ffi::Result<ffi::AnyBuffer> c_out,
                         ffi::Result<ffi::AnyBuffer> old_col, ffi::Result<ffi::AnyBuffer> exact,
                         ffi::Result<ffi::AnyBuffer> scale, ffi::Result<ffi::AnyBuffer> workspace) {
  RepairProblem p;
  if (auto err = DecodeRepair("tsm2_repair_column (cpu)", flag, j, a, b, c, *c_out, *old_col,
                              *exact, *scale, *workspace, &p);
      !err.success()) {
    return err;
  }
  // XLA hands the aliased result the operand's buffer; should it ever not,
  // the result must still start as C.
  if (c_out->untyped_data() != c.untyped_data()) {
    std::memcpy(c_out->untyped_data(), c.untyped_data(), c.size_bytes());
  }
  const bool wanted = p.flag_bool ? *static_cast<const uint8_t*>(flag.untyped_data()) != 0
                                  : *static_cast<const int32_t*>(flag.untyped_data()) != 0;
  const int64_t col = *static_cast<const int32_t*>(j.untyped_data());
  if (!wanted || col < 0 || col >= p.n) return ffi::Error::Success();
  return DispatchElemAndAcc("tsm2_repair_column (cpu)", p.dtype, p.acc, [&](auto elem, auto acc) {
    using Acc = AccCType<decltype(acc)::value>;
    RepairReference<decltype(elem)::value, Acc>(
        p, col, a.untyped_data(), b.untyped_data(), c.untyped_data(), c_out->untyped_data(),
        old_col->untyped_data(), static_cast<Acc*>(exact->untyped_data()),
        static_cast<Acc*>(scale->untyped_data()));
    return ffi::Error::Success();
  });
}

// The judgement of tsm2_abft_judge in plain loops, in the order the CUDA
// kernels' results are defined by (first index on ties): the failing
// columns, the worst one, its repair when it is the only one, the verdict.
template <ElemType E, typename Acc>
void JudgeReference(const RepairProblem& p, const Acc* resid, const Acc* threshold, Acc factor,
                    Acc floor, const void* a, const void* b, const void* c, void* c_out,
                    void* old_col, Acc* exact, Acc* scale, int32_t* errors_detected,
                    bool* corrected, int32_t* row, int32_t* col, Acc* magnitude,
                    bool* uncorrectable) {
  using In = HostElem<E>;
  int failing = 0;
  int64_t j = 0;
  Acc best = -1;
  for (int64_t q = 0; q < p.n; ++q) {
    const Acc r0 = std::fabs(resid[q]), r1 = std::fabs(resid[p.n + q]), t = threshold[q];
    failing += !(r0 <= t && r1 <= t);
    Acc score = (std::isnan(r0) || std::isnan(r1))
                    ? Acc(INFINITY)
                    : std::fmax(r0, r1) / std::fmax(t, std::numeric_limits<Acc>::min());
    if (!std::isfinite(score)) score = INFINITY;
    if (score > best) {
      best = score;
      j = q;
    }
  }
  const bool single = failing == 1, nothing = failing == 0;
  int bad = 0;
  int64_t at = 0;
  bool finite = false;
  if (single) {
    RepairReference<E, Acc>(p, j, a, b, c, c_out, old_col, exact, scale);
    Acc worst = -1;
    finite = true;
    for (int64_t i = 0; i < p.m; ++i) {
      const Acc diff = static_cast<Acc>(In::Load(old_col, i)) - exact[i];
      bad += !(std::fabs(diff) <= factor * scale[i] + floor);
      const Acc size = std::isfinite(diff) ? std::fabs(diff) : Acc(INFINITY);
      if (size > worst) {
        worst = size;
        at = i;
      }
      finite = finite && std::isfinite(exact[i]);
    }
  }
  const bool fixed = single && finite;
  *errors_detected = single ? std::max(bad, 1) : failing;
  *corrected = fixed;
  *row = nothing || !single ? -1 : static_cast<int32_t>(at);
  *col = nothing ? -1 : static_cast<int32_t>(j);
  *magnitude = nothing  ? Acc(0)
               : single ? static_cast<Acc>(In::Load(old_col, at)) - exact[at]
                        : resid[j];
  *uncorrectable = !nothing && !fixed;
}

ffi::Error JudgeCpuImpl(ffi::AnyBuffer resid, ffi::AnyBuffer threshold, ffi::AnyBuffer factor,
                        ffi::AnyBuffer floor, ffi::AnyBuffer a, ffi::AnyBuffer b, ffi::AnyBuffer c,
                        ffi::Result<ffi::AnyBuffer> c_out,
                        ffi::Result<ffi::AnyBuffer> errors_detected,
                        ffi::Result<ffi::AnyBuffer> corrected, ffi::Result<ffi::AnyBuffer> row,
                        ffi::Result<ffi::AnyBuffer> col, ffi::Result<ffi::AnyBuffer> magnitude,
                        ffi::Result<ffi::AnyBuffer> uncorrectable,
                        ffi::Result<ffi::AnyBuffer> old_col, ffi::Result<ffi::AnyBuffer> exact,
                        ffi::Result<ffi::AnyBuffer> scale, ffi::Result<ffi::AnyBuffer> state) {
  RepairProblem p;
  const JudgeBuffers x{
      &resid,      &threshold,      &factor,           &floor,      &a,      &b,
      &c,          &*c_out,         &*errors_detected, &*corrected, &*row,   &*col,
      &*magnitude, &*uncorrectable, &*old_col,         &*exact,     &*scale, &*state};
  if (auto err = DecodeJudge("tsm2_abft_judge (cpu)", x, &p); !err.success()) return err;
  if (c_out->untyped_data() != c.untyped_data()) {
    std::memcpy(c_out->untyped_data(), c.untyped_data(), c.size_bytes());
  }
  return DispatchElemAndAcc("tsm2_abft_judge (cpu)", p.dtype, p.acc, [&](auto elem, auto acc) {
    using Acc = AccCType<decltype(acc)::value>;
    JudgeReference<decltype(elem)::value, Acc>(
        p, static_cast<const Acc*>(resid.untyped_data()),
        static_cast<const Acc*>(threshold.untyped_data()),
        *static_cast<const Acc*>(factor.untyped_data()),
        *static_cast<const Acc*>(floor.untyped_data()), a.untyped_data(), b.untyped_data(),
        c.untyped_data(), c_out->untyped_data(), old_col->untyped_data(),
        static_cast<Acc*>(exact->untyped_data()), static_cast<Acc*>(scale->untyped_data()),
        static_cast<int32_t*>(errors_detected->untyped_data()),
        static_cast<bool*>(corrected->untyped_data()), static_cast<int32_t*>(row->untyped_data()),
        static_cast<int32_t*>(col->untyped_data()), static_cast<Acc*>(magnitude->untyped_data()),
        static_cast<bool*>(uncorrectable->untyped_data()));
    return ffi::Error::Success();
  });
}

// ---------------------------------------------------------------------------
// tsm2_abft_encode and tsm2_abft_verify: the passes of ffi/abft/checksum.h.

template <ElemType E>
constexpr double TinyOf() {
  return E == ElemType::kF64   ? std::numeric_limits<double>::min()
         : E == ElemType::kF16 ? 0x1p-14
                               : 0x1p-126;  // f32 and bf16
}

// f64 data sums its signed checksums in double-double, the rest in f64.
template <ElemType E>
using SignedSum = ExtSum<E == ElemType::kF64>;

template <typename Acc, bool kDD>
void StoreSplit(const ExtSum<kDD>& x, Acc* hi, Acc* lo) {
  ExtSum<kDD> v = x;
  v.Normalize();
  *hi = static_cast<Acc>(v.hi);
  *lo = static_cast<Acc>((v.hi - static_cast<double>(*hi)) + v.lo);
}

template <ElemType E, typename Acc>
void EncodeReference(const AbftPassProblem& p, const void* a, const void* b, Acc* stats) {
  using In = HostElem<E>;
  const double s = ChecksumScale(p.m), tiny = TinyOf<E>();
  const int64_t m = p.m, k = p.k, n = p.n;
  // The pass over A: per column l, the signed checksums v, s sum |a|, the
  // guarded norm s ||a_l||_2 and s times the subnormal mass.
  std::vector<SignedSum<E>> v1(k), v2(k);
  std::vector<double> alpha(k, 0.0), sq(k, 0.0), sub(k, 0.0);
  for (int64_t i = 0; i < m; ++i) {
    double w1, w2;
    RowWeights(i, 1.0 / static_cast<double>(m), s, &w1, &w2);
    for (int64_t l = 0; l < k; ++l) {
      const double x = In::Load(a, i * k + l), ax = std::fabs(x);
      v1[l].Add(w1, x);
      v2[l].Add(w2, x);
      alpha[l] = std::fma(s, ax, alpha[l]);
      sq[l] = std::fma(s * x, s * x, sq[l]);
      if (ax < tiny) sub[l] = std::fma(s, ax, sub[l]);
    }
  }
  std::vector<double> nu(k);
  for (int64_t l = 0; l < k; ++l) {
    v1[l].Normalize();
    v2[l].Normalize();
    nu[l] = GuardedNorm(sq[l], alpha[l]);
  }
  // The pass over B, weighted by the pass over A.
  std::vector<SignedSum<E>> r1(n), r2(n);
  std::vector<double> abs1(n, 0.0), q(n, 0.0), flush(n, 0.0);
  for (int64_t l = 0; l < k; ++l) {
    for (int64_t j = 0; j < n; ++j) {
      const double x = In::Load(b, l * n + j), ax = std::fabs(x);
      r1[j].AddExt(v1[l].hi, v1[l].lo, x);
      r2[j].AddExt(v2[l].hi, v2[l].lo, x);
      abs1[j] = std::fma(alpha[l], ax, abs1[j]);
      const double t = nu[l] * x;
      q[j] = std::fma(t, t, q[j]);
      flush[j] = std::fma(sub[l], ax, flush[j]);
      if (ax < tiny) flush[j] = std::fma(alpha[l], ax, flush[j]);
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    StoreSplit(r1[j], &stats[kStatRef1 * n + j], &stats[kStatRef1Lo * n + j]);
    StoreSplit(r2[j], &stats[kStatRef2 * n + j], &stats[kStatRef2Lo * n + j]);
    stats[kStatAbs * n + j] = static_cast<Acc>(abs1[j]);
    stats[kStatNorm * n + j] = static_cast<Acc>(GuardedNorm(q[j], abs1[j]));
    stats[kStatFlush * n + j] = static_cast<Acc>(flush[j]);
  }
}

// What the C pass squares: C itself, or the half-ulp of a bf16/f16 entry.
template <ElemType E>
double NormTerm(double x) {
  if constexpr (E == ElemType::kBF16) return HalfUlp(x, 8, -126);
  if constexpr (E == ElemType::kF16) return HalfUlp(x, 11, -14);
  return x;
}

template <ElemType E, typename Acc>
void VerifyReference(const AbftPassProblem& p, const void* c, const Acc* stats, const Acc* model,
                     Acc* resid, Acc* threshold) {
  using In = HostElem<E>;
  const int64_t m = p.m, n = p.n;
  const double s = ChecksumScale(m);
  std::vector<SignedSum<E>> g1(n), g2(n);
  std::vector<double> c_abs(n, 0.0), sq(n, 0.0);
  for (int64_t i = 0; i < m; ++i) {
    double w1, w2;
    RowWeights(i, 1.0 / static_cast<double>(m), s, &w1, &w2);
    for (int64_t j = 0; j < n; ++j) {
      const double x = In::Load(c, i * n + j);
      g1[j].Add(w1, x);
      g2[j].Add(w2, x);
      c_abs[j] = std::fma(s, std::fabs(x), c_abs[j]);
      const double t = s * NormTerm<E>(x);
      sq[j] = std::fma(t, t, sq[j]);
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    const double abs1 = stats[kStatAbs * n + j];
    const double t = ColumnThreshold(model, abs1, static_cast<double>(stats[kStatNorm * n + j]),
                                     static_cast<double>(stats[kStatFlush * n + j]), c_abs[j],
                                     GuardedNorm(sq[j], c_abs[j])) /
                     s;
    threshold[j] = static_cast<Acc>(t);
    const SignedSum<E>* g[2] = {&g1[j], &g2[j]};
    const int hi_row[2] = {kStatRef1, kStatRef2}, lo_row[2] = {kStatRef1Lo, kStatRef2Lo};
    for (int q = 0; q < 2; ++q) {
      SignedSum<E> d = *g[q];
      d.Normalize();
      // A vacuous (infinite) bound checks finiteness only: the reference may
      // itself have overflowed, so the residual is NaN where C's checksum is.
      if (std::isinf(t)) {
        resid[q * n + j] = static_cast<Acc>(d.hi * 0.0);
        continue;
      }
      d.Add(-1.0, static_cast<double>(stats[hi_row[q] * n + j]));
      d.Add(-1.0, static_cast<double>(stats[lo_row[q] * n + j]));
      d.Normalize();
      resid[q * n + j] = static_cast<Acc>(d.hi / s);
    }
  }
}

// Flips bit `bit` of element `at` of a T array (bf16/f16 as raw 16 bits).
template <ElemType E>
void FlipBit(void* data, int64_t at, int bit) {
  auto* bytes = static_cast<unsigned char*>(data) + at * ItemSize(E);
  bytes[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
}

ffi::Error EncodeCpuImpl(ffi::AnyBuffer a, ffi::AnyBuffer b, ffi::Result<ffi::AnyBuffer> stats,
                         ffi::Result<ffi::AnyBuffer> /*workspace*/) {
  constexpr std::string_view kOp = "tsm2_abft_encode (cpu)";
  AbftPassProblem p;
  TSM2_FFI_RETURN_IF_ERROR(DecodeAbftEncode(kOp, a, b, *stats, &p));
  return DispatchElemAndAcc(kOp, p.dtype, p.acc, [&](auto elem, auto acc) {
    using Acc = AccCType<decltype(acc)::value>;
    EncodeReference<decltype(elem)::value, Acc>(p, a.untyped_data(), b.untyped_data(),
                                                static_cast<Acc*>(stats->untyped_data()));
    return ffi::Error::Success();
  });
}

ffi::Error VerifyCommon(std::string_view op, const AbftPassProblem& p, const void* c,
                        const ffi::AnyBuffer& stats, const ffi::AnyBuffer& model,
                        ffi::AnyBuffer* resid, ffi::AnyBuffer* threshold) {
  return DispatchElemAndAcc(op, p.dtype, p.acc, [&](auto elem, auto acc) {
    using Acc = AccCType<decltype(acc)::value>;
    VerifyReference<decltype(elem)::value, Acc>(p, c, static_cast<const Acc*>(stats.untyped_data()),
                                                static_cast<const Acc*>(model.untyped_data()),
                                                static_cast<Acc*>(resid->untyped_data()),
                                                static_cast<Acc*>(threshold->untyped_data()));
    return ffi::Error::Success();
  });
}

ffi::Error VerifyCpuImpl(ffi::AnyBuffer c, ffi::AnyBuffer stats, ffi::AnyBuffer model,
                         ffi::Result<ffi::AnyBuffer> resid, ffi::Result<ffi::AnyBuffer> threshold,
                         ffi::Result<ffi::AnyBuffer> /*workspace*/) {
  constexpr std::string_view kOp = "tsm2_abft_verify (cpu)";
  AbftPassProblem p;
  TSM2_FFI_RETURN_IF_ERROR(DecodeAbftVerify(kOp, c, stats, model, *resid, *threshold, &p));
  return VerifyCommon(kOp, p, c.untyped_data(), stats, model, &*resid, &*threshold);
}

ffi::Error VerifyInjectCpuImpl(ffi::AnyBuffer c, ffi::AnyBuffer stats, ffi::AnyBuffer model,
                               ffi::Result<ffi::AnyBuffer> c_out, ffi::Result<ffi::AnyBuffer> resid,
                               ffi::Result<ffi::AnyBuffer> threshold,
                               ffi::Result<ffi::AnyBuffer> /*workspace*/, int64_t inject_row,
                               int64_t inject_col, int32_t inject_bit) {
  constexpr std::string_view kOp = "tsm2_abft_verify_inject (cpu)";
  AbftPassProblem p;
  TSM2_FFI_RETURN_IF_ERROR(DecodeAbftVerify(kOp, c, stats, model, *resid, *threshold, &p));
  TSM2_FFI_RETURN_IF_ERROR(DecodeInjection(kOp, p, *c_out, inject_row, inject_col, inject_bit));
  if (c_out->untyped_data() != c.untyped_data()) {
    std::memcpy(c_out->untyped_data(), c.untyped_data(), c.size_bytes());
  }
  TSM2_FFI_RETURN_IF_ERROR(DispatchElemType(kOp, p.dtype, [&](auto elem) {
    FlipBit<decltype(elem)::value>(c_out->untyped_data(), inject_row * p.n + inject_col,
                                   inject_bit);
    return ffi::Error::Success();
  }));
  return VerifyCommon(kOp, p, c_out->untyped_data(), stats, model, &*resid, &*threshold);
}

}  // namespace
}  // namespace tsm2

XLA_FFI_DEFINE_HANDLER_SYMBOL(Tsm2AbftEncodeCpu, tsm2::EncodeCpuImpl,
                              tsm2::AbftEncodeSignature(xla::ffi::Ffi::Bind()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(Tsm2AbftVerifyCpu, tsm2::VerifyCpuImpl,
                              tsm2::AbftVerifySignature(xla::ffi::Ffi::Bind()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(Tsm2AbftVerifyInjectCpu, tsm2::VerifyInjectCpuImpl,
                              tsm2::AbftVerifyInjectSignature(xla::ffi::Ffi::Bind()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(Tsm2ColsumsCpu, tsm2::ColsumsCpuImpl,
                              tsm2::ColsumsSignature(xla::ffi::Ffi::Bind()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(Tsm2RepairColumnCpu, tsm2::RepairCpuImpl,
                              tsm2::RepairColumnSignature(xla::ffi::Ffi::Bind()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(Tsm2AbftJudgeCpu, tsm2::JudgeCpuImpl,
                              tsm2::AbftJudgeSignature(xla::ffi::Ffi::Bind()));

// CPU references for the ABFT targets `tsm2_colsums`, `tsm2_repair_column`
// and `tsm2_abft_judge`: plain loops behind the same handler signatures and
// validation as the CUDA ones, accumulating in the caller's Acc with fma as
// the kernels do (in another order: rows in sequence). They let the CPU test
// suite run jax_tsm2.abft's kernel modes end to end; they are not fast.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

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

}  // namespace
}  // namespace tsm2

XLA_FFI_DEFINE_HANDLER_SYMBOL(Tsm2ColsumsCpu, tsm2::ColsumsCpuImpl,
                              tsm2::ColsumsSignature(xla::ffi::Ffi::Bind()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(Tsm2RepairColumnCpu, tsm2::RepairCpuImpl,
                              tsm2::RepairColumnSignature(xla::ffi::Ffi::Bind()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(Tsm2AbftJudgeCpu, tsm2::JudgeCpuImpl,
                              tsm2::AbftJudgeSignature(xla::ffi::Ffi::Bind()));

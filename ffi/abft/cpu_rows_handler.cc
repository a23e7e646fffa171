// The CPU reference of tsm2_abft_rows: the product, each row's checksum and
// statistics, the check and the repair in plain loops, accumulating as the
// CUDA kernels do (in the accumulator type, B's row sums first; in another
// order: the elements of a row in sequence) and judging with the same
// RowThreshold. It serves the tests of the fused check without a GPU
// (abft._FUSED = "always"); it is not fast.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "ffi/abft/handlers.h"
#include "ffi/abft/row_check.h"
#include "ffi/abft/row_check_problem.h"
#include "ffi/common/cpu_elements.h"
#include "ffi/common/dispatch.h"
#include "ffi/common/ffi_helpers.h"

namespace tsm2 {
namespace {

template <typename Acc>
Acc FlipBitOf(Acc x, int bit) {
  using Bits = std::conditional_t<sizeof(Acc) == 8, uint64_t, uint32_t>;
  Bits u;
  std::memcpy(&u, &x, sizeof u);
  u ^= Bits{1} << bit;
  std::memcpy(&x, &u, sizeof u);
  return x;
}

struct RowsVerdict {
  int32_t errors = 0;
  bool corrected = false;
  int32_t row = -1, col = -1;
  double magnitude = 0.0;
  bool uncorrectable = false;
};

template <ElemType E>
RowsVerdict RowsReference(const RowsProblem& p, const double* model, const void* a, const void* b,
                          const void* weights, void* c_out) {
  using In = HostElem<E>;
  using Acc = std::conditional_t<E == ElemType::kF64, double, float>;
  auto at = [&](int64_t i, int64_t l) { return static_cast<Acc>(In::Load(a, i * p.k + l)); };
  auto bt = [&](int64_t l, int64_t j) {
    return static_cast<Acc>(In::Load(b, p.b_t ? j * p.k + l : l * p.n + j));
  };
  const Acc* wt = static_cast<const Acc*>(weights);
  // B's weighted row sums (two parts) and the statistics' weights, as the row
  // stream stages them: in f64, double-double (TwoSum) for the sums.
  std::vector<Acc> x_hi(p.k), x_lo(p.k), y(p.k), w(p.k), z(p.k);
  for (int64_t l = 0; l < p.k; ++l) {
    double hi = 0.0, lo = 0.0, abs = 0.0, sq = 0.0;
    for (int64_t j = 0; j < p.n; ++j) {
      const double v = static_cast<double>(bt(l, j) * wt[j]);
      const double s = hi + v, bb = s - hi;
      lo += (hi - (s - bb)) + (v - bb);
      hi = s;
      abs += std::fabs(v);
      sq = std::fma(v, v, sq);
    }
    x_hi[l] = static_cast<Acc>(hi);
    x_lo[l] = static_cast<Acc>((hi - static_cast<double>(x_hi[l])) + lo);
    const double sum = hi + lo;
    y[l] = static_cast<Acc>(abs);
    w[l] = static_cast<Acc>(std::fabs(sum));
    z[l] = static_cast<Acc>(std::fma(sum, sum, sq));
  }
  double weight_sum = 2.0;  // RowThreshold's: the checksum's two parts weigh 1
  for (int64_t j = 0; j < p.n; ++j) weight_sum += Fmax1(static_cast<double>(wt[j]));
  Acc* c = static_cast<Acc*>(c_out);
  std::vector<int64_t> flagged;
  std::vector<Acc> sums(p.n);
  for (int64_t i = 0; i < p.m; ++i) {
    std::fill(sums.begin(), sums.end(), Acc(p.k == 1 ? -0.0 : 0.0));
    Acc ch_hi = 0, ch_lo = 0, st_abs = 0, st_abs_ch = 0, st_sq = 0;
    for (int64_t l = 0; l < p.k; ++l) {
      const Acc v = at(i, l), av = std::fabs(v);
      for (int64_t j = 0; j < p.n; ++j) sums[j] = std::fma(v, bt(l, j), sums[j]);
      ch_hi = std::fma(v, x_hi[l], ch_hi);
      ch_lo = std::fma(v, x_lo[l], ch_lo);
      st_abs = std::fma(av, y[l], st_abs);
      st_abs_ch = std::fma(av, w[l], st_abs_ch);
      st_sq = std::fma(v * v, z[l], st_sq);
    }
    double sum = 0.0, c_abs = 0.0, c_sq = 0.0;
    const double ch = static_cast<double>(ch_hi) + static_cast<double>(ch_lo);
    for (int64_t j = 0; j < p.n; ++j) {
      Acc v = sums[j];
      if (i == p.inject_row && j == p.inject_col) v = FlipBitOf(v, p.inject_bit);
      c[i * p.n + j] = v;
      const double d = static_cast<double>(v) * static_cast<double>(wt[j]);
      sum += d;
      c_abs += std::fabs(d);
      c_sq += d * d;
    }
    const double t = RowThreshold(model, st_abs, st_abs_ch, st_sq, c_abs, c_sq, ch, weight_sum);
    if (!(std::fabs(sum - ch) <= t)) flagged.push_back(i);
  }
  RowsVerdict v;
  if (flagged.empty()) return v;
  v.errors = static_cast<int32_t>(flagged.size());
  if (flagged.size() > static_cast<size_t>(kRowCheckMaxRows)) {
    v.uncorrectable = true;
    return v;
  }
  // Recompute each flagged row in f64; the verdict names the entry that moved
  // most against its own bound.
  v.errors = 0;
  double best = -1.0;
  for (int64_t i : flagged) {
    int32_t faulty = 0;
    for (int64_t j = 0; j < p.n; ++j) {
      double exact = 0.0, scale = 0.0;
      for (int64_t l = 0; l < p.k; ++l) {
        const double av = static_cast<double>(at(i, l)), bv = static_cast<double>(bt(l, j));
        exact = std::fma(av, bv, exact);
        scale = std::fma(std::fabs(av), std::fabs(bv), scale);
      }
      const Acc fresh = static_cast<Acc>(exact);
      const double d = static_cast<double>(c[i * p.n + j]) - static_cast<double>(fresh);
      const double bound = model[kRowEntryFactor] * scale + model[kRowEntryFloor];
      if (!(std::fabs(d) <= bound)) ++faulty;
      const double size = EntryMove(d, bound);
      if (size > best) {
        best = size;
        v.row = static_cast<int32_t>(i);
        v.col = static_cast<int32_t>(j);
        v.magnitude = d;
      }
      c[i * p.n + j] = fresh;
    }
    v.errors += faulty > 0 ? faulty : 1;  // a fault in the checksum moves no entry
  }
  v.corrected = true;
  return v;
}

template <typename T>
void Store(ffi::AnyBuffer* buf, T value) {
  *static_cast<T*>(buf->untyped_data()) = value;
}

ffi::Error RowsCpuImpl(ffi::AnyBuffer a, ffi::AnyBuffer b, ffi::AnyBuffer weights,
                       ffi::Result<ffi::AnyBuffer> c, ffi::Result<ffi::AnyBuffer> errors,
                       ffi::Result<ffi::AnyBuffer> corrected, ffi::Result<ffi::AnyBuffer> row,
                       ffi::Result<ffi::AnyBuffer> col, ffi::Result<ffi::AnyBuffer> magnitude,
                       ffi::Result<ffi::AnyBuffer> uncorrectable,
                       ffi::Result<ffi::AnyBuffer> /*workspace*/, ffi::Span<const double> model,
                       bool b_t, int64_t inject_row, int64_t inject_col, int32_t inject_bit) {
  constexpr std::string_view kOp = "tsm2_abft_rows (cpu)";
  RowsProblem p;
  TSM2_FFI_RETURN_IF_ERROR(DecodeRows(
      kOp, a, b, weights, *c, {&*errors, &*corrected, &*row, &*col, &*magnitude, &*uncorrectable},
      model, b_t, inject_row, inject_col, inject_bit, &p));
  double m[kRowModelLen];
  for (int q = 0; q < kRowModelLen; ++q) m[q] = model[q];
  return DispatchElemType(kOp, p.dtype, [&](auto elem) -> ffi::Error {
    constexpr ElemType E = decltype(elem)::value;
    const RowsVerdict v = RowsReference<E>(p, m, a.untyped_data(), b.untyped_data(),
                                           weights.untyped_data(), c->untyped_data());
    Store<int32_t>(&*errors, v.errors);
    Store<bool>(&*corrected, v.corrected);
    Store<int32_t>(&*row, v.row);
    Store<int32_t>(&*col, v.col);
    if (E == ElemType::kF64) {
      Store<double>(&*magnitude, v.magnitude);
    } else {
      Store<float>(&*magnitude, static_cast<float>(v.magnitude));
    }
    Store<bool>(&*uncorrectable, v.uncorrectable);
    return ffi::Error::Success();
  });
}

}  // namespace
}  // namespace tsm2

XLA_FFI_DEFINE_HANDLER_SYMBOL(Tsm2AbftRowsCpu, tsm2::RowsCpuImpl,
                              tsm2::AbftRowsSignature(xla::ffi::Ffi::Bind()));

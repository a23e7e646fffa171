// CPU references for the ABFT targets `tsm2_colsums` and
// `tsm2_repair_column`: plain loops behind the same handler signatures and
// validation as the CUDA ones, accumulating in the caller's Acc with fma as
// the kernels do (in another order: rows in sequence). They let the CPU test
// suite run jax_tsm2.abft's kernel modes end to end; they are not fast.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "ffi/abft_problem.h"
#include "ffi/cpu_elements.h"
#include "ffi/handlers.h"

namespace tsm2 {
namespace {

template <typename Acc>
void ColsumsReference(const ColsumsProblem& p, const void* m, const Acc* v, Acc* out) {
  std::fill(out, out + p.r * p.cols, Acc(0));
  for (int64_t i = 0; i < p.rows; ++i) {
    for (int q = 0; q < p.r; ++q) {
      const Acc w = v[q * p.rows + i];
      const bool abs_q = (p.abs_rows >> q) & 1u;
      Acc* o = out + q * p.cols;
      for (int64_t c = 0; c < p.cols; ++c) {
        const Acc x = static_cast<Acc>(LoadAs(p.dtype, m, i * p.cols + c));
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
  if (p.acc == ffi::DataType::F64) {
    ColsumsReference<double>(p, m.untyped_data(), static_cast<const double*>(v.untyped_data()),
                             static_cast<double*>(out->untyped_data()));
  } else {
    ColsumsReference<float>(p, m.untyped_data(), static_cast<const float*>(v.untyped_data()),
                            static_cast<float*>(out->untyped_data()));
  }
  return ffi::Error::Success();
}

// bf16/f16 columns with f64 accumulators round through f32 here (StoreAs)
// but straight from f64 on CUDA; jax_tsm2.abft never asks for that pairing.
template <typename Acc>
void RepairReference(const RepairProblem& p, int64_t j, const void* a, const void* b, const void* c,
                     void* c_out, void* old_col, Acc* exact, Acc* scale) {
  bool finite = true;
  for (int64_t i = 0; i < p.m; ++i) {
    Acc ex = 0, sc = 0;
    for (int64_t l = 0; l < p.k; ++l) {
      const Acc x = static_cast<Acc>(LoadAs(p.dtype, a, i * p.k + l));
      const Acc y = static_cast<Acc>(LoadAs(p.dtype, b, l * p.n + j));
      ex = std::fma(x, y, ex);
      sc = std::fma(std::fabs(x), std::fabs(y), sc);
    }
    StoreAs(p.dtype, old_col, i, LoadAs(p.dtype, c, i * p.n + j));
    exact[i] = ex;
    scale[i] = sc;
    finite = finite && std::isfinite(ex);
  }
  if (!finite) return;  // C stays as it was: the caller reports the fault uncorrectable
  for (int64_t i = 0; i < p.m; ++i) StoreAs(p.dtype, c_out, i * p.n + j, exact[i]);
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
  if (p.acc == ffi::DataType::F64) {
    RepairReference<double>(p, col, a.untyped_data(), b.untyped_data(), c.untyped_data(),
                            c_out->untyped_data(), old_col->untyped_data(),
                            static_cast<double*>(exact->untyped_data()),
                            static_cast<double*>(scale->untyped_data()));
  } else {
    RepairReference<float>(p, col, a.untyped_data(), b.untyped_data(), c.untyped_data(),
                           c_out->untyped_data(), old_col->untyped_data(),
                           static_cast<float*>(exact->untyped_data()),
                           static_cast<float*>(scale->untyped_data()));
  }
  return ffi::Error::Success();
}

}  // namespace
}  // namespace tsm2

XLA_FFI_DEFINE_HANDLER_SYMBOL(Tsm2ColsumsCpu, tsm2::ColsumsCpuImpl,
                              xla::ffi::Ffi::Bind()
                                  .Arg<xla::ffi::AnyBuffer>()   // m: [rows, cols]
                                  .Arg<xla::ffi::AnyBuffer>()   // v: [r, rows] (acc)
                                  .Ret<xla::ffi::AnyBuffer>()   // out: [r, cols] (acc)
                                  .Ret<xla::ffi::AnyBuffer>()   // workspace (unused on CPU)
                                  .Attr<int32_t>("abs_rows"));  // bit q: row q weighs |m|

XLA_FFI_DEFINE_HANDLER_SYMBOL(Tsm2RepairColumnCpu, tsm2::RepairCpuImpl,
                              xla::ffi::Ffi::Bind()
                                  .Arg<xla::ffi::AnyBuffer>()    // flag: s32[] or pred[]
                                  .Arg<xla::ffi::AnyBuffer>()    // j: s32[]
                                  .Arg<xla::ffi::AnyBuffer>()    // a: [m, k]
                                  .Arg<xla::ffi::AnyBuffer>()    // b: [k, n]
                                  .Arg<xla::ffi::AnyBuffer>()    // c: [m, n]
                                  .Ret<xla::ffi::AnyBuffer>()    // c_out: [m, n], aliases c
                                  .Ret<xla::ffi::AnyBuffer>()    // old_col: [m]
                                  .Ret<xla::ffi::AnyBuffer>()    // exact: [m] (acc)
                                  .Ret<xla::ffi::AnyBuffer>()    // scale: [m] (acc)
                                  .Ret<xla::ffi::AnyBuffer>());  // workspace (unused on CPU)

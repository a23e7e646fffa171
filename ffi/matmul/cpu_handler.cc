// The CPU reference of tsm2_matmul: straightforward loops behind the same
// handler signature and validation as the CUDA target.
//
// It exists so that the CPU test suite can force the custom-call path and
// check primitive -> lowering -> FFI handler -> result end to end on a machine
// without a GPU. It is not meant to be fast.
#include <cstdint>

#include "ffi/common/cpu_elements.h"
#include "ffi/common/dispatch.h"
#include "ffi/common/ffi_helpers.h"
#include "ffi/matmul/handlers.h"
#include "ffi/matmul/problem.h"

namespace tsm2 {
namespace {

// Accumulates in the same precision as the CUDA kernels (f64 for f64, f32
// otherwise) so that the two targets round alike.
template <ElemType E>
void Reference(const MatmulProblem& p, const void* a, const void* b, void* c) {
  using Acc = std::conditional_t<E == ElemType::kF64, double, float>;
  using In = HostElem<E>;
  const bool out_f32 = p.out_dtype != p.dtype;
  // Element (i, l) of op(A) and (l, j) of op(B), whatever the layout.
  const bool a_t = p.layout == Layout::kTN, b_t = p.layout == Layout::kNT;
  const int64_t a_si = a_t ? 1 : p.k, a_sl = a_t ? p.m : 1;
  const int64_t b_sl = b_t ? 1 : p.n, b_sj = b_t ? p.k : 1;
  for (int64_t bi = 0; bi < p.batch; ++bi) {
    const int64_t a0 = bi * p.a_batch_stride, b0 = bi * p.b_batch_stride, c0 = bi * p.m * p.n;
    for (int64_t i = 0; i < p.m; ++i) {
      for (int64_t j = 0; j < p.n; ++j) {
        // Signed zeros as jnp gives them: a single product keeps its sign (-0.0
        // is the identity of IEEE addition), a longer or empty sum starts from +0
        // (the CUDA kernels' InitSums).
        Acc acc = p.k == 1 ? Acc(-0.0) : Acc(0);
        for (int64_t l = 0; l < p.k; ++l) {
          acc += static_cast<Acc>(In::Load(a, a0 + i * a_si + l * a_sl)) *
                 static_cast<Acc>(In::Load(b, b0 + l * b_sl + j * b_sj));
        }
        if (out_f32) {
          HostElem<ElemType::kF32>::Store(c, c0 + i * p.n + j, acc);
        } else {
          In::Store(c, c0 + i * p.n + j, acc);
        }
      }
    }
  }
}

ffi::Error MatmulCpuImpl(ffi::AnyBuffer a, ffi::AnyBuffer b, ffi::Result<ffi::AnyBuffer> c,
                         ffi::Result<ffi::AnyBuffer> /*workspace*/, int32_t kernel,
                         int32_t layout) {
  constexpr std::string_view kOp = "tsm2_matmul (cpu)";
  MatmulProblem p;
  TSM2_FFI_RETURN_IF_ERROR(DecodeMatmul(kOp, a, b, *c, kernel, layout, &p));
  return DispatchElemType(kOp, p.dtype, [&](auto elem) {
    Reference<decltype(elem)::value>(p, a.untyped_data(), b.untyped_data(), c->untyped_data());
    return ffi::Error::Success();
  });
}

}  // namespace
}  // namespace tsm2

XLA_FFI_DEFINE_HANDLER_SYMBOL(Tsm2MatmulCpu, tsm2::MatmulCpuImpl,
                              tsm2::MatmulSignature(xla::ffi::Ffi::Bind()));

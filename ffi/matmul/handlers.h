// The FFI signature of tsm2_matmul and its handler symbols: the CPU
// reference (cpu_handler.cc) and the CUDA handler (cuda_handler.cc).
//
// Each signature function takes a binding that already holds the platform's
// context (the CUDA stream, or nothing on CPU), so that the CPU and CUDA
// handlers share one signature and cannot drift apart:
//
//   XLA_FFI_DEFINE_HANDLER_SYMBOL(Tsm2MatmulCpu, tsm2::MatmulCpuImpl,
//                                 tsm2::MatmulSignature(xla::ffi::Ffi::Bind()));
//
// "acc" marks buffers in the accumulation type (f32 for f32/bf16/f16, f64 for
// f64). Workspaces are XLA-allocated scratch the CPU handlers ignore.
#pragma once

#include <cstdint>
#include <utility>

#include "xla/ffi/api/ffi.h"

namespace tsm2 {

using xla::ffi::AnyBuffer;

// tsm2_matmul: C = op(A) @ op(B) on one of our kernels.
template <typename B>
auto MatmulSignature(B binding) {
  return std::move(binding)
      .template Arg<AnyBuffer>()          // a: [batch?, m, k] (tn: k, m)
      .template Arg<AnyBuffer>()          // b: [batch?, k, n] (nt: n, k)
      .template Ret<AnyBuffer>()          // c: [batch?, m, n]
      .template Ret<AnyBuffer>()          // workspace: u8[bytes]
      .template Attr<int32_t>("kernel")   // tsm2::Kernel
      .template Attr<int32_t>("layout");  // tsm2::Layout
}

}  // namespace tsm2

XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2MatmulCpu);
#ifdef TSM2_WITH_CUDA
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2MatmulCuda);
#endif

// The FFI signatures of tsm2_kmeans_step and tsm2_kmeans_update and their
// handler symbols: the CPU reference of the step (cpu_handler.cc) and the
// CUDA handlers of both (cuda_handler.cc).
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

// tsm2_kmeans_step: one fused Lloyd step (assignment, sums, counts, inertia).
template <typename B>
auto KmeansStepSignature(B binding) {
  return std::move(binding)
      .template Arg<AnyBuffer>()   // x: [n, d]
      .template Arg<AnyBuffer>()   // c: [k, d]
      .template Arg<AnyBuffer>()   // w: [n] (acc)
      .template Ret<AnyBuffer>()   // labels: s32[n]
      .template Ret<AnyBuffer>()   // mind: [n] (acc)
      .template Ret<AnyBuffer>()   // sums: [k, d] (acc)
      .template Ret<AnyBuffer>()   // counts: [k] (acc)
      .template Ret<AnyBuffer>()   // inertia: [] (acc)
      .template Ret<AnyBuffer>();  // workspace: u8[bytes]
}

// tsm2_kmeans_update: new centroids, empty clusters relocated (launcher.h).
template <typename B>
auto KmeansUpdateSignature(B binding) {
  return std::move(binding)
      .template Arg<AnyBuffer>()   // sums: [k, d] (acc)
      .template Arg<AnyBuffer>()   // counts: [k] (acc)
      .template Arg<AnyBuffer>()   // c_old: [k, d] (acc)
      .template Arg<AnyBuffer>()   // mind: [n] (acc)
      .template Arg<AnyBuffer>()   // x: [n, d]
      .template Arg<AnyBuffer>()   // w: [n] (acc)
      .template Arg<AnyBuffer>()   // labels: s32[n]
      .template Ret<AnyBuffer>()   // c_new: [k, d] (acc)
      .template Ret<AnyBuffer>();  // workspace: u8[bytes]
}

}  // namespace tsm2

XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2KmeansStepCpu);
#ifdef TSM2_WITH_CUDA
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2KmeansStepCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2KmeansUpdateCuda);
#endif

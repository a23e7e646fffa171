// The FFI signature of each target (operands, results, attributes), shared
// by its CPU and CUDA handlers so that the two cannot drift apart. Each
// function takes a binding that already holds the platform's context (the
// CUDA stream, or nothing on CPU):
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

// tsm2_kmeans_update: new centroids, empty clusters relocated (launch_kmeans.h).
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

// tsm2_colsums: out[q] = v[q] @ m, or v[q] @ |m| where bit q of abs_rows is set.
template <typename B>
auto ColsumsSignature(B binding) {
  return std::move(binding)
      .template Arg<AnyBuffer>()            // m: [rows, cols]
      .template Arg<AnyBuffer>()            // v: [r, rows] (acc)
      .template Ret<AnyBuffer>()            // out: [r, cols] (acc)
      .template Ret<AnyBuffer>()            // workspace: u8[bytes]
      .template Attr<int32_t>("abs_rows");  // bit q: row q weighs |m|
}

// tsm2_repair_column: recompute column j of C = A @ B when flag is set.
template <typename B>
auto RepairColumnSignature(B binding) {
  return std::move(binding)
      .template Arg<AnyBuffer>()   // flag: s32[] or pred[]
      .template Arg<AnyBuffer>()   // j: s32[]
      .template Arg<AnyBuffer>()   // a: [m, k]
      .template Arg<AnyBuffer>()   // b: [k, n]
      .template Arg<AnyBuffer>()   // c: [m, n]
      .template Ret<AnyBuffer>()   // c_out: [m, n], aliases c
      .template Ret<AnyBuffer>()   // old_col: [m]
      .template Ret<AnyBuffer>()   // exact: [m] (acc)
      .template Ret<AnyBuffer>()   // scale: [m] (acc)
      .template Ret<AnyBuffer>();  // workspace: s32[blocks]
}

// tsm2_abft_judge: flags, locates and repairs from the checksum residuals.
template <typename B>
auto AbftJudgeSignature(B binding) {
  return std::move(binding)
      .template Arg<AnyBuffer>()   // resid: [2, n] (acc)
      .template Arg<AnyBuffer>()   // threshold: [n] (acc)
      .template Arg<AnyBuffer>()   // factor: acc[]
      .template Arg<AnyBuffer>()   // floor: acc[]
      .template Arg<AnyBuffer>()   // a: [m, k]
      .template Arg<AnyBuffer>()   // b: [k, n]
      .template Arg<AnyBuffer>()   // c: [m, n]
      .template Ret<AnyBuffer>()   // c_out: [m, n], aliases c
      .template Ret<AnyBuffer>()   // errors_detected: s32[]
      .template Ret<AnyBuffer>()   // corrected: pred[]
      .template Ret<AnyBuffer>()   // row: s32[]
      .template Ret<AnyBuffer>()   // col: s32[]
      .template Ret<AnyBuffer>()   // magnitude: acc[]
      .template Ret<AnyBuffer>()   // uncorrectable: pred[]
      .template Ret<AnyBuffer>()   // old_col: [m]
      .template Ret<AnyBuffer>()   // exact: [m] (acc)
      .template Ret<AnyBuffer>()   // scale: [m] (acc)
      .template Ret<AnyBuffer>();  // state: s32[JudgeStateSize(m)]
}

}  // namespace tsm2

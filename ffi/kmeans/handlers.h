// The FFI signatures of the k-means targets and their handler symbols:
// tsm2_kmeans_step (the fused step for k <= 32; CPU reference in
// cpu_handler.cc, CUDA in cuda_handler.cc), tsm2_kmeans_update (CUDA), and
// the step for any k in two calls, tsm2_kmeans_assign and tsm2_kmeans_sums
// (CPU references in cpu_tiled_handler.cc, CUDA in cuda_tiled_handler.cc).
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

// The fused step's operands: x [n, d], c [k, d], w [n] (acc).
template <typename B>
auto KmeansStepArgs(B&& binding) {
  return std::forward<B>(binding)
      .template Arg<AnyBuffer>()   // x: [n, d]
      .template Arg<AnyBuffer>()   // c: [k, d]
      .template Arg<AnyBuffer>();  // w: [n] (acc)
}

// The fused step's results, before the variants' extra results and workspace.
template <typename B>
auto KmeansStepRets(B&& binding) {
  return std::forward<B>(binding)
      .template Ret<AnyBuffer>()   // labels: s32[n]
      .template Ret<AnyBuffer>()   // mind: [n] (acc)
      .template Ret<AnyBuffer>()   // sums: [k, d] (acc)
      .template Ret<AnyBuffer>()   // counts: [k] (acc)
      .template Ret<AnyBuffer>();  // inertia: [] (acc)
}

// tsm2_kmeans_step: one fused Lloyd step (assignment, sums, counts, inertia).
template <typename B>
auto KmeansStepSignature(B binding) {
  return KmeansStepRets(KmeansStepArgs(std::move(binding)))
      .template Ret<AnyBuffer>();  // workspace: u8[bytes]
}

// tsm2_kmeans_step_checked: the step with its per-row distance check
// (row_check.h): two more results before the workspace.
template <typename B>
auto KmeansStepCheckedSignature(B binding) {
  return KmeansStepRets(KmeansStepArgs(std::move(binding)))
      .template Ret<AnyBuffer>()   // row_faults: s32[], rows that failed the check
      .template Ret<AnyBuffer>()   // row_margin: f32[], worst residual / threshold
      .template Ret<AnyBuffer>();  // workspace: u8[bytes]
}

// tsm2_kmeans_step_checked_inject: the checked step with the distance of row
// inject[1] to centroid inject[2] flipped at bit inject[3] before the check
// and the argmin where inject[0] != 0. An operand, not attributes, so that a
// campaign of faults (traced) compiles once.
template <typename B>
auto KmeansStepInjectSignature(B binding) {
  return KmeansStepRets(
             KmeansStepArgs(std::move(binding)).template Arg<AnyBuffer>())  // inject: s32[4]
      .template Ret<AnyBuffer>()                                            // row_faults: s32[]
      .template Ret<AnyBuffer>()                                            // row_margin: f32[]
      .template Ret<AnyBuffer>();                                           // workspace: u8[bytes]
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

// tsm2_kmeans_assign: the closest centroid of each row, for any k (tiled_plan.h).
template <typename B>
auto KmeansAssignSignature(B binding) {
  return std::move(binding)
      .template Arg<AnyBuffer>()             // x: [n, d] (f32, bf16 or f16)
      .template Arg<AnyBuffer>()             // x_sq: f32[n], ||x||^2 of each row
      .template Arg<AnyBuffer>()             // c: [k, d] (x's dtype)
      .template Ret<AnyBuffer>()             // labels: s32[n]
      .template Ret<AnyBuffer>()             // mind: f32[n]
      .template Ret<AnyBuffer>()             // workspace: u8[bytes]
      .template Attr<int32_t>("precision");  // tsm2::KmeansPrecision
}

// tsm2_kmeans_sums: per-cluster sums and weights, and the inertia, from the
// labels: by buckets of `bucket` clusters and `chunks` row ranges where
// `piece` is 0, else sorted by label and added over pieces of `piece` sorted
// rows, with the sort and the inertia over `chunks` row ranges (tiled_plan.h).
template <typename B>
auto KmeansSumsSignature(B binding) {
  return std::move(binding)
      .template Arg<AnyBuffer>()         // x: [n, d]
      .template Arg<AnyBuffer>()         // w: [n] (acc)
      .template Arg<AnyBuffer>()         // labels: s32[n]
      .template Arg<AnyBuffer>()         // mind: [n] (acc)
      .template Ret<AnyBuffer>()         // sums: [k, d] (acc)
      .template Ret<AnyBuffer>()         // counts: [k] (acc)
      .template Ret<AnyBuffer>()         // inertia: [] (acc)
      .template Ret<AnyBuffer>()         // workspace: u8[bytes]
      .template Attr<int64_t>("bucket")  // clusters per block (piece == 0)
      .template Attr<int64_t>("chunks")  // row ranges
      .template Attr<int64_t>("piece");  // sorted rows a piece adds in order; 0: buckets
}

}  // namespace tsm2

XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2KmeansStepCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2KmeansStepCheckedCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2KmeansStepInjectCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2KmeansAssignCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2KmeansSumsCpu);
#ifdef TSM2_WITH_CUDA
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2KmeansStepCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2KmeansStepCheckedCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2KmeansStepInjectCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2KmeansUpdateCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2KmeansAssignCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2KmeansSumsCuda);
#endif

// The FFI signatures of the ABFT targets tsm2_colsums, tsm2_repair_column,
// tsm2_abft_judge, tsm2_abft_encode and tsm2_abft_verify(_inject), and their
// handler symbols: the CPU references
// (cpu_handler.cc) and the CUDA handlers (cuda_handler.cc).
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

#include "ffi/abft/verdict_out.h"
#include "xla/ffi/api/ffi.h"

namespace tsm2 {

using xla::ffi::AnyBuffer;

// The verdict's six results, in this order in every signature that returns
// one (VerdictOutOf takes them alike).
template <typename B>
auto VerdictResults(B binding) {
  return std::move(binding)
      .template Ret<AnyBuffer>()   // errors_detected: s32[]
      .template Ret<AnyBuffer>()   // corrected: pred[]
      .template Ret<AnyBuffer>()   // row: s32[]
      .template Ret<AnyBuffer>()   // col: s32[]
      .template Ret<AnyBuffer>()   // magnitude: acc[]
      .template Ret<AnyBuffer>();  // uncorrectable: pred[]
}

// The verdict's six result buffers (in the signatures' order) as the device
// pointers a check's last kernel writes.
inline VerdictOut VerdictOutOf(xla::ffi::Result<AnyBuffer>& errors_detected,
                               xla::ffi::Result<AnyBuffer>& corrected,
                               xla::ffi::Result<AnyBuffer>& row, xla::ffi::Result<AnyBuffer>& col,
                               xla::ffi::Result<AnyBuffer>& magnitude,
                               xla::ffi::Result<AnyBuffer>& uncorrectable) {
  VerdictOut v;
  v.errors_detected = static_cast<int32_t*>(errors_detected->untyped_data());
  v.corrected = static_cast<bool*>(corrected->untyped_data());
  v.row = static_cast<int32_t*>(row->untyped_data());
  v.col = static_cast<int32_t*>(col->untyped_data());
  v.magnitude = magnitude->untyped_data();
  v.uncorrectable = static_cast<bool*>(uncorrectable->untyped_data());
  return v;
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
  return VerdictResults(std::move(binding)
                            .template Arg<AnyBuffer>()   // resid: [2, n] (acc)
                            .template Arg<AnyBuffer>()   // threshold: [n] (acc)
                            .template Arg<AnyBuffer>()   // factor: acc[]
                            .template Arg<AnyBuffer>()   // floor: acc[]
                            .template Arg<AnyBuffer>()   // a: [m, k]
                            .template Arg<AnyBuffer>()   // b: [k, n]
                            .template Arg<AnyBuffer>()   // c: [m, n]
                            .template Ret<AnyBuffer>())  // c_out: [m, n], aliases c
      .template Ret<AnyBuffer>()                         // old_col: [m]
      .template Ret<AnyBuffer>()                         // exact: [m] (acc)
      .template Ret<AnyBuffer>()                         // scale: [m] (acc)
      .template Ret<AnyBuffer>();                        // state: s32[JudgeStateSize(m)]
}

// tsm2_abft_encode: the reference checksums of A @ B and the scales of their
// threshold (rows: ffi/abft/checksum.h, AbftStat), from one pass over A and
// one over B.
template <typename B>
auto AbftEncodeSignature(B binding) {
  return std::move(binding)
      .template Arg<AnyBuffer>()   // a: [m, k]
      .template Arg<AnyBuffer>()   // b: [k, n]
      .template Ret<AnyBuffer>()   // stats: [7, n] (acc)
      .template Ret<AnyBuffer>();  // workspace: u8[bytes]
}

// tsm2_abft_verify: the checksum residuals of C and their thresholds, from
// one pass over C.
template <typename B>
auto AbftVerifySignature(B binding) {
  return std::move(binding)
      .template Arg<AnyBuffer>()   // c: [m, n]
      .template Arg<AnyBuffer>()   // stats: [7, n] (acc), from tsm2_abft_encode
      .template Arg<AnyBuffer>()   // model: [12] (acc)
      .template Ret<AnyBuffer>()   // resid: [2, n] (acc), in C's units
      .template Ret<AnyBuffer>()   // threshold: [n] (acc), in C's units
      .template Ret<AnyBuffer>();  // workspace: u8[bytes]
}

// tsm2_abft_verify_inject: tsm2_abft_verify that first flips bit `inject_bit`
// of C[inject_row, inject_col] in the pass's own read of C and writes it back
// (a fault planted inside the kernel, for tests). C_out aliases C.
template <typename B>
auto AbftVerifyInjectSignature(B binding) {
  return std::move(binding)
      .template Arg<AnyBuffer>()  // c: [m, n]
      .template Arg<AnyBuffer>()  // stats
      .template Arg<AnyBuffer>()  // model
      .template Ret<AnyBuffer>()  // c_out: [m, n], aliases c
      .template Ret<AnyBuffer>()  // resid
      .template Ret<AnyBuffer>()  // threshold
      .template Ret<AnyBuffer>()  // workspace
      .template Attr<int64_t>("inject_row")
      .template Attr<int64_t>("inject_col")
      .template Attr<int32_t>("inject_bit");
}

// tsm2_abft_rows: C = A @ B with the fused row check (row_check.h; on CPU a
// plain-loop reference). C and the magnitude are in the accumulator type.
template <typename B>
auto AbftRowsSignature(B binding) {
  return VerdictResults(std::move(binding)
                            .template Arg<AnyBuffer>()       // a: [m, k]
                            .template Arg<AnyBuffer>()       // b: [k, n], or [n, k] with b_t
                            .template Arg<AnyBuffer>()       // weights: [n] powers of two (acc)
                            .template Ret<AnyBuffer>())      // c: [m, n] (acc)
      .template Ret<AnyBuffer>()                             // workspace: u8[bytes]
      .template Attr<xla::ffi::Span<const double>>("model")  // [kRowModelLen]
      .template Attr<bool>("b_t")                            // B given [n, k]
      .template Attr<int64_t>("inject_row")                  // < 0: no injection
      .template Attr<int64_t>("inject_col")
      .template Attr<int32_t>("inject_bit");
}

}  // namespace tsm2

XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2ColsumsCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2RepairColumnCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2AbftJudgeCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2AbftEncodeCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2AbftVerifyCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2AbftVerifyInjectCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2AbftRowsCpu);
#ifdef TSM2_WITH_CUDA
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2ColsumsCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2RepairColumnCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2AbftJudgeCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2AbftEncodeCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2AbftVerifyCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2AbftVerifyInjectCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2AbftRowsCuda);
#endif

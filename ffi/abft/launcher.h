// The host side of the ABFT targets without XLA: the weighted column sums
// (DeviceColsums, planned once by PlanColsumsLaunch and run by LaunchColsums), the
// column repair and the judgement (kernels/colsums.cuh, repair_column.cuh,
// judge.cuh; launch.cu), and the checksum passes of encode and verify
// (kernels/passes.cuh; launch_passes.cu). The FFI handlers (cuda_handler.cc) are one user. E is the
// element type of the data, A that of the accumulators (kF32 or kF64).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "ffi/abft/plan.h"
#include "ffi/abft/row_check.h"
#include "ffi/abft/verdict_out.h"
#include "ffi/common/elem_type.h"
#include "ffi/common/status.h"

namespace tsm2 {

// out[q, :] = sum_i v[q, i] * f_q(m[i, :]), q < r <= 4, f_q = |.| where bit q
// of abs_rows is set. m is [rows, cols] of E, v [r, rows] and out [r, cols]
// of A. The workspace holds the partial sums of split rows; a smaller one
// means fewer splits.
struct DeviceColsums {
  const void* m = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  int64_t rows = 0, cols = 0;
  int r = 1;
  uint32_t abs_rows = 0;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

struct ColsumsLaunchPlan;
using ColsumsLaunchFn = Status (*)(const DeviceColsums& p, const ColsumsLaunchPlan& plan,
                                   cudaStream_t stream);

// Everything the sums' launch needs, decided once by PlanColsumsLaunch.
struct ColsumsLaunchPlan {
  ColsumsPlan split;                 // plan.h
  ColsumsLaunchFn launch = nullptr;  // the sums (or zeros where rows == 0)
  ColsumsLaunchFn finish = nullptr;  // with splits: their fixed-order sum; else null
};

// Plans the sums on the current device (launch.cu).
template <ElemType E, ElemType A>
Status PlanColsumsLaunch(const DeviceColsums& p, ColsumsLaunchPlan* plan);

// Runs `plan` on `stream`. No allocation, no synchronization.
inline Status LaunchColsums(const DeviceColsums& p, const ColsumsLaunchPlan& plan,
                            cudaStream_t stream) {
  if (plan.launch == nullptr) return Status{};  // nothing to write (cols == 0)
  TSM2_RETURN_IF_ERROR(plan.launch(p, plan, stream));
  return plan.finish != nullptr ? plan.finish(p, plan, stream) : Status{};
}

// When *flag != 0 (and 0 <= *j < n): old_col = c[:, j], exact = a @ b[:, j]
// and scale = |a| @ |b[:, j]| (accumulated in A),
// and c_out[:, j] = exact rounded to E if every entry of exact is
// finite. c_out must hold c (XLA aliases them). block_ok has RepairBlocks(m)
// entries. When *flag == 0 nothing is read or written beyond flag and j.
struct DeviceRepair {
  const void* flag = nullptr;
  bool flag_bool = false;
  const int32_t* j = nullptr;
  const void* a = nullptr;
  const void* b = nullptr;
  const void* c = nullptr;
  void* c_out = nullptr;
  void* old_col = nullptr;
  void* exact = nullptr;
  void* scale = nullptr;
  int32_t* block_ok = nullptr;
  int64_t m = 0, k = 0, n = 0;
};

template <ElemType E, ElemType A>
Status LaunchRepairColumn(const DeviceRepair& p, cudaStream_t stream);

// The judgement after the checksum pass over C (kernels/judge.cuh): from
// the residuals resid [2, n] and thresholds [n] (Acc), the failing columns;
// when exactly one fails, its repair as LaunchRepairColumn does it (in place
// in c_out, which must hold c); and the verdict's six scalars. `repair`
// carries a, b, c, c_out, old_col, exact, scale, m, k and n (its flag, j and
// block_ok are set here, from `state`: s32[JudgeStateSize(m)]).
struct DeviceJudge {
  DeviceRepair repair;
  const void* resid = nullptr;
  const void* threshold = nullptr;
  const void* factor = nullptr;
  const void* floor = nullptr;
  int32_t* state = nullptr;
  VerdictOut verdict;
};

template <ElemType E, ElemType A>
Status LaunchJudge(const DeviceJudge& p, cudaStream_t stream);

// tsm2_abft_encode (kernels/passes.cuh): stats [kStatRows, n] of A in
// accumulator type A from a [m, k] and b [k, n] of E. The workspace holds
// the passes' partial sums and A's column values (AbftEncodeLayoutOf).
struct DeviceAbftEncode {
  const void* a = nullptr;
  const void* b = nullptr;
  void* stats = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  int64_t m = 0, k = 0, n = 0;
};

template <ElemType E, ElemType A>
Status LaunchAbftEncode(const DeviceAbftEncode& p, cudaStream_t stream);

// tsm2_abft_verify(_inject): resid [2, n] and threshold [n] in A from c
// [m, n] of E, stats and model (A). With inject, the pass reads c_out (which
// must hold c; it is copied there first if it does not alias c) and plants
// the fault in it.
struct DeviceAbftVerify {
  const void* c = nullptr;
  void* c_out = nullptr;
  const void* stats = nullptr;
  const void* model = nullptr;
  void* resid = nullptr;
  void* threshold = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  int64_t m = 0, n = 0;
  bool inject = false;
  int64_t inject_row = -1, inject_col = -1;
  int inject_bit = 0;
};

template <ElemType E, ElemType A>
Status LaunchAbftVerify(const DeviceAbftVerify& p, cudaStream_t stream);

// The fused check of a row-streamed product (tsm2_abft_rows; row_check.h,
// launch_rows.cu): C = A @ B (B given [n, k] when b_t) with each row checked
// against the checksum its own read of A yields, flagged rows recomputed, and
// the verdict written. C and the magnitude are in the accumulator type (f32
// for f32, bf16 and f16 data). inject_row >= 0 flips bit inject_bit of
// C[inject_row, inject_col] as it is stored, before the check (tests).
struct DeviceRowCheck {
  const void* a = nullptr;
  const void* b = nullptr;
  const void* col_weights = nullptr;  // [n] powers of two in the accumulator type
  void* c = nullptr;
  double model[kRowModelLen] = {};  // row_check.h RowModel
  int64_t m = 0, k = 0, n = 0;
  bool b_t = false;
  int64_t inject_row = -1, inject_col = -1;
  int inject_bit = 0;
  VerdictOut verdict;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// The plan and workspace: row_check_plan.h.
template <ElemType E>
Status LaunchRowCheck(const DeviceRowCheck& p, cudaStream_t stream);

}  // namespace tsm2

// Host-side entry points of the ABFT kernels (kernels/colsums.cuh,
// kernels/repair_column.cuh). Nothing here depends on XLA: the FFI handlers
// (abft_handlers.cc) are one user.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "ffi/abft/plan.h"
#include "ffi/matmul/kinds.h"

namespace tsm2 {

// out[q, :] = sum_i v[q, i] * f_q(m[i, :]), q < r <= 4, f_q = |.| where bit q
// of abs_rows is set. m is [rows, cols] of `type`, v [r, rows] and out
// [r, cols] are f64 when acc_f64, else f32.
struct DeviceColsums {
  const void* m = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  int64_t rows = 0, cols = 0;
  int r = 1;
  uint32_t abs_rows = 0;
  ElemType type = ElemType::kF32;
  bool acc_f64 = false;
};

// The plan a launch on the current device uses, given `workspace_bytes` for
// the partial sums (a smaller workspace means fewer splits).
cudaError_t PlanColsumsLaunch(const DeviceColsums& p, size_t workspace_bytes, ColsumsPlan* plan);

// Launches the sums (and the fixed-order addition of the splits) on
// `stream`. rows == 0 writes zeros. No allocation, no synchronization.
cudaError_t LaunchColsums(const DeviceColsums& p, void* workspace, size_t workspace_bytes,
                          cudaStream_t stream);

// When *flag != 0 (and 0 <= *j < n): old_col = c[:, j], exact = a @ b[:, j]
// and scale = |a| @ |b[:, j]| (accumulated in f64 when acc_f64, else f32),
// and c_out[:, j] = exact rounded to `type` if every entry of exact is
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
  ElemType type = ElemType::kF32;
  bool acc_f64 = false;
};

cudaError_t LaunchRepairColumn(const DeviceRepair& p, cudaStream_t stream);

// The judgement after the checksum pass over C (kernels/judge.cuh): from
// the residuals resid [2, n] and thresholds [n] (Acc), the failing columns;
// when exactly one fails, its repair as LaunchRepairColumn does it (in place
// in c_out, which must hold c); and the verdict's six scalars. `repair`
// carries a, b, c, c_out, old_col, exact, scale, m, k, n and the types (its
// flag, j and block_ok are set here, from `state`: s32[JudgeStateSize(m)]).
struct DeviceJudge {
  DeviceRepair repair;
  const void* resid = nullptr;
  const void* threshold = nullptr;
  const void* factor = nullptr;
  const void* floor = nullptr;
  int32_t* state = nullptr;
  int32_t* errors_detected = nullptr;
  bool* corrected = nullptr;
  int32_t* row = nullptr;
  int32_t* col = nullptr;
  void* magnitude = nullptr;
  bool* uncorrectable = nullptr;
};

cudaError_t LaunchJudge(const DeviceJudge& p, cudaStream_t stream);

}  // namespace tsm2

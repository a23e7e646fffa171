// The plan of the fused row check (tsm2_abft_rows) in plain C++, so that the
// launcher (launch_rows.cu) and the workspace size Python asks for
// (_tsm2_ext.abft_rows_workspace) come from the same numbers: the row stream
// of the product's width with the rows' statistics, then the check's state.
#pragma once

#include <cstdint>

#include "ffi/abft/row_check.h"
#include "ffi/common/plan_math.h"
#include "ffi/matmul/row_stream_plan.h"

namespace tsm2 {

// The row stream's instantiation for the check: the plain product's, but
// with two rows per warp and one vector per row and lane: four rows' (or two
// rows' of two vectors) sums, statistics and loads do not fit 128 registers
// (ptxas spilled them).
constexpr RowStreamShape RowCheckShapeFor(int itemsize, int64_t n) {
  RowStreamShape s = RowStreamShapeFor(itemsize, n);
  if (s.ok()) {
    s.rows = 2;
    s.vecs = 1;
  }
  return s;
}

inline RowStreamPlan PlanRowCheck(int itemsize, int64_t m, int64_t k, int64_t n, int sms,
                                  int smem_optin) {
  if (m < 1 || k < 1 || n < 1 || !RowCheckShapeFor(itemsize, n).ok()) return {};
  return PlanRowStream(RowCheckShapeFor(itemsize, n), itemsize, m, k, n, sms, smem_optin, -1,
                       /*stats=*/true);
}

// Where the state starts: after the row stream's sums and statistics.
inline int64_t RowCheckStateOffset(const RowStreamPlan& rp) {
  return CeilDiv(rp.workspace_bytes, 16) * 16;
}

// Whether the fused check takes A[m, k] @ B (n columns) of `itemsize` bytes
// on a GPU of `sms` SMs and `smem_optin` bytes of shared memory per block
// (n within the row stream's widths: 16 for f32, 8 otherwise), and the
// workspace it then needs.
inline bool RowCheckWorkspaceBytes(int itemsize, int64_t m, int64_t k, int64_t n, int sms,
                                   int smem_optin, int64_t* bytes) {
  const RowStreamPlan rp = PlanRowCheck(itemsize, m, k, n, sms, smem_optin);
  if (!rp.ok) return false;
  *bytes = RowCheckStateOffset(rp) + static_cast<int64_t>(sizeof(RowCheckState));
  return true;
}

}  // namespace tsm2

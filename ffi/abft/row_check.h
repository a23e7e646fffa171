// The fused ABFT check of a row-streamed product (tsm2_abft_rows), in plain
// C++ for the host and the device: what its model vector holds, where its
// state lives in the workspace, and each row's threshold.
//
// The product kernel (ffi/matmul/kernels/row_stream.cuh with kStats) reads
// each row of A once and returns, beside C's row, the row's checksum
// ch = A_i . (B 1) and three magnitudes: abs = sum_l |a_il| sum_j |b_lj|,
// abs_ch = sum_l |a_il| |sum_j b_lj| and sq = sum_l a_il^2 (sum_j b_lj^2 +
// (sum_j b_lj)^2). The check compares sum_j C_ij with ch. Their difference is
// the rounding of n + 1 dot products of k terms: each is modelled as in
// jax_tsm2/abft_model.py (Higham and Mary's independent roundings, variance
// proxy u^2 (k + 1) (T2 + C^2), plus a coherent drift that shrinks with
// cancellation), and the n + 1 errors of one row are added as if they were
// fully correlated (Cauchy-Schwarz: a factor sqrt(n + 1)), since one row has
// no random signs to average them. The worst case (Higham's gamma_k bound on
// the terms' 1-norm) caps it.
#pragma once

#include <cmath>
#include <cstdint>

#include "ffi/abft/checksum.h"

namespace tsm2 {

// Entries of the row check's model vector (f64), built per (dtype, k, n) by
// jax_tsm2/abft_model.py row_model_vector, which derives each one.
enum RowModel : int {
  kRowLambda = 0,       // the multiple of the deviation a clean residual stays below, times
                        // sqrt(n + 1)
  kRowVar = 1,          // u^2 (k + 1): variance proxy per unit of T2 + C^2
  kRowDrift = 2,        // (k + 2) / 4 u: coherent drift per unit of kappa (2 - kappa) |C|
  kRowSumRounding = 3,  // coefficient of abs + sum |C|: B's row sums and the check's own sums
  kRowFloor = 4,        // absolute floor: gradual underflow of every product and sum
  kRowCeiling = 5,      // coefficient of abs + abs_ch in the worst-case bound
  kRowInflate = 6,      // relative margin for the rounding of the magnitudes themselves
  kRowSqTiny = 7,       // sq below this may have underflowed: the 1-norms bound it instead
  kRowEntryFactor = 8,  // a recomputed entry is faulty when it moved by more than this
  kRowEntryFloor = 9,   //   times its terms' 1-norm, plus this
  kRowModelLen = 10,
};

// Rows a check repairs at most; past this many flagged rows the product is
// reported uncorrectable and C is left as computed.
constexpr int kRowCheckMaxRows = 32;

// The check's state, at the end of the workspace (8-byte aligned). The
// product kernel zeroes `flagged` and `repaired` before the check runs.
struct RowCheckState {
  int32_t flagged;                      // rows whose residual exceeded their threshold
  int32_t repaired;                     // repair blocks finished (the last assembles the verdict)
  int32_t rows[kRowCheckMaxRows];       // the first kRowCheckMaxRows flagged rows
  int32_t worst_col[kRowCheckMaxRows];  // per repaired row: the column that moved most
  int32_t faulty[kRowCheckMaxRows];     //   its entries that moved past the entry bound
  double moved[kRowCheckMaxRows];       //   old minus recomputed value at worst_col
};

// The threshold of one row (in C's units). NaN statistics fall through to the
// other bound (fmin); an infinite one checks finiteness only.
TSM2_HD double RowThreshold(const double* model, double abs, double abs_ch, double sq, double c_abs,
                            double c_sq, double ch) {
  const double mass = abs + abs_ch;
  // T2 <= (sum |t|)^2: the bound where the squares may have under- or overflowed.
  const double t2 = (sq >= model[kRowSqTiny] && sq < INFINITY) ? sq : mass * mass;
  // A clean row has sum |C| <= abs (up to rounding); the caps keep a large
  // fault, which raises sum |C|, from raising the drift quadratically.
  const double kappa = abs > 0.0 ? Fmin(c_abs / abs, 1.0) : 0.0;
  const double kappa_ch = abs_ch > 0.0 ? Fmin(Fabs(ch) / abs_ch, 1.0) : 0.0;
  const double var = model[kRowVar] * (t2 + c_sq + ch * ch);
  const double drift =
      model[kRowDrift] * (kappa * (2.0 - kappa) * c_abs + kappa_ch * (2.0 - kappa_ch) * Fabs(ch));
  const double common = model[kRowSumRounding] * (abs + c_abs) + model[kRowFloor];
  const double modelled = model[kRowLambda] * Sqrt(var) + drift + common;
  const double worst = model[kRowCeiling] * mass + common;
  return Fmin(modelled, worst) * (1.0 + model[kRowInflate]);
}

}  // namespace tsm2

// The fused ABFT check of a row-streamed product (tsm2_abft_rows), in plain
// C++ for the host and the device: what its model vector holds, where its
// state lives in the workspace, and each row's threshold.
//
// Column j of B and C weighs w_j, a power of two that brings the column's
// largest entry of B into [1/2, 1): columns of any scale then count alike in
// a row's sum, and the weighting is exact. The product kernel
// (ffi/matmul/kernels/row_stream.cuh with kStats) reads each row of A once
// and returns, beside C's row, the row's checksum ch = A_i . s with
// s = B w (in two parts: its rounding to the accumulator type plus the rest,
// so that s enters to about twice the accumulator's precision) and three
// magnitudes: abs = sum_l |a_il| sum_j |w_j b_lj|, abs_ch = sum_l |a_il| |s_l|
// and sq = sum_l a_il^2 (sum_j (w_j b_lj)^2 + s_l^2). The check compares
// sum_j w_j C_ij with ch. Their difference is the rounding of the n + 2 dot
// products of k terms: each is modelled as in jax_tsm2/abft_model.py (Higham
// and Mary's independent roundings, variance proxy u^2 (k + 1) (T2 + C^2),
// plus a coherent drift that shrinks with cancellation), and the errors of
// one row are added as if they were fully correlated (Cauchy-Schwarz: a
// factor sqrt(n + 2)), since one row has no random signs to average them.
// The worst case (Higham's gamma_k bound on the terms' 1-norm) caps it.
#pragma once

#include <cmath>
#include <cstdint>

#include "ffi/abft/checksum.h"

namespace tsm2 {

// Entries of the row check's model vector (f64), built per (dtype, k, n) by
// jax_tsm2/abft_model.py row_model_vector, which derives each one.
enum RowModel : int {
  kRowLambda = 0,       // the multiple of the deviation a clean residual stays below, times
                        // sqrt(n + 2)
  kRowVar = 1,          // u^2 (k + 1): variance proxy per unit of T2 + C^2
  kRowDrift = 2,        // (k + 2) / 4 u: coherent drift per unit of kappa (2 - kappa) |C|
  kRowSumRounding = 3,  // coefficient of abs + sum |C|: B's weighted row sums, the check's sums
  kRowFloor = 4,        // absolute floor per unit of weight: underflow of products and sums
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
  double ratio[kRowCheckMaxRows];       //   |moved| over that entry's bound (EntryMove)
};

// How far a recomputed entry had moved, in units of its worst-case bound (the
// verdict names the entry that moved most so); a NaN or infinite move is the
// largest.
TSM2_HD double EntryMove(double moved, double bound) {
  const double r = Fabs(moved) / bound;
  return r == r ? r : INFINITY;
}

// max(w, 1): an entry of weight w errs by underflow as much as its weight
// scales, and by an input flushed to zero (w |b| <= 1) at most as one of
// weight 1.
TSM2_HD double Fmax1(double w) { return w > 1.0 ? w : 1.0; }

// The threshold of one row (in the weighted units of its checksum). NaN
// statistics fall through to the other bound (fmin); an infinite one checks
// finiteness only. `weight_sum` = sum_j max(w_j, 1) + 2 scales the underflow
// floor, which is per entry, to those units (the checksum's two parts weigh
// 1: their terms are weighted already).
TSM2_HD double RowThreshold(const double* model, double abs, double abs_ch, double sq, double c_abs,
                            double c_sq, double ch, double weight_sum) {
  // A clean row has sum |C| <= abs and |ch| <= abs_ch up to rounding: capped at
  // twice those, a fault in C or in the checksum (even one that overflows them)
  // cannot raise the threshold past what the terms allow.
  c_abs = Fmin(c_abs, 2.0 * abs);
  c_sq = Fmin(c_sq, 4.0 * abs * abs);
  ch = Fmin(Fabs(ch), 2.0 * abs_ch);
  const double mass = abs + abs_ch;
  // T2 <= (sum |t|)^2: the bound where the squares may have under- or overflowed.
  const double t2 = (sq >= model[kRowSqTiny] && sq < INFINITY) ? sq : mass * mass;
  const double kappa = abs > 0.0 ? Fmin(c_abs / abs, 1.0) : 0.0;
  const double kappa_ch = abs_ch > 0.0 ? Fmin(Fabs(ch) / abs_ch, 1.0) : 0.0;
  const double var = model[kRowVar] * (t2 + c_sq + ch * ch);
  const double drift =
      model[kRowDrift] * (kappa * (2.0 - kappa) * c_abs + kappa_ch * (2.0 - kappa_ch) * Fabs(ch));
  const double common = model[kRowSumRounding] * (abs + c_abs) + model[kRowFloor] * weight_sum;
  const double modelled = model[kRowLambda] * Sqrt(var) + drift + common;
  const double worst = model[kRowCeiling] * mass + common;
  return Fmin(modelled, worst) * (1.0 + model[kRowInflate]);
}

}  // namespace tsm2

// The per-row distance check of the checked k-means step
// (tsm2_kmeans_step_checked): its threshold, in plain C++ so that the CUDA
// launcher and the CPU reference use one formula.
//
// Per row x (||x||^2 = xsq as the step computed it) against k real centroids
// c_j (||c_j||^2 = csq_j as computed, C = sum_j csq_j) and s = sum_j c_j:
//   S = sum_j dist_j,  dist_j = (xsq - 2 x.c_j) + csq_j  (before the clamp at 0)
//   R = (k xsq - 2 x.s) + C
// are equal in exact arithmetic for any values of xsq and csq_j, so the
// step's own rounding of ||x||^2 and ||c||^2 cancels. The rest is bounded by
// |S - R| <= tau B + eta with B = k xsq + C:
// - each dot x.c_j, and x.s, errs by at most e_dot (e_q) times
//   sum_e |x_e| |c_je| <= ||x|| ||c_j||, and sum_j ||x|| ||c_j|| <= B / 2
//   (2 ab <= a^2 + b^2), which costs 2 (e_dot + e_q) B / 2; s's own rounding
//   (k - 1 additions) adds gamma_k B;
// - forming each dist_j (two roundings), adding the k of them (any order,
//   gamma_{k-1}) and forming R (two roundings, C's k - 1 additions) add at
//   most (4 k + 8) u B, the absolute values of x.c_j bounded as above;
// - tau = 2 (e_dot + e_q + 4 k + 8) u: the factor 2 covers second-order
//   terms, the rounding of ||x||^2 inside B and of the comparison itself.
// e_dot and e_q are in units of u = 2^-24 (f32 accumulation) or 2^-53 (f64):
// gamma_L = L u / (1 - L u) for a dot whose every term passes through at most
// L roundings (the kernel's per-lane chain plus its reduction tree). eta
// covers underflow: each of the (2 d + 4 k + 8) k operations errs by less
// than the smallest normal number where it underflows.
//
// A single distance flipped by delta moves S by delta and nothing else, so
// it is detected when |delta| > tau B + eta. For a row at squared distance
// D from its nearest centroid, B is at most 2 k (||x|| + max ||c_j||)^2
// and tau is ~1e-4 in f32 (kmeans/docs: tau ~ 2e-5 .. 1e-4 for the kernels'
// chains); flipping a high bit of dist_j changes it by at least dist_j / 4.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>

namespace tsm2 {

// tau in units of u for dots with e_dot and e_q units of error and k centroids.
constexpr double KmeansRowTolUnits(double e_dot, double e_q, int64_t k) {
  return 2.0 * (e_dot + e_q + 4.0 * static_cast<double>(k) + 8.0);
}

// tau and eta for the accumulation type (acc_size 4: f32, 8: f64).
inline void KmeansRowTolerance(int acc_size, double e_dot, double e_q, int64_t d, int64_t k,
                               double* tau, double* eta) {
  const double u = acc_size == 8 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
  const double tiny = acc_size == 8 ? DBL_MIN : static_cast<double>(FLT_MIN);
  *tau = KmeansRowTolUnits(e_dot, e_q, k) * u;
  *eta = static_cast<double>(2 * d + 4 * k + 8) * static_cast<double>(k) * tiny;
}

// The injection operand of tsm2_kmeans_step_checked_inject: whether to flip,
// the row, the centroid and the bit.
struct KmeansInjection {
  int32_t active = 0, row = 0, centroid = 0, bit = 0;
};

}  // namespace tsm2

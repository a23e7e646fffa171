// The arithmetic the ABFT checksum passes share, on the host (the CPU
// reference targets) and on the device (the CUDA kernels) alike, so that both
// compute the same checksums and the same thresholds: the weights of each
// row, the extended sums, the guarded norms, the half-ulp of a narrow output
// and the detection threshold of a column (jax_tsm2/abft.py derives it; the
// model vector carries its constants).
//
// Weights. Row i of an m-row matrix weighs s * e_i and s * e_i * (i + 1) / m,
// with s = ChecksumScale(m) and e_i = RowSign(i) in {-1, +1} from a fixed hash
// of i. The random signs make a column's checksum residual a random-sign sum
// of its entries' rounding errors, whatever those errors are: correlated
// errors (repeated rows, a rounding bias shared by a whole column) then add up
// like independent ones, in root-sum-square, instead of coherently.
//
// Extended sums. The signed checksums of f64 data are double-double sums
// (their rounding must stay well below the product's own); those of f32,
// bf16 and f16 data are plain f64 sums. The products in a double-double sum
// go through RoundedProduct, never a bare `w * x`: a compiler that contracts
// the product into the following addition (nvcc does by default) would break
// the error-free transformation.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define TSM2_HD __host__ __device__ __forceinline__
#else
#define TSM2_HD inline
#endif

namespace tsm2 {

// Rows of tsm2_abft_encode's `stats` result, one column per column of C: the
// reference checksums (high and low parts, summing to the extended value),
// then the scales of the threshold, all multiplied by s.
enum AbftStat : int {
  kStatRef1 = 0,  // sum_i s e_i (AB)_ij: (s e^T A) B
  kStatRef2 = 1,  // the same with the ramp weights
  kStatRef1Lo = 2,
  kStatRef2Lo = 3,
  kStatAbs = 4,    // s sum_i sum_l |a_il| |b_lj|: the terms' 1-norm (worst case)
  kStatNorm = 5,   // s (sum_i sum_l (a_il b_lj)^2)^(1/2): the terms' 2-norm
  kStatFlush = 6,  // s times the mass of terms an input flushed to zero can lose
  kStatRows = 7,
};

// Entries of the model vector jax_tsm2/abft.py builds per (dtype, precision,
// m, k); see _model there for each one's derivation.
enum AbftModel : int {
  kModelLambda = 0,    // the multiple of the modelled deviation a clean residual stays below
  kModelTermsSq = 1,   // squared coefficient of the terms' 2-norm
  kModelCSq = 2,       // squared coefficient of C's column 2-norm
  kModelDrift = 3,     // coherent accumulation drift (times kappa (2 - kappa), kappa = Ac / Abs)
  kModelCPerN2 = 4,    // bound of C's column 2-norm per unit of the pass's norm row
  kModelOutput = 5,    // 1 where the norm row is the output's half-ulps (bf16, f16)
  kModelFloor = 6,     // absolute floor: underflow of products, outputs and the sums
  kModelFlush = 7,     // coefficient of the flush row
  kModelRounding = 8,  // coefficient of (Ac + Abs): the checksums' own rounding
  kModelCeiling = 9,   // coefficient of Abs in the worst-case bound
  kModelInflate = 10,  // relative margin for the rounding of the stored values
  kModelScale = 11,    // s = ChecksumScale(m)
  kModelLen = 12,
};

// Rows of the C pass (before its epilogue turns them into residuals and a
// threshold): the two signed checksums, s sum |c_ij| and the norm row.
enum AbftCRow : int { kCRow1 = 0, kCRow2 = 1, kCRowAbs = 2, kCRowNorm = 3 };

// murmur3's 32-bit finalizer of i (xor a constant): every bit of i moves
// every bit of the hash. jax_tsm2/abft.py computes the same in uint32.
TSM2_HD uint32_t RowHash(uint32_t i) {
  uint32_t h = i ^ 0x9e3779b9u;
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}

TSM2_HD double RowSign(int64_t i) { return (RowHash(static_cast<uint32_t>(i)) & 1u) ? -1.0 : 1.0; }

// 2^-(ceil(log2 m) + 1) (jax_tsm2.abft.checksum_scale): no weighted sum of m
// finite entries exceeds half the largest one. (Host code: the launchers pass
// it to the kernels.)
inline double ChecksumScale(int64_t m) {
  int bits = 0;
  for (uint64_t v = m > 1 ? static_cast<uint64_t>(m - 1) : 0; v != 0; v >>= 1) ++bits;
  return std::ldexp(1.0, -(bits + 1));
}

// The two weights of row i of m: s e_i and s e_i (i + 1) / m, with s =
// ChecksumScale(m) and inv_m = 1.0 / m (a product, not a division per row:
// the ramp stays strictly increasing and within a rounding of (i + 1) / m).
TSM2_HD void RowWeights(int64_t i, double inv_m, double s, double* w1, double* w2) {
  *w1 = s * RowSign(i);
  *w2 = *w1 * (static_cast<double>(i + 1) * inv_m);
}

// fma, sqrt, fmin and fabs, the device's own intrinsics in device code.
TSM2_HD double Fma(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
  return __fma_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
TSM2_HD double Sqrt(double x) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(x);
#else
  return std::sqrt(x);
#endif
}
TSM2_HD double Fmin(double a, double b) {
#if defined(__CUDA_ARCH__)
  return ::fmin(a, b);
#else
  return std::fmin(a, b);
#endif
}
TSM2_HD double Fabs(double x) {
#if defined(__CUDA_ARCH__)
  return ::fabs(x);
#else
  return std::fabs(x);
#endif
}

TSM2_HD double RoundedProduct(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return std::fma(a, b, -0.0);  // a call: no compiler contracts it with a later sum
#endif
}

// Knuth's TwoSum: s + e == a + b exactly (barring overflow).
TSM2_HD void TwoSum(double a, double b, double* s, double* e) {
  *s = a + b;
  const double bb = *s - a;
  *e = (a - (*s - bb)) + (b - bb);
}

// A sum of weighted terms in f64 (kDouble = false: plain fma) or in
// double-double (true): hi + lo is the value.
template <bool kDouble>
struct ExtSum {
  double hi = 0.0, lo = 0.0;
  TSM2_HD void Add(double w, double x) {
    if constexpr (kDouble) {
      const double p = RoundedProduct(w, x);
      const double pe = Fma(w, x, -p);
      double s, e;
      TwoSum(hi, p, &s, &e);
      hi = s;
      lo += e + pe;
    } else {
      hi = Fma(w, x, hi);
    }
  }
  // Adds (w_hi + w_lo) * x: a weight that is itself an extended sum.
  TSM2_HD void AddExt(double w_hi, double w_lo, double x) {
    Add(w_hi, x);
    if constexpr (kDouble) lo = Fma(w_lo, x, lo);
  }
  TSM2_HD void Merge(const ExtSum& o) {
    if constexpr (kDouble) {
      double s, e;
      TwoSum(hi, o.hi, &s, &e);
      hi = s;
      lo += e + o.lo;
    } else {
      hi += o.hi;
    }
  }
  // hi absorbs lo (|lo| <= ulp(hi) / 2 after this).
  TSM2_HD void Normalize() {
    if constexpr (kDouble) {
      const double s = hi + lo;
      lo = lo - (s - hi);
      hi = s;
    }
  }
};

// The 2-norm from a sum of squares `sq` when the sum is trustworthy, else its
// upper bound `abs1` (a 1-norm of the same terms): squares below ~2^-958
// may have underflowed (each lost square is below 2^-1022, so past 2^-958
// they cannot matter), and an infinite sum overflowed.
TSM2_HD double GuardedNorm(double sq, double abs1) {
  return (sq >= 0x1p-958 && sq < INFINITY) ? Sqrt(sq) : abs1;
}

// Half the spacing of the floating-point numbers at |x| in a format with p
// bits of precision and smallest normal exponent emin (bf16: 8, -126; f16:
// 11, -14): the most rounding to that format can have moved x. (Host code;
// the kernels take the exponent from the bits, with the same result.)
inline double HalfUlp(double x, int p, int emin) {
  const double ax = std::fabs(x);
  if (!(ax > 0.0) || !(ax < INFINITY)) return 0.0;
  int e = 0;
  (void)std::frexp(ax, &e);  // ax = f 2^e, f in [0.5, 1): floor(log2 ax) = e - 1
  const int ex = e - 1 > emin ? e - 1 : emin;
  return std::ldexp(1.0, ex - p);
}

// The threshold of one column in the checksums' scaled units (divide by s for
// C's): the modelled bound, capped by the worst case. `model` is the model
// vector (any float type); abs1 the terms' 1-norm (kStatAbs), norm their
// 2-norm (kStatNorm), flush the flush row, c_abs = s sum |c_ij|, n2 the C
// pass's norm row. NaN statistics fall through to the other bound (fmin); a
// threshold that is infinite checks finiteness only.
template <typename M>
TSM2_HD double ColumnThreshold(const M* model, double abs1, double norm, double flush, double c_abs,
                               double n2) {
  const double nc = static_cast<double>(model[kModelCPerN2]) * n2;
  // A clean column has c_abs <= abs1 (up to rounding); the cap keeps a large fault, which
  // raises c_abs, from raising the drift term quadratically.
  const double kappa = abs1 > 0.0 ? Fmin(c_abs / abs1, 1.0) : 0.0;
  // A repeated term's sharp drift without cancellation, back to twice it as kappa -> 0.
  const double drift = static_cast<double>(model[kModelDrift]) * kappa * (2.0 - kappa);
  const double var = static_cast<double>(model[kModelTermsSq]) * norm * norm +
                     (static_cast<double>(model[kModelCSq]) + drift * drift) * nc * nc +
                     static_cast<double>(model[kModelOutput]) * n2 * n2;
  const double common = static_cast<double>(model[kModelFloor]) +
                        static_cast<double>(model[kModelFlush]) * flush +
                        static_cast<double>(model[kModelRounding]) * (c_abs + abs1);
  const double modelled = static_cast<double>(model[kModelLambda]) * Sqrt(var) + common;
  const double worst = static_cast<double>(model[kModelCeiling]) * abs1 + common;
  return Fmin(modelled, worst) * (1.0 + static_cast<double>(model[kModelInflate]));
}

}  // namespace tsm2

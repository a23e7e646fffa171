// Device side of the per-row distance check (ffi/kmeans/row_check.h): the
// checked steps compute, per row, S = sum of its real distances before the
// clamp, and R = (k ||x||^2 - 2 x.s) + sum_j ||c_j||^2 from the extra dot
// with the checksum centroid s = sum_j c_j, and count rows where they differ
// by more than the threshold. CHECK (a template argument of the step
// kernels): 0 the plain step, 1 checked, 2 checked with one distance flipped
// before the check and the argmin (fault injection; never in production).
#pragma once

#include <cstdint>

#include "ffi/kmeans/row_check.h"

namespace tsm2 {

// What a checked step's threads need besides KmeansArgs.
struct KmeansCheckArgs {
  int32_t* faults = nullptr;                // [] rows that failed (zeroed by the launcher)
  float* margin = nullptr;                  // [] worst |S - R| / threshold (zeroed too)
  const KmeansInjection* inject = nullptr;  // CHECK == 2 only
  double tau = 0, eta = 0;                  // row_check.h
};

template <typename Acc>
__device__ __forceinline__ Acc KmeansDist(Acc xsq, Acc dot, Acc csq) {
  return (xsq - 2 * dot) + csq;
}

// Bit `bit` of v flipped (the injected fault).
__device__ __forceinline__ float KmeansFlipBit(float v, int bit) {
  return __int_as_float(__float_as_int(v) ^ static_cast<int>(1u << (bit & 31)));
}
__device__ __forceinline__ double KmeansFlipBit(double v, int bit) {
  return __longlong_as_double(__double_as_longlong(v) ^ static_cast<long long>(1ull << (bit & 63)));
}

// The row's check: S (its distances' sum), xsq, q = x.s, csq_tot = sum_j
// ||c_j||^2. Rows or centroids that are not finite have no bound (T or R is
// not finite) and pass; a non-finite S against a finite R fails.
template <typename Acc>
__device__ __forceinline__ void KmeansRowCheck(Acc S, Acc xsq, Acc q, Acc csq_tot, int k,
                                               const KmeansCheckArgs& ck, int& faults,
                                               float& margin) {
  const Acc kf = static_cast<Acc>(k);
  const Acc R = fma(kf, xsq, Acc(-2) * q) + csq_tot;
  const Acc T = fma(static_cast<Acc>(ck.tau), fma(kf, xsq, csq_tot), static_cast<Acc>(ck.eta));
  if (!isfinite(T) || !isfinite(R)) return;
  const Acc err = fabs(S - R);
  if (!(err <= T)) ++faults;
  // The worst err / T so far, dividing only for a row that beats it (a few
  // times per thread): a division per row took IEEE division's slow path for
  // 86% of the rows (Nsight Compute, 1e6 x 256, k = 16) and cost more than
  // the check's dot. NaN (a failed row) compares false and leaves it.
  if (err > static_cast<Acc>(margin) * T) margin = static_cast<float>(err / T);
}

// The block's counts into the step's outputs: one atomic per warp. Integer
// adds and a max of non-negative floats as integers do not depend on the
// order, so the results are deterministic.
__device__ __forceinline__ void KmeansRowCheckFlush(const KmeansCheckArgs& ck, int faults,
                                                    float margin) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    faults += __shfl_xor_sync(0xffffffffu, faults, off);
    margin = fmaxf(margin, __shfl_xor_sync(0xffffffffu, margin, off));
  }
  if (threadIdx.x % 32 == 0) {
    if (faults != 0) atomicAdd(ck.faults, faults);
    if (margin > 0) atomicMax(reinterpret_cast<int*>(ck.margin), __float_as_int(margin));
  }
}

}  // namespace tsm2

// Small device helpers shared by the kernels: accumulator types, 16-byte
// vector unpacking, output conversion and cp.async wrappers. CUDA only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

namespace tsm2 {

// f64 accumulates in f64; f32, bf16 and f16 accumulate in f32 (never TF32).
template <typename T>
struct AccTypeOf {
  using type = float;
};
template <>
struct AccTypeOf<double> {
  using type = double;
};
template <typename T>
using AccType = typename AccTypeOf<T>::type;

// The zero a sum starts from, as jnp's products give it: a contraction of
// length 1 is a single product and keeps its sign (XLA computes it as a
// multiply; -0.0 is the identity of IEEE addition), while longer sums start
// from +0.0 as XLA's GEMMs and reductions do, so that a zero sum is +0 even
// where every term is -0. Tensor-core MMAs give +0 there as well, which is
// why plans keep k = 1 on the CUDA cores. Fills a scalar or a (nested)
// array of accumulators; k is the whole contraction, not a split's share.
template <typename A>
__device__ __forceinline__ void InitSums(A& x, int64_t k) {
  x = A(k == 1 ? -0.0 : 0.0);
}
template <typename A, size_t N>
__device__ __forceinline__ void InitSums(A (&x)[N], int64_t k) {
#pragma unroll
  for (size_t i = 0; i < N; ++i) InitSums(x[i], k);
}

// Elements of T in one 16-byte access.
template <typename T>
inline constexpr int kVec = 16 / static_cast<int>(sizeof(T));

__device__ __forceinline__ float ToAcc(float x) { return x; }
__device__ __forceinline__ double ToAcc(double x) { return x; }
__device__ __forceinline__ float ToAcc(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float ToAcc(__half x) { return __half2float(x); }

__device__ __forceinline__ void FromAcc(float x, float* out) { *out = x; }
__device__ __forceinline__ void FromAcc(double x, double* out) { *out = x; }
__device__ __forceinline__ void FromAcc(float x, __nv_bfloat16* out) {
  *out = __float2bfloat16_rn(x);
}
__device__ __forceinline__ void FromAcc(float x, __half* out) { *out = __float2half_rn(x); }

// The ABFT kernels accumulate in f32 or f64 whatever T is: widen T to Acc,
// and round an Acc back to T once (f64 straight to bf16/f16, not through f32).
template <typename Acc, typename T>
__device__ __forceinline__ Acc Widen(T x) {
  return static_cast<Acc>(ToAcc(x));
}
__device__ __forceinline__ void FromAcc(double x, float* out) { *out = static_cast<float>(x); }
__device__ __forceinline__ void FromAcc(float x, double* out) { *out = x; }
__device__ __forceinline__ void FromAcc(double x, __nv_bfloat16* out) {
  *out = __double2bfloat16(x);
}
__device__ __forceinline__ void FromAcc(double x, __half* out) { *out = __double2half(x); }

// Splits a 16-byte vector of T into accumulator values. `raw` is taken by
// value so that a caller's `*reinterpret_cast<const uint4*>(p)` is one 16-byte
// load: through a reference, nvcc folded the memcpy below into sixteen byte
// loads from shared memory (and three PRMTs per 4-byte value) in every tile
// kernel reading rows of whole vectors.
template <typename T>
__device__ __forceinline__ void Unpack(const uint4 raw, AccType<T> (&out)[kVec<T>]) {
  T v[kVec<T>];
  memcpy(v, &raw, sizeof raw);
#pragma unroll
  for (int i = 0; i < kVec<T>; ++i) out[i] = ToAcc(v[i]);
}

// Loads N consecutive accumulator values from shared memory, 16 bytes at a
// time when the row allows it.
template <int N, typename Acc>
__device__ __forceinline__ void LoadSmemRow(const Acc* p, Acc (&out)[N]) {
  constexpr int kW = 16 / static_cast<int>(sizeof(Acc));
  if constexpr (N % kW == 0) {
#pragma unroll
    for (int j = 0; j < N; j += kW) {
      uint4 raw = *reinterpret_cast<const uint4*>(p + j);
      memcpy(&out[j], &raw, 16);
    }
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) out[j] = p[j];
  }
}

// Writes NT consecutive outputs with 16-byte stores; false (nothing written)
// when NT values of U are not whole 16-byte vectors or dst is misaligned.
template <typename U, int NT, typename Acc>
__device__ __forceinline__ bool StoreRowVec(U* dst, const Acc (&v)[NT]) {
  constexpr int kW = 16 / static_cast<int>(sizeof(U));
  if constexpr (NT % kW != 0) {
    return false;
  } else {
    if (reinterpret_cast<uintptr_t>(dst) % 16 != 0) return false;
#pragma unroll
    for (int j = 0; j < NT; j += kW) {
      U packed[kW];
#pragma unroll
      for (int e = 0; e < kW; ++e) FromAcc(v[j + e], &packed[e]);
      uint4 raw;
      memcpy(&raw, packed, 16);
      *reinterpret_cast<uint4*>(dst + j) = raw;
    }
    return true;
  }
}

// Streaming 16-byte load that does not allocate in L1 (each row is read once).
__device__ __forceinline__ uint4 LoadStream16(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Asynchronous 16-byte global -> shared copy (sm_80+). With valid == false
// the destination is zero-filled and nothing is read.
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem),
               "r"(src_bytes)
               : "memory");
}
// The same with the first `src_bytes` (0 to 16) of the 16 read, the rest of
// the destination zero-filled: a vector that runs past the end of an array.
__device__ __forceinline__ void CpAsync16Head(void* smem, const void* gmem, int src_bytes) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem),
               "r"(src_bytes)
               : "memory");
}
// The same for 8 bytes (through L1: .cg takes only 16-byte copies).
__device__ __forceinline__ void CpAsync8(void* smem, const void* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? 8 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(gmem),
               "r"(src_bytes)
               : "memory");
}
// The same for 4 bytes.
__device__ __forceinline__ void CpAsync4(void* smem, const void* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(gmem),
               "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// The most groups CpAsyncWaitAtMost leaves in flight.
constexpr int kCpAsyncMaxPending = 6;

// cp.async.wait_group for a ring whose depth is a run-time value: at most
// `pending` groups may still be in flight (past kCpAsyncMaxPending, that many:
// waiting for more than asked is always safe).
__device__ __forceinline__ void CpAsyncWaitAtMost(int pending) {
  switch (pending) {
    case 0:
      CpAsyncWait<0>();
      break;
    case 1:
      CpAsyncWait<1>();
      break;
    case 2:
      CpAsyncWait<2>();
      break;
    case 3:
      CpAsyncWait<3>();
      break;
    case 4:
      CpAsyncWait<4>();
      break;
    case 5:
      CpAsyncWait<5>();
      break;
    default:
      CpAsyncWait<kCpAsyncMaxPending>();
      break;
  }
}

}  // namespace tsm2

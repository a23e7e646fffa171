// Thin wrappers over sm_90a's warpgroup MMAs (wgmma): the shared-memory
// descriptor of a tile of 128-byte rows in the 128-byte swizzle (what a
// tensor-map box with CU_TENSOR_MAP_SWIZZLE_128B lays down); m64n128
// products of two such tiles with f32 accumulators for the k-means
// assignment (kmeans_assign_wgmma.cuh): TF32 for f32 data (the tensor cores
// read the f32 bits as TF32: the low 13 mantissa bits are ignored), exact
// bf16 and f16; and TF32 products with A's fragment in registers for
// TSM2R's f32 tile (tsm2_mma_tma.cuh), which splits A in registers first.
// Only compiled where __CUDA_ARCH_FEAT_SM90_ALL is defined (sm_90a).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace tsm2 {

// The descriptor of a K-major operand tile at shared address `addr` (1024-byte
// aligned at the tile, plus the k offset inside a row): rows of 128 bytes,
// eight-row swizzle atoms 1,024 bytes apart (the stride byte offset); the
// leading byte offset is unused in this layout. Moving along k inside the
// 128-byte row is adding its byte offset to the start address, as the
// hardware applies the swizzle to the address it forms.
__device__ __forceinline__ uint64_t WgmmaDescSw128(uint32_t addr) {
  uint64_t desc = (addr & 0x3FFFFu) >> 4;
  desc |= uint64_t{1} << 16;          // leading byte offset (unused), 16 bytes
  desc |= uint64_t{1024 >> 4} << 32;  // stride byte offset: 8 rows x 128 bytes
  desc |= uint64_t{1} << 62;          // 128-byte swizzle
  return desc;
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TSM2_WG_ASM(...) asm volatile(__VA_ARGS__)
#else
#define TSM2_WG_ASM(...) __trap()
#endif

__device__ __forceinline__ void WgmmaFence() {
  TSM2_WG_ASM("wgmma.fence.sync.aligned;\n" :: : "memory");
}
__device__ __forceinline__ void WgmmaCommit() {
  TSM2_WG_ASM("wgmma.commit_group.sync.aligned;\n" :: : "memory");
}
template <int N>
__device__ __forceinline__ void WgmmaWait() {
  TSM2_WG_ASM("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Keeps the compiler from moving reads or writes of the accumulators across
// the asynchronous MMAs (they are registers the wgmma writes behind its back).
__device__ __forceinline__ void WgmmaFenceOperands(float (&d)[64]) {
#pragma unroll
  for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

#define TSM2_WG_OUT8(i)                                                                       \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])
#define TSM2_WG_OUT64                                                                     \
  TSM2_WG_OUT8(0), TSM2_WG_OUT8(8), TSM2_WG_OUT8(16), TSM2_WG_OUT8(24), TSM2_WG_OUT8(32), \
      TSM2_WG_OUT8(40), TSM2_WG_OUT8(48), TSM2_WG_OUT8(56)
#define TSM2_WG_REGS64                                                                          \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "  \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "  \
  "%56, %57, %58, %59, %60, %61, %62, %63}"

// d (+)= A[64 x K] * B[128 x K]^T, one k-step (8 elements of f32, 16 of
// bf16/f16: 32 bytes of every row), both operands K-major in shared memory;
// `accumulate` false overwrites d. Accumulator i of lane (g = lane / 4,
// t = lane % 4) of warp w of the warpgroup: row 16 w + g + 8 ((i / 2) % 2),
// column 8 (i / 4) + 2 t + i % 2.
template <typename T>
__device__ __forceinline__ void WgmmaM64N128(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                             bool accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const uint32_t acc = accumulate ? 1u : 0u;
  if constexpr (std::is_same_v<T, float>) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 " TSM2_WG_REGS64
        ", %64, %65, p, 1, 1;\n}\n"
        : TSM2_WG_OUT64
        : "l"(desc_a), "l"(desc_b), "r"(acc));
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " TSM2_WG_REGS64
        ", %64, %65, p, 1, 1, 0, 0;\n}\n"
        : TSM2_WG_OUT64
        : "l"(desc_a), "l"(desc_b), "r"(acc));
  } else {
    static_assert(std::is_same_v<T, __half>, "f32 (TF32), bf16 or f16");
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " TSM2_WG_REGS64
        ", %64, %65, p, 1, 1, 0, 0;\n}\n"
        : TSM2_WG_OUT64
        : "l"(desc_a), "l"(desc_b), "r"(acc));
  }
#else
  __trap();  // sm_90a only: the launcher picks the kernels that use it on such builds
#endif
}

// Keeps the compiler from moving reads or writes of sums kept as 8-column
// tiles (d[j][0..3], the mma.sync C layout) across the asynchronous MMAs.
template <int kN8>
__device__ __forceinline__ void WgmmaFenceTiles(float (&d)[kN8][4]) {
#pragma unroll
  for (int j = 0; j < kN8; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[j][e])::"memory");
  }
}

#define TSM2_RS_D(j) \
  "+f"(d[J0 + (j)][0]), "+f"(d[J0 + (j)][1]), "+f"(d[J0 + (j)][2]), "+f"(d[J0 + (j)][3])
#define TSM2_RS_IN "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(acc)

// d[J0 .. J0 + N / 8) (+)= A[64 x 8] * B[N x 8]^T: one TF32 k-step of the
// warpgroup's 64 rows against N columns, A's fragment in registers (each
// warp's 16 rows in the m16n8k8 layout: a[0..3] at (g, t), (g + 8, t),
// (g, t + 4), (g + 8, t + 4)), B K-major in shared memory. The sums keep
// the mma.sync C layout as 8-column tiles: d[j][e] of lane (g, t) is row
// g + 8 (e / 2) of the warp's 16, column 8 j + 2 t + e % 2, which is
// accumulator 4 j + e of the m64nN instruction. `accumulate` false
// overwrites them. N: 8, 16, 32 or 64.
template <int N, int J0, int kN8>
__device__ __forceinline__ void WgmmaTf32RegA(float (&d)[kN8][4], const uint32_t (&a)[4],
                                              uint64_t desc_b, bool accumulate) {
  static_assert(J0 + N / 8 <= kN8, "the instruction's columns are within the sums");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const uint32_t acc = accumulate ? 1u : 0u;
  if constexpr (N == 8) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, %8, p, 1, 1;\n}\n"
        : TSM2_RS_D(0)
        : TSM2_RS_IN);
  } else if constexpr (N == 16) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k8.f32.tf32.tf32 {%0, %1, %2, %3, %4, %5, %6, %7}, "
        "{%8, %9, %10, %11}, %12, p, 1, 1;\n}\n"
        : TSM2_RS_D(0), TSM2_RS_D(1)
        : TSM2_RS_IN);
  } else if constexpr (N == 32) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 {%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1;\n}\n"
        : TSM2_RS_D(0), TSM2_RS_D(1), TSM2_RS_D(2), TSM2_RS_D(3)
        : TSM2_RS_IN);
  } else {
    static_assert(N == 64, "8, 16, 32 or 64 columns");
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 {%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, "
        "%25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
        : TSM2_RS_D(0), TSM2_RS_D(1), TSM2_RS_D(2), TSM2_RS_D(3), TSM2_RS_D(4), TSM2_RS_D(5),
          TSM2_RS_D(6), TSM2_RS_D(7)
        : TSM2_RS_IN);
  }
#else
  __trap();  // sm_90a only
#endif
}

#undef TSM2_RS_D
#undef TSM2_RS_IN

// All kN8 8-column tiles of d against B's rows from `desc_b` on, as few
// instructions as the widths allow (64, 32, 16, then 8 columns); the rows
// of B's K-major tile are 128 bytes, eight of them a 1,024-byte swizzle atom.
template <int kN8, int J0 = 0>
__device__ __forceinline__ void WgmmaTf32RegARow(float (&d)[kN8][4], const uint32_t (&a)[4],
                                                 uint64_t desc_b, bool accumulate) {
  constexpr int kLeft = kN8 - J0;
  if constexpr (kLeft > 0) {
    constexpr int kW = kLeft >= 8 ? 8 : kLeft >= 4 ? 4 : kLeft >= 2 ? 2 : 1;
    WgmmaTf32RegA<8 * kW, J0>(d, a, desc_b, accumulate);
    // The descriptor's start address is in 16-byte units: 8 rows x 128 bytes each.
    WgmmaTf32RegARow<kN8, J0 + kW>(d, a, desc_b + kW * (1024 >> 4), accumulate);
  }
}

#undef TSM2_WG_ASM
#undef TSM2_WG_OUT8
#undef TSM2_WG_OUT64
#undef TSM2_WG_REGS64

}  // namespace tsm2

// Thin wrappers over the sm_90 PTX that lets the blocks of a thread-block
// cluster hand data to each other without a cluster-wide barrier: mbarriers
// (local waits, local and remote arrivals, expected transaction bytes),
// asynchronous stores into another block's shared memory that complete on
// that block's mbarrier (st.async), and bulk copies from global memory that
// complete on this block's (plain, or tensor-map boxes). Addresses are
// 32-bit shared-window addresses (SmemAddr for this block, MapRank for the
// same offset in another block of the cluster).
// Used by the wide k-means step (kmeans_wide.cuh) and TSM2S by tensor-map
// copies (small_left_tma.cuh). CUDA only.
#pragma once

#include <cstdint>

namespace tsm2 {

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// The address of the same shared-memory location in cluster block `rank`.
__device__ __forceinline__ uint32_t MapRank(uint32_t addr, int rank) {
  uint32_t out;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(out) : "r"(addr), "r"(rank));
  return out;
}

__device__ __forceinline__ void MbarInit(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes the initialisations visible to the cluster (before its barrier).
__device__ __forceinline__ void MbarInitFence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

__device__ __forceinline__ void MbarArrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// An arrival on another block's mbarrier (bar from MapRank), ordered after
// this thread's earlier accesses to its own block's shared memory: what a
// consumer tells a remote producer that may now overwrite them. CTA scope, as
// CUTLASS's cluster barriers: the cluster-scope forms of this release and of
// MbarWait's acquire together cost the wide k-means step's control warps
// ~1,000 cycles a tile.
__device__ __forceinline__ void MbarArriveRemote(uint32_t bar) {
  asm volatile("mbarrier.arrive.release.cta.shared::cluster.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// An arrival that also expects `bytes` of asynchronous stores this phase.
__device__ __forceinline__ void MbarArriveExpectTx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
// Spins until the phase with this parity completes. CTA-scope acquire: the
// bytes that asynchronous stores and bulk copies completed on the mbarrier
// are visible to the threads that see the phase complete (as for TMA
// multicast), and a cluster-scope acquire invalidates L1 on every wait.
__device__ __forceinline__ void MbarWait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// One try of MbarWait: whether the phase with this parity has completed.
__device__ __forceinline__ bool MbarTryWait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}

// MbarWait for a thread that is ahead and may wait long: it sleeps between
// tries instead of taking issue slots from its sub-partition's other warps.
__device__ __forceinline__ void MbarWaitBackoff(uint32_t bar, uint32_t parity) {
  while (!MbarTryWait(bar, parity)) __nanosleep(256);
}

// 16 bytes into another block's shared memory (dst from MapRank), completing
// 16 transaction bytes on that block's mbarrier `bar` (also from MapRank).
__device__ __forceinline__ void StAsync16(uint32_t dst, uint4 v, uint32_t bar) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, "
      "[%5];\n" ::"r"(dst),
      "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void StAsync16(uint32_t dst, float4 v, uint32_t bar) {
  StAsync16(dst,
            make_uint4(__float_as_uint(v.x), __float_as_uint(v.y), __float_as_uint(v.z),
                       __float_as_uint(v.w)),
            bar);
}
// 8 bytes, as StAsync16.
__device__ __forceinline__ void StAsync8(uint32_t dst, float2 v, uint32_t bar) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];\n" ::"r"(
          dst),
      "f"(v.x), "f"(v.y), "r"(bar)
      : "memory");
}

// `bytes` (a multiple of 16) from global memory into this block's shared
// memory by the bulk-copy engine, completing that many transaction bytes on
// this block's mbarrier `bar`; both addresses 16-byte aligned.
__device__ __forceinline__ void BulkCopyToShared(uint32_t dst, const void* src, uint32_t bytes,
                                                 uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}
// A 2-D tensor-map box at (c0, c1) (innermost coordinate first) into shared
// memory at dst, completing its bytes on `bar`. `map` is a kernel parameter
// (__grid_constant__) or lives in global memory.
__device__ __forceinline__ void TmaLoad2d(uint32_t dst, const void* map, int c0, int c1,
                                          uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, "
      "{%2, %3}], [%4];\n" ::"r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}
// A 3-D tensor-map box at (c0, c1, c2), innermost first, as TmaLoad2d, with
// an L2 cache policy (L2EvictFirst).
__device__ __forceinline__ void TmaLoad3d(uint32_t dst, const void* map, int c0, int c1, int c2,
                                          uint32_t bar, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3, %4}], [%5], %6;\n" ::"r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(bar), "l"(policy)
      : "memory");
}
// A policy that marks the lines a copy brings into L2 first to go: for data
// read once, so that it does not push out what is read again.
__device__ __forceinline__ uint64_t L2EvictFirst() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
// Orders this thread's earlier generic-proxy shared-memory writes before
// later bulk copies (async proxy) into the same bytes.
__device__ __forceinline__ void FenceProxyAsyncShared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Fetches a __grid_constant__ tensor map's descriptor ahead of its first copy.
__device__ __forceinline__ void PrefetchTensorMap(const void* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

}  // namespace tsm2

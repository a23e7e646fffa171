// Plans and launches TSM2L on tensor cores (kernels/tsm2l_mma.cuh): the ring
// depth per warp from the device's bytes in flight per SM (tiles.h
// ChooseStages, as for the other streaming tiles), a persistent grid of as
// many blocks as fit.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "ffi/common/plan_math.h"
#include "ffi/common/status.h"
#include "ffi/matmul/kernels/tsm2l_mma.cuh"
#include "ffi/matmul/launch_tiles.cuh"
#include "ffi/matmul/launcher.h"
#include "ffi/matmul/tiles.h"

namespace tsm2 {

template <typename T, int KP, int N8>
struct LMmaVariant {
  using Cfg = LMmaConfig<T, KP, N8>;
  static const void* Kernel() { return reinterpret_cast<const void*>(&Tsm2LMmaKernel<T, KP, N8>); }

  // Conditions on the buffers beyond UsesLMma's shape test: A and C
  // contiguous over the batch with B shared, A and C 16-byte aligned (XLA's
  // buffers always are).
  static bool Takes(const DeviceMatmul& p) {
    const bool batch_ok = p.batch == 1 || (p.b_batch_stride == 0 && p.a_batch_stride == p.m * p.k);
    return batch_ok && LMmaKPad(p.k, sizeof(T)) == KP && p.n <= 8 * N8 &&
           reinterpret_cast<uintptr_t>(p.a) % 16 == 0 && reinterpret_cast<uintptr_t>(p.c) % 16 == 0;
  }

  static LMmaArgs Args(const DeviceMatmul& p, int stages) {
    LMmaArgs a{};
    a.a = p.a;
    a.b = p.b;
    a.c = p.c;
    a.rows = p.batch * p.m;
    a.k = p.k;
    a.n = p.n;
    a.tiles = CeilDiv(a.rows, int64_t{16});
    a.stages = stages;
    a.b_trans = p.layout == Layout::kNT;
    // A lane's adjacent outputs: two for f32 and f64, four for 2-byte types.
    constexpr int kOut = Cfg::kHalf ? 4 : 2;
    a.c_vec = p.n % kOut == 0 && reinterpret_cast<uintptr_t>(p.c) % (kOut * sizeof(T)) == 0;
    return a;
  }

  static Status Plan(const DeviceMatmul& p, MatmulPlan* plan) {
    if (!Takes(p)) {
      return TSM2_FAIL(cudaErrorInvalidConfiguration,
                       "the L tensor-core tile takes one product (or B shared) and A aligned");
    }
    StreamDevice dev;
    TSM2_CUDA_RETURN_IF_ERROR(GetStreamDevice(&dev));
    const int64_t data = int64_t{kLMmaWarps} * 16 * p.k * static_cast<int64_t>(sizeof(T));
    const int64_t target = InFlightTarget(dev.bytes_per_s, dev.sm_count);
    // The ring depth and blocks per SM: first half of the device's bytes in
    // flight per SM (the tile's own MMAs, not only its loads, need warps to
    // hide them), then the most warps, then the most bytes in flight.
    StageChoice s;
    const int staging = Args(p, 2).c_vec ? 0 : kLMmaWarps * Cfg::kOutBytes;
    for (int stages = 2; stages <= kMaxStages; ++stages) {
      const int smem = Cfg::kBBytes + stages * kLMmaWarps * Cfg::kStageBytes + staging;
      if (smem > dev.max_smem) break;
      int blocks = 0;
      TSM2_CUDA_RETURN_IF_ERROR(
          StreamBlocksPerSm(Kernel(), Cfg::kThreads, smem, dev.max_smem, &blocks));
      if (blocks < 1) break;
      const int64_t inflight = int64_t{blocks} * (stages - 1) * data;
      const bool fed = 2 * inflight >= target, had_fed = 2 * s.inflight >= target;
      const bool better = fed == had_fed && (blocks > s.blocks_per_sm ||
                                             (blocks == s.blocks_per_sm && inflight > s.inflight));
      if (s.stages == 0 || fed > had_fed || (!fed && inflight > s.inflight) || (fed && better)) {
        s = {stages, smem, blocks, inflight};
      }
    }
    if (s.stages == 0) {
      return TSM2_FAIL(cudaErrorInvalidConfiguration,
                       "two stages of the L tensor-core tile do not fit");
    }
    const int64_t tiles = CeilDiv(p.batch * p.m, int64_t{16});
    plan->sm_count = dev.sm_count;
    plan->n_tile = 8 * N8;
    plan->blocks = static_cast<int>(
        std::max<int64_t>(1, std::min<int64_t>(CeilDiv(tiles, int64_t{kLMmaWarps}),
                                               int64_t{s.blocks_per_sm} * dev.sm_count)));
    plan->units = tiles;
    plan->threads = Cfg::kThreads;
    plan->stages = s.stages;
    plan->smem_bytes = s.smem_bytes;
    plan->workspace_bytes = 0;
    plan->launch = &Launch;
    plan->kernel_name = "Tsm2LMmaKernel";
    return Status{};
  }

  static Status Launch(const DeviceMatmul& p, const MatmulPlan& plan, cudaStream_t stream) {
    const LMmaArgs a = Args(p, plan.stages);
    if (a.tiles != plan.units || !Takes(p)) {
      return TSM2_FAIL(cudaErrorInvalidValue, "the problem is not the one the plan was made for");
    }
    Tsm2LMmaKernel<T, KP, N8><<<plan.blocks, Cfg::kThreads, plan.smem_bytes, stream>>>(a);
    TSM2_RETURN_IF_LAUNCH_FAILED("Tsm2LMmaKernel");
    return Status{};
  }
};

// The instantiation for k padded as LMmaKPad pads it: f32 and f64 8, 16, 32,
// 48 or 64; bf16 and f16 16, 32 or 64.
template <typename T, int N8>
Status PlanLMma(const DeviceMatmul& p, MatmulPlan* plan) {
  switch (LMmaKPad(p.k, sizeof(T))) {
    case 8:
      if constexpr (sizeof(T) >= 4) return LMmaVariant<T, 8, N8>::Plan(p, plan);
      break;
    case 16:
      return LMmaVariant<T, 16, N8>::Plan(p, plan);
    case 32:
      return LMmaVariant<T, 32, N8>::Plan(p, plan);
    case 48:
      if constexpr (sizeof(T) >= 4) return LMmaVariant<T, 48, N8>::Plan(p, plan);
      break;
    case 64:
      return LMmaVariant<T, 64, N8>::Plan(p, plan);
    default:
      break;
  }
  return TSM2_FAIL(cudaErrorInvalidConfiguration, "no L tensor-core tile for this k");
}

}  // namespace tsm2

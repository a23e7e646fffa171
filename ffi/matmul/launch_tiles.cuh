// Plans and launches the tile families, TSM2R and TSM2L, for one element
// type: the variants of Tsm2Kernel (kernels/tsm2.cuh) for each tile shape of
// tiles.h, and TSM2L's row-per-thread kernel (kernels/row_per_thread.cuh).
// A variant's Plan sizes the persistent grid and stores its Launch in the
// MatmulPlan; the planner (plan.cuh PlanTiles) picks the variant.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "ffi/common/device.h"
#include "ffi/common/status.h"
#include "ffi/matmul/kernels/row_per_thread.cuh"
#include "ffi/matmul/kernels/tsm2.cuh"
#include "ffi/matmul/launcher.h"
#include "ffi/matmul/tiles.h"

namespace tsm2 {

// The tile shapes of tiles.h, as the config templates Tsm2Variant takes
// (any template C<T, NT> with a constexpr TileConfig kT will do: the lab
// passes its own).
template <typename T, int NT>
struct RConfig {
  static constexpr TileConfig kT = RTile(sizeof(T), NT);
};
template <int kVpt>
struct LConfig {
  template <typename T, int NT>
  struct C {
    static constexpr TileConfig kT = LTile(sizeof(T), NT, kVpt);
  };
};

template <typename T, int NT, template <typename, int> class C>
struct Tsm2Variant {
  static constexpr TileConfig kT = C<T, NT>::kT;
  using Cfg =
      Tsm2Config<T, NT, kT.rows, kT.rows_per_thread, kT.k_groups, kT.vec_per_thr, kT.stages>;
  static constexpr int kRows = Cfg::kRows;

  static const void* Kernel() { return reinterpret_cast<const void*>(&Tsm2Kernel<T, NT, Cfg>); }

  static Tsm2Args Args(const DeviceMatmul& p, int64_t blocks_hint) {
    Tsm2Args a{};
    a.a = p.a;
    a.b = p.b;
    a.c = p.c;
    a.m = p.m;
    a.k = p.k;
    a.n = p.n;
    a.a_batch_stride = p.a_batch_stride;
    a.b_batch_stride = p.b_batch_stride;
    a.row_tiles = (p.m + kRows - 1) / kRows;
    a.chunks = (p.k + Cfg::kChunkK - 1) / Cfg::kChunkK;
    a.n_tiles = (p.n + NT - 1) / NT;
    a.units = p.batch * a.n_tiles * a.row_tiles * a.chunks;
    a.blocks = static_cast<int>(std::min<int64_t>(a.units, blocks_hint));
    a.out_f32 = p.out_f32;
    a.b_trans = p.layout == Layout::kNT;
    a.a_vec_ok = p.k % kVec<T> == 0 && reinterpret_cast<uintptr_t>(p.a) % 16 == 0 &&
                 reinterpret_cast<uintptr_t>(p.b) % 16 == 0;
    // Whole-vector output rows (NT outputs of the output type fill 16-byte units).
    const int osize = p.out_f32 ? 4 : static_cast<int>(sizeof(T));
    a.c_dense = p.n == NT && NT * osize % 16 == 0 && reinterpret_cast<uintptr_t>(p.c) % 16 == 0;
    return a;
  }

  static Status Plan(const DeviceMatmul& p, MatmulPlan* plan) {
    int per_sm = 0;
    TSM2_CUDA_RETURN_IF_ERROR(BlocksPerSm(Kernel(), Cfg::kThreads, Cfg::kSmemBytes, &per_sm));
    TSM2_CUDA_RETURN_IF_ERROR(SmCount(&plan->sm_count));
    int64_t blocks = static_cast<int64_t>(per_sm) * plan->sm_count;
    const size_t per_block = static_cast<size_t>(2) * kRows * NT * sizeof(AccType<T>);
    if (Args(p, blocks).chunks > 1) {
      // Split tiles need workspace; use no more blocks than it can serve (one
      // block never splits a tile, so this is always correct, only slower).
      blocks = std::min<int64_t>(blocks, std::max<int64_t>(1, p.workspace_bytes / per_block));
    }
    const Tsm2Args a = Args(p, blocks);
    plan->n_tile = NT;
    plan->blocks = a.blocks;
    plan->units = a.units;
    plan->workspace_bytes = a.chunks > 1 && a.blocks > 1 ? a.blocks * per_block : 0;
    plan->launch = &Launch;
    plan->kernel_name = "Tsm2Kernel";
    return Status{};
  }

  // The tile kernel, then the fix-up pass over tiles split between blocks.
  static Status Launch(const DeviceMatmul& p, const MatmulPlan& plan, cudaStream_t stream) {
    Tsm2Args a = Args(p, plan.blocks);
    a.partials = p.workspace;
    if (a.units != plan.units || a.blocks != plan.blocks) {
      return TSM2_FAIL(cudaErrorInvalidValue, "the problem is not the one the plan was made for");
    }
    Tsm2Kernel<T, NT, Cfg><<<a.blocks, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(a);
    TSM2_RETURN_IF_LAUNCH_FAILED("Tsm2Kernel");
    if (plan.workspace_bytes > 0) {
      Tsm2FixupKernel<T, NT, kRows><<<a.blocks - 1, 256, 0, stream>>>(a);
      TSM2_RETURN_IF_LAUNCH_FAILED("Tsm2FixupKernel");
    }
    return Status{};
  }
};

// TSM2L's row-per-thread kernel for rows of KV 16-byte vectors. U = 4 rows
// per lane per step at 2 blocks per SM (128 registers) was the best of the
// lab's sweep on an H100 (benchmarks/lab/kernel_lab.cu, "Lrow" cases): 91-93%
// of the read ceiling.
template <typename T, int NT, int KV, int U = 4, int MinBlocks = 2>
struct RowVariant {
  using Cfg = RowConfig<T, KV, NT, U, MinBlocks>;
  static constexpr auto kKernel = &Tsm2LRowKernel<T, KV, NT, U, MinBlocks>;

  // Conditions beyond UsesRowKernel's shape test, checked on the actual buffers.
  static bool Takes(const DeviceMatmul& p) {
    const bool batch_ok = p.batch == 1 || (p.b_batch_stride == 0 && p.a_batch_stride == p.m * p.k);
    return batch_ok && p.k == Cfg::kK && reinterpret_cast<uintptr_t>(p.a) % 16 == 0;
  }

  static RowArgs Args(const DeviceMatmul& p) {
    RowArgs a{};
    a.a = p.a;
    a.b = p.b;
    a.c = p.c;
    a.rows = p.batch * p.m;
    a.n = p.n;
    a.out_f32 = p.out_f32;
    a.b_trans = p.layout == Layout::kNT;
    const int osize = p.out_f32 ? 4 : static_cast<int>(sizeof(T));
    a.c_vec = p.n == NT && Cfg::kOutPerLane * osize % 16 == 0 &&
              reinterpret_cast<uintptr_t>(p.c) % 16 == 0;
    return a;
  }

  static Status Plan(const DeviceMatmul& p, MatmulPlan* plan) {
    int per_sm = 0;
    TSM2_CUDA_RETURN_IF_ERROR(
        BlocksPerSm(reinterpret_cast<const void*>(kKernel), Cfg::kThreads, 0, &per_sm));
    TSM2_CUDA_RETURN_IF_ERROR(SmCount(&plan->sm_count));
    const int64_t rows = p.batch * p.m;
    const int64_t steps = (rows + Cfg::kRowsPerStep - 1) / Cfg::kRowsPerStep;
    plan->n_tile = NT;
    plan->blocks = static_cast<int>(std::min<int64_t>(steps, int64_t{per_sm} * plan->sm_count));
    plan->units = rows;
    plan->workspace_bytes = 0;
    plan->launch = &Launch;
    plan->kernel_name = "Tsm2LRowKernel";
    return Status{};
  }

  static Status Launch(const DeviceMatmul& p, const MatmulPlan& plan, cudaStream_t stream) {
    const RowArgs a = Args(p);
    if (a.rows != plan.units || plan.blocks < 1) {
      return TSM2_FAIL(cudaErrorInvalidValue, "the problem is not the one the plan was made for");
    }
    kKernel<<<plan.blocks, Cfg::kThreads, 0, stream>>>(a);
    TSM2_RETURN_IF_LAUNCH_FAILED("Tsm2LRowKernel");
    return Status{};
  }
};

}  // namespace tsm2

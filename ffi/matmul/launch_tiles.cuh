// Plans and launches the kernels for one element type (Tsm2Kernel for R and L
// here, the split kernels S and T through launch_split.cuh). Included by one .cu
// file per dtype (launch_f32.cu, ...) so the instantiations compile in
// parallel.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>

#include "ffi/matmul/kernels/row_per_thread.cuh"
#include "ffi/matmul/kernels/tsm2.cuh"
#include "ffi/matmul/launcher.h"
#include "ffi/matmul/launch_split.cuh"
#include "ffi/common/device.h"
#include "ffi/matmul/tiles.h"
#include "ffi/matmul/typed_launcher.h"

namespace tsm2 {

// The tile shapes of tile_configs.h, as the config templates Tsm2Variant
// takes (any template C<T, NT> with a constexpr TileConfig kT will do).
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

  static cudaError_t Plan(const DeviceMatmul& p, size_t workspace_capacity, MatmulPlan* plan) {
    int per_sm = 0, sms = 0, dev = 0;
    if (cudaError_t e = BlocksPerSm(Kernel(), Cfg::kThreads, Cfg::kSmemBytes, &per_sm);
        e != cudaSuccess) {
      return e;
    }
    if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
    if (cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
        e != cudaSuccess) {
      return e;
    }
    int64_t blocks = static_cast<int64_t>(per_sm) * sms;
    const size_t per_block = static_cast<size_t>(2) * kRows * NT * sizeof(AccType<T>);
    if (Args(p, blocks).chunks > 1) {
      // Split tiles need workspace; use no more blocks than it can serve (one
      // block never splits a tile, so this is always correct, only slower).
      blocks = std::min<int64_t>(blocks, std::max<int64_t>(1, workspace_capacity / per_block));
    }
    const Tsm2Args a = Args(p, blocks);
    plan->n_tile = NT;
    plan->blocks = a.blocks;
    plan->units = a.units;
    plan->workspace_bytes = a.chunks > 1 && a.blocks > 1 ? a.blocks * per_block : 0;
    return cudaSuccess;
  }

  static cudaError_t Launch(const DeviceMatmul& p, const MatmulPlan& plan, void* workspace,
                            cudaStream_t stream) {
    Tsm2Args a = Args(p, plan.blocks);
    a.partials = workspace;
    if (a.units != plan.units || a.blocks != plan.blocks) return cudaErrorInvalidValue;
    if (plan.workspace_bytes > 0 && workspace == nullptr) return cudaErrorInvalidValue;
    Tsm2Kernel<T, NT, Cfg><<<a.blocks, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(a);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    if (plan.workspace_bytes > 0) {
      Tsm2FixupKernel<T, NT, kRows><<<a.blocks - 1, 256, 0, stream>>>(a);
      if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    }
    return cudaSuccess;
  }
};

// TSM2L's row-per-thread kernel for rows of KV 16-byte vectors. U = 4 rows
// per lane per step at 2 blocks per SM (128 registers) was the best of the
// kernel lab's sweep (benchmarks/NOTES.md): 91-93% of the read ceiling.
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

  static cudaError_t Plan(const DeviceMatmul& p, size_t, MatmulPlan* plan) {
    int per_sm = 0, sms = 0, dev = 0;
    const void* kernel = reinterpret_cast<const void*>(kKernel);
    if (cudaError_t e = BlocksPerSm(kernel, Cfg::kThreads, 0, &per_sm); e != cudaSuccess) return e;
    if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
    if (cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
        e != cudaSuccess) {
      return e;
    }
    const int64_t rows = p.batch * p.m;
    const int64_t steps = (rows + Cfg::kRowsPerStep - 1) / Cfg::kRowsPerStep;
    plan->n_tile = NT;
    plan->blocks = static_cast<int>(std::min<int64_t>(steps, int64_t{per_sm} * sms));
    plan->units = rows;
    plan->workspace_bytes = 0;
    return cudaSuccess;
  }

  static cudaError_t Launch(const DeviceMatmul& p, const MatmulPlan& plan, void*,
                            cudaStream_t stream) {
    const RowArgs a = Args(p);
    if (a.rows != plan.units || plan.blocks < 1) return cudaErrorInvalidValue;
    kKernel<<<plan.blocks, Cfg::kThreads, 0, stream>>>(a);
    return cudaGetLastError();
  }
};

// Calls op.Run<V>() with the Tsm2Variant V that serves problem p: the n-tile
// (t2) from n, then the R tile or the L tile for this k.
template <typename T, int NT, typename Op>
cudaError_t WithTile(const DeviceMatmul& p, Kernel f, const Op& op) {
  if (!UsesLTile(f == Kernel::kTsm2l, p.k, sizeof(T))) {
    return op.template Run<Tsm2Variant<T, NT, RConfig>>();
  }
  if constexpr (NT <= 8) {
    if (UsesRowKernel(true, p.k, p.n, sizeof(T))) {
      if (p.k * static_cast<int64_t>(sizeof(T)) == 16 && RowVariant<T, NT, 1>::Takes(p)) {
        return op.template Run<RowVariant<T, NT, 1>>();
      }
      if (p.k * static_cast<int64_t>(sizeof(T)) == 32 && RowVariant<T, NT, 2>::Takes(p)) {
        return op.template Run<RowVariant<T, NT, 2>>();
      }
    }
  }
  switch (LVecsPerThread(p.k, sizeof(T))) {
    case 1:
      return op.template Run<Tsm2Variant<T, NT, LConfig<1>::template C>>();
    case 2:
      return op.template Run<Tsm2Variant<T, NT, LConfig<2>::template C>>();
    case 4:
      return op.template Run<Tsm2Variant<T, NT, LConfig<4>::template C>>();
    default:
      return op.template Run<Tsm2Variant<T, NT, LConfig<8>::template C>>();
  }
}

template <typename T, typename Op>
cudaError_t WithVariant(const DeviceMatmul& p, Kernel f, int n_tile, const Op& op) {
  switch (n_tile) {
    case 1:
      return WithTile<T, 1>(p, f, op);
    case 2:
      return WithTile<T, 2>(p, f, op);
    case 4:
      return WithTile<T, 4>(p, f, op);
    case 8:
      return WithTile<T, 8>(p, f, op);
    case 16:
      return WithTile<T, 16>(p, f, op);
    case 32:
      return WithTile<T, 32>(p, f, op);
    case 64:
      return WithTile<T, 64>(p, f, op);
    default:
      return cudaErrorInvalidValue;
  }
}

struct PlanOp {
  const DeviceMatmul& p;
  size_t workspace_capacity;
  MatmulPlan* plan;
  template <typename V>
  cudaError_t Run() const {
    return V::Plan(p, workspace_capacity, plan);
  }
};

struct LaunchOp {
  const DeviceMatmul& p;
  const MatmulPlan& plan;
  void* workspace;
  cudaStream_t stream;
  template <typename V>
  cudaError_t Run() const {
    return V::Launch(p, plan, workspace, stream);
  }
};

template <typename T>
cudaError_t TypedLauncher<T>::Plan(const DeviceMatmul& p, Kernel f, size_t ws, MatmulPlan* plan) {
  plan->family = f;
  if (f == Kernel::kTsm2s || f == Kernel::kTsm2t) return SplitLauncher<T>::Plan(p, f, ws, plan);
  return WithVariant<T>(p, f, NTileFor(p.n), PlanOp{p, ws, plan});
}

template <typename T>
cudaError_t TypedLauncher<T>::Launch(const DeviceMatmul& p, const MatmulPlan& plan, void* ws,
                                     cudaStream_t stream) {
  if (plan.family == Kernel::kTsm2s || plan.family == Kernel::kTsm2t) {
    return SplitLauncher<T>::Launch(p, plan, ws, stream);
  }
  return WithVariant<T>(p, plan.family, plan.n_tile, LaunchOp{p, plan, ws, stream});
}

}  // namespace tsm2

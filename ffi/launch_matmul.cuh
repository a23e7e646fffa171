// Plans and launches Tsm2Kernel for one element type. Included by one .cu
// file per dtype (launch_f32.cu, ...) so the instantiations compile in
// parallel.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>

#include "ffi/kernels/tsm2.cuh"
#include "ffi/launch.h"
#include "ffi/tile_configs.h"
#include "ffi/typed_launcher.h"

namespace tsm2 {

// The two tile shapes of tile_configs.h as compile-time parameters.
template <typename T, int NT>
struct RConfig {
  static constexpr TileConfig kT = RTile(sizeof(T));
  static constexpr int kRows = kT.rows, kKGroups = kT.k_groups;
  static constexpr int kStages = kT.stages, kVecPerThread = kT.vec_per_thr;
};
template <typename T, int NT>
struct LConfig {
  static constexpr TileConfig kT = LTile(sizeof(T));
  static constexpr int kRows = kT.rows, kKGroups = kT.k_groups;
  static constexpr int kStages = kT.stages, kVecPerThread = kT.vec_per_thr;
};

template <typename T>
inline bool UsesLTileFor(const DeviceMatmul& p, Family f) {
  return UsesLTile(f == Family::kTsm2l, p.k, sizeof(T));
}

// Occupancy and the shared-memory opt-in, once per kernel and device.
inline cudaError_t BlocksPerSm(const void* kernel, int threads, int smem, int* out) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, int> cache;
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find({kernel, dev});
  if (it != cache.end()) {
    *out = it->second;
    return cudaSuccess;
  }
  if (cudaError_t e =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
      e != cudaSuccess) {
    return e;
  }
  int blocks = 0;
  if (cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem);
      e != cudaSuccess) {
    return e;
  }
  if (blocks < 1) return cudaErrorInvalidConfiguration;
  cache[{kernel, dev}] = blocks;
  *out = blocks;
  return cudaSuccess;
}

template <typename T, int NT, template <typename, int> class C>
struct Tsm2Variant {
  static constexpr int kRows = C<T, NT>::kRows, kKGroups = C<T, NT>::kKGroups;
  static constexpr int kVpt = C<T, NT>::kVecPerThread, kStages = C<T, NT>::kStages;
  using Cfg = Tsm2Config<T, NT, kRows, kKGroups, kVpt, kStages>;

  static const void* Kernel() {
    return reinterpret_cast<const void*>(&Tsm2Kernel<T, NT, kRows, kKGroups, kVpt, kStages>);
  }

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
    a.a_vec_ok = p.k % kVec<T> == 0 && reinterpret_cast<uintptr_t>(p.a) % 16 == 0;
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
    Tsm2Kernel<T, NT, kRows, kKGroups, kVpt, kStages>
        <<<a.blocks, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(a);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    if (plan.workspace_bytes > 0) {
      Tsm2FixupKernel<T, NT, kRows><<<a.blocks - 1, 256, 0, stream>>>(a);
      if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    }
    return cudaSuccess;
  }
};

template <typename T, int NT>
cudaError_t PlanNt(const DeviceMatmul& p, Family f, size_t ws, MatmulPlan* plan) {
  return UsesLTileFor<T>(p, f) ? Tsm2Variant<T, NT, LConfig>::Plan(p, ws, plan)
                               : Tsm2Variant<T, NT, RConfig>::Plan(p, ws, plan);
}

template <typename T, int NT>
cudaError_t LaunchNt(const DeviceMatmul& p, const MatmulPlan& plan, void* ws, cudaStream_t stream) {
  return UsesLTileFor<T>(p, plan.family) ? Tsm2Variant<T, NT, LConfig>::Launch(p, plan, ws, stream)
                                         : Tsm2Variant<T, NT, RConfig>::Launch(p, plan, ws, stream);
}

template <typename T>
cudaError_t TypedLauncher<T>::Plan(const DeviceMatmul& p, Family f, size_t ws, MatmulPlan* plan) {
  plan->family = f;
  switch (NTileFor(p.n)) {
    case 1:
      return PlanNt<T, 1>(p, f, ws, plan);
    case 2:
      return PlanNt<T, 2>(p, f, ws, plan);
    case 4:
      return PlanNt<T, 4>(p, f, ws, plan);
    case 8:
      return PlanNt<T, 8>(p, f, ws, plan);
    case 16:
      return PlanNt<T, 16>(p, f, ws, plan);
    case 32:
      return PlanNt<T, 32>(p, f, ws, plan);
    default:
      return PlanNt<T, 64>(p, f, ws, plan);
  }
}

template <typename T>
cudaError_t TypedLauncher<T>::Launch(const DeviceMatmul& p, const MatmulPlan& plan, void* ws,
                                     cudaStream_t stream) {
  switch (plan.n_tile) {
    case 1:
      return LaunchNt<T, 1>(p, plan, ws, stream);
    case 2:
      return LaunchNt<T, 2>(p, plan, ws, stream);
    case 4:
      return LaunchNt<T, 4>(p, plan, ws, stream);
    case 8:
      return LaunchNt<T, 8>(p, plan, ws, stream);
    case 16:
      return LaunchNt<T, 16>(p, plan, ws, stream);
    case 32:
      return LaunchNt<T, 32>(p, plan, ws, stream);
    case 64:
      return LaunchNt<T, 64>(p, plan, ws, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace tsm2

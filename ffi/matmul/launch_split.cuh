// Launches the split-contraction families, TSM2S and TSM2T, for one
// element type T: SplitLauncher<T, STune, TTune> holds the launch of every
// kernel the planner (plan.cuh PlanSplit) can resolve a split plan
// (split_plan.h) to. Each only builds its kernel's arguments from the
// problem and the plan, and launches it.
#pragma once

#include <cuda.h>  // CUtensorMap and its enums (types only: nothing links libcuda)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "ffi/common/device.h"
#include "ffi/common/pdl.cuh"
#include "ffi/common/plan_math.h"
#include "ffi/common/status.h"
#include "ffi/matmul/kernels/small_left.cuh"
#include "ffi/matmul/kernels/small_left_cluster.cuh"
#include "ffi/matmul/kernels/small_left_mma.cuh"
#include "ffi/matmul/kernels/small_left_tma.cuh"
#include "ffi/matmul/kernels/split_reduce.cuh"
#include "ffi/matmul/kernels/tn.cuh"
#include "ffi/matmul/kernels/tn_flat.cuh"
#include "ffi/matmul/kernels/tn_half.cuh"
#include "ffi/matmul/kernels/tn_mma.cuh"
#include "ffi/matmul/kernels/tn_tf32.cuh"
#include "ffi/matmul/launcher.h"
#include "ffi/matmul/split_plan.h"
#include "ffi/matmul/tensor_maps.h"

namespace tsm2 {

// Points cfg at attr, filled for 1-D clusters of `cluster` blocks and, with
// pdl, programmatic dependent launch (the kernel must WaitForPrevious before
// its first read of another kernel's output).
inline void SetClusterLaunch(cudaLaunchConfig_t* cfg, cudaLaunchAttribute (&attr)[2], int cluster,
                             bool pdl) {
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = cluster;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  attr[1] = DependentLaunchAttribute();
  cfg->attrs = attr;
  cfg->numAttrs = pdl ? 2 : 1;
}

template <typename T, typename STune = STuning, typename TTune = TTuning>
struct SplitLauncher {
  static SplitArgs Args(const DeviceMatmul& p, const MatmulPlan& plan) {
    const SplitPlan& s = plan.split;
    SplitArgs a{};
    a.a = p.a;
    a.b = p.b;
    a.c = p.c;
    a.partials = p.workspace;
    a.m = p.m;
    a.k = p.k;
    a.n = p.n;
    a.a_batch_stride = p.a_batch_stride;
    a.b_batch_stride = p.b_batch_stride;
    a.tile_m = s.tile_m;
    a.tile_n = s.tile_n;
    a.tiles_m = s.tiles_m;
    a.tiles_n = s.tiles_n;
    a.step = s.step;
    a.splits = s.splits;
    a.split_len = s.split_len;
    a.out_f32 = p.out_f32;
    a.vec_ok = plan.vec_ok;
    a.b_window = plan.b_window;
    a.flat_a = s.flat_a;
    a.flat_b = s.flat_b;
    return a;
  }

  // --- TSM2S -------------------------------------------------------------

  // Blocks of each kernel resident per SM on this device (the first call also
  // opts the kernel in to its shared memory; PlanS asks before any launch).
  template <int MT>
  static cudaError_t SCoreBlocksPerSm(int* per_sm) {
    return BlocksPerSm(reinterpret_cast<const void*>(&Tsm2SKernel<T, MT, STune>), kSThreads,
                       SSmem<T, MT, STune>::kBytes, per_sm);
  }
  static cudaError_t SMmaBlocksPerSm(int* per_sm) {
    return BlocksPerSm(reinterpret_cast<const void*>(&Tsm2SMmaKernel<T, STune>), kSThreads,
                       SMmaSmem<T, STune>::kBytes, per_sm);
  }

  template <int MT>
  static Status LaunchSCore(const DeviceMatmul& p, const MatmulPlan& plan, cudaStream_t stream) {
    constexpr int kSmem = SSmem<T, MT, STune>::kBytes;
    constexpr auto kKernel = &Tsm2SKernel<T, MT, STune>;
    int per_sm = 0;
    TSM2_CUDA_RETURN_IF_ERROR(SCoreBlocksPerSm<MT>(&per_sm));
    kKernel<<<plan.blocks, kSThreads, kSmem, stream>>>(Args(p, plan));
    TSM2_RETURN_IF_LAUNCH_FAILED("Tsm2SKernel");
    return Status{};
  }

  static Status LaunchSMma(const DeviceMatmul& p, const MatmulPlan& plan, cudaStream_t stream) {
    constexpr int kSmem = SMmaSmem<T, STune>::kBytes;
    constexpr auto kKernel = &Tsm2SMmaKernel<T, STune>;
    int per_sm = 0;
    TSM2_CUDA_RETURN_IF_ERROR(SMmaBlocksPerSm(&per_sm));
    kKernel<<<plan.blocks, kSThreads, kSmem, stream>>>(Args(p, plan));
    TSM2_RETURN_IF_LAUNCH_FAILED("Tsm2SMmaKernel");
    return Status{};
  }

  // plan.blocks / kSClusterBlocks clusters of kSClusterBlocks blocks
  // (small_left_cluster.cuh).
  template <int MT, bool kVecOk>
  static Status LaunchSCluster(const DeviceMatmul& p, const MatmulPlan& plan, cudaStream_t stream) {
    using Sm = ClusterSmem<T, STune>;
    constexpr auto kKernel = &Tsm2SClusterKernel<T, MT, kVecOk, STune>;
    int per_sm = 0;  // also opts the kernel in to its shared memory
    TSM2_CUDA_RETURN_IF_ERROR(
        BlocksPerSm(reinterpret_cast<const void*>(kKernel), Sm::kThreads, Sm::kBytes, &per_sm));
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>(plan.blocks));
    cfg.blockDim = dim3(Sm::kThreads);
    cfg.dynamicSmemBytes = Sm::kBytes;
    cfg.stream = stream;
    cudaLaunchAttribute attr[2];
    SetClusterLaunch(&cfg, attr, kSClusterBlocks, STune::kPdl);
    TSM2_CUDA_RETURN_IF_ERROR(cudaLaunchKernelEx(&cfg, kKernel, Args(p, plan)));
    TSM2_RETURN_IF_LAUNCH_FAILED("Tsm2SClusterKernel");
    return Status{};
  }

  // One block per kCols-column tile (small_left_tma.cuh), with B and A as
  // tensor maps; a shared operand (batch stride 0) is a map of one batch.
  template <int kCols>
  static Status LaunchSTma(const DeviceMatmul& p, const MatmulPlan& plan, cudaStream_t stream) {
    using Sm = STmaSmem<kCols>;
    constexpr CUtensorMapDataType type = MapType<T>();
    const SplitArgs a = Args(p, plan);
    CUtensorMap b_map, a_map;
    TSM2_CUDA_RETURN_IF_ERROR(EncodeRowTensorMap(
        &b_map, type, 2, p.b, a.b_batch_stride ? p.batch : 1, p.k, p.n, Sm::kRows));
    TSM2_CUDA_RETURN_IF_ERROR(
        EncodeRowTensorMap(&a_map, type, 2, p.a, a.a_batch_stride ? p.batch : 1, p.m, p.k, 16));
    constexpr auto kKernel = &Tsm2STmaKernel<T, kCols, STune>;
    int per_sm = 0;  // also opts the kernel in to its shared memory
    TSM2_CUDA_RETURN_IF_ERROR(
        BlocksPerSm(reinterpret_cast<const void*>(kKernel), Sm::kThreads, Sm::kBytes, &per_sm));
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>(plan.blocks));
    cfg.blockDim = dim3(Sm::kThreads);
    cfg.dynamicSmemBytes = Sm::kBytes;
    cfg.stream = stream;
    cudaLaunchAttribute attr[2];
    SetClusterLaunch(&cfg, attr, 1, STune::kPdl);
    TSM2_CUDA_RETURN_IF_ERROR(
        cudaLaunchKernelEx(&cfg, kKernel, a, b_map, a_map, plan.split.early_dependents));
    TSM2_RETURN_IF_LAUNCH_FAILED("Tsm2STmaKernel");
    return Status{};
  }

  // --- TSM2T -------------------------------------------------------------

  // The T kernels and the sum of their splits go out as programmatic
  // dependents (ffi/common/pdl.cuh): each one's blocks are scheduled while
  // the kernel before it drains, which matters on products of a few
  // microseconds.

  template <int E>
  static Status LaunchTCore(const DeviceMatmul& p, const MatmulPlan& plan, cudaStream_t stream) {
    constexpr auto kKernel = &Tsm2TKernel<T, E>;
    int per_sm = 0;  // also opts the kernel in to kTMaxSmem bytes of shared memory
    TSM2_CUDA_RETURN_IF_ERROR(
        BlocksPerSm(reinterpret_cast<const void*>(kKernel), kTThreads, kTMaxSmem, &per_sm));
    if (const cudaError_t e =
            LaunchDependent(kKernel, plan.blocks, kTThreads, TSmemBytes(plan.split, sizeof(T)),
                            stream, Args(p, plan));
        e != cudaSuccess) {
      return TSM2_FAIL(e, "launching Tsm2TKernel");
    }
    return Status{};
  }

  // TSM2T with flat stages (tn_flat.cuh), EM x EN sums per thread.
  template <int EM, int EN>
  static Status LaunchTFlat(const DeviceMatmul& p, const MatmulPlan& plan, cudaStream_t stream) {
    constexpr auto kKernel = &Tsm2TFlatKernel<T, EM, EN>;
    int per_sm = 0;  // also opts the kernel in to kTMaxSmem bytes of shared memory
    TSM2_CUDA_RETURN_IF_ERROR(
        BlocksPerSm(reinterpret_cast<const void*>(kKernel), kTThreads, kTMaxSmem, &per_sm));
    if (const cudaError_t e =
            LaunchDependent(kKernel, plan.blocks, kTThreads, TSmemBytes(plan.split, sizeof(T)),
                            stream, Args(p, plan));
        e != cudaSuccess) {
      return TSM2_FAIL(e, "launching Tsm2TFlatKernel");
    }
    return Status{};
  }
  // The flat launch for a plan's thread blocks (split_plan.h PlanTFlat: edges
  // 1, 2, 4, 8, edge_m at most 4 in f64); null for any other.
  template <int EM>
  static MatmulLaunchFn TFlatLaunchWith(int64_t edge_n) {
    switch (edge_n) {
      case 1:
        return &LaunchTFlat<EM, 1>;
      case 2:
        return &LaunchTFlat<EM, 2>;
      case 4:
        return &LaunchTFlat<EM, 4>;
      case 8:
        return &LaunchTFlat<EM, 8>;
    }
    return nullptr;
  }
  static MatmulLaunchFn TFlatLaunchFor(const SplitPlan& s) {
    switch (s.edge_m) {
      case 1:
        return TFlatLaunchWith<1>(s.edge_n);
      case 2:
        return TFlatLaunchWith<2>(s.edge_n);
      case 4:
        return TFlatLaunchWith<4>(s.edge_n);
      case 8:
        if constexpr (sizeof(T) < 8) return TFlatLaunchWith<8>(s.edge_n);
    }
    return nullptr;
  }

  // The tensor-core TSM2T, compiled per output tile: DMMA for f64
  // (tn_mma.cuh), 3xTF32 for f32 (tn_tf32.cuh), m16n8k16 for bf16 and f16
  // (tn_half.cuh).
  template <int TM, int TN>
  static Status LaunchTMma(const DeviceMatmul& p, const MatmulPlan& plan, cudaStream_t stream) {
    void (*kernel)(SplitArgs);
    if constexpr (std::is_same_v<T, double>) {
      kernel = &Tsm2TMmaKernel<TM, TN>;
    } else if constexpr (std::is_same_v<T, float>) {
      kernel = &Tsm2TTf32Kernel<TM, TN>;
    } else {
      kernel = &Tsm2THalfKernel<T, TM, TN>;
    }
    int per_sm = 0;  // also opts the kernel in to kTMaxSmem bytes of shared memory
    TSM2_CUDA_RETURN_IF_ERROR(
        BlocksPerSm(reinterpret_cast<const void*>(kernel), kTThreads, kTMaxSmem, &per_sm));
    if (const cudaError_t e =
            LaunchDependent(kernel, plan.blocks, kTThreads, TSmemBytes(plan.split, sizeof(T)),
                            stream, Args(p, plan));
        e != cudaSuccess) {
      return TSM2_FAIL(e, "launching the tensor-core T kernel");
    }
    return Status{};
  }

  // The tensor-core launch for the plan's tile, or nullptr where TUsesMma
  // admits no such tile for T or the plan's step is not the kernel's.
  template <int TM, int TN>
  static MatmulLaunchFn TMmaLaunchWith(const SplitPlan& s) {
    if constexpr (!TUsesMma(sizeof(T), TM, TN)) {
      return nullptr;  // a tile of the other element types
    } else {
      return s.step == TMmaTile<T, TM, TN>::kStep ? &LaunchTMma<TM, TN> : nullptr;
    }
  }
  // Every tile TUsesMma admits for some element type (TPlan's power-of-two
  // edges, at most 4096 outputs).
  static MatmulLaunchFn TMmaLaunchFor(const SplitPlan& s) {
    switch (s.tile_m * 1024 + s.tile_n) {
      case 16 * 1024 + 64:
        return TMmaLaunchWith<16, 64>(s);
      case 16 * 1024 + 128:
        return TMmaLaunchWith<16, 128>(s);
      case 16 * 1024 + 256:
        return TMmaLaunchWith<16, 256>(s);
      case 32 * 1024 + 32:
        return TMmaLaunchWith<32, 32>(s);
      case 32 * 1024 + 64:
        return TMmaLaunchWith<32, 64>(s);
      case 32 * 1024 + 128:
        return TMmaLaunchWith<32, 128>(s);
      case 64 * 1024 + 16:
        return TMmaLaunchWith<64, 16>(s);
      case 64 * 1024 + 32:
        return TMmaLaunchWith<64, 32>(s);
      case 64 * 1024 + 64:
        return TMmaLaunchWith<64, 64>(s);
      case 128 * 1024 + 8:
        return TMmaLaunchWith<128, 8>(s);
      case 128 * 1024 + 16:
        return TMmaLaunchWith<128, 16>(s);
      case 128 * 1024 + 32:
        return TMmaLaunchWith<128, 32>(s);
      case 256 * 1024 + 8:
        return TMmaLaunchWith<256, 8>(s);
      case 256 * 1024 + 16:
        return TMmaLaunchWith<256, 16>(s);
      case 512 * 1024 + 8:
        return TMmaLaunchWith<512, 8>(s);
      default:
        return nullptr;  // TUsesMma admits no other tile
    }
  }

  // --- The sum of the splits (S and T) -------------------------------------

  // kWarpsOverSplits: a block per 32 outputs, its warps over the splits;
  // else a thread per output. Lines of partials may be dropped from L2 once
  // read where each warp's 32 outputs are whole lines of their own.
  template <bool kWarpsOverSplits>
  static Status AddSplits(const DeviceMatmul& p, const MatmulPlan& plan, cudaStream_t stream) {
    const int64_t outputs = p.batch * p.m * p.n;
    const bool discard = kWarpsOverSplits && p.m * p.n % 32 == 0 &&
                         reinterpret_cast<uintptr_t>(p.workspace) % 128 == 0;
    const int64_t per_block = kWarpsOverSplits ? 32 : kReduceThreads;
    const int blocks =
        static_cast<int>(std::min<int64_t>(CeilDiv(outputs, per_block), 16 * plan.sm_count));
    if (const cudaError_t e = LaunchDependent(&Tsm2SplitReduceKernel<T, kWarpsOverSplits>,
                                              static_cast<unsigned>(blocks), kReduceThreads, 0,
                                              stream, Args(p, plan), p.batch, discard);
        e != cudaSuccess) {
      return TSM2_FAIL(e, "launching Tsm2SplitReduceKernel");
    }
    return Status{};
  }
};

}  // namespace tsm2

// Plans and launches the split-contraction kernels, TSM2S and TSM2T, for one
// element type (included by launch_matmul.cuh). The split plan itself is
// plain C++ (split_plans.h), so Python sizes the workspace from the same
// numbers.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "ffi/matmul/kernels/small_left.cuh"
#include "ffi/matmul/kernels/small_left_cluster.cuh"
#include "ffi/matmul/kernels/small_left_mma.cuh"
#include "ffi/matmul/kernels/small_left_tma.cuh"
#include "ffi/matmul/kernels/split_reduce.cuh"
#include "ffi/matmul/kernels/tn.cuh"
#include "ffi/matmul/kernels/tn_half.cuh"
#include "ffi/matmul/kernels/tn_mma.cuh"
#include "ffi/matmul/kernels/tn_tf32.cuh"
#include "ffi/matmul/launcher.h"
#include "ffi/common/device.h"
#include "ffi/matmul/split_plan.h"
#include "ffi/matmul/tensor_maps.h"

namespace tsm2 {

// TSM2_LAB_SKIP_SPLIT_SUM (kernel lab only; the sums are then wrong): an
// empty kernel instead of the split sums, so that the lab times the first
// launch with its tail exposed, as the split-sum pass leaves it.
#ifdef TSM2_LAB_SKIP_SPLIT_SUM
__global__ void LabEmptyKernel() {}
#endif

// Shared memory the T kernel may ask for (TSmemBytes stays below this).
constexpr int kTMaxSmem = 96 * 1024;

inline cudaError_t SmCount(int* sms) {
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
  return cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, dev);
}

// Points cfg at attr, filled for 1-D clusters of `cluster` blocks and, with
// pdl, programmatic dependent launch (the kernel must griddepcontrol.wait
// before its first read of another kernel's output).
inline void SetClusterLaunch(cudaLaunchConfig_t* cfg, cudaLaunchAttribute (&attr)[2], int cluster,
                             bool pdl) {
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = cluster;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[1].val.programmaticStreamSerializationAllowed = 1;
  cfg->attrs = attr;
  cfg->numAttrs = pdl ? 2 : 1;
}

template <typename T>
struct SplitLauncher {
  static SplitPlan MakePlan(const DeviceMatmul& p, Kernel f, int sms) {
    return f == Kernel::kTsm2t ? TPlan(sizeof(T), p.batch, p.m, p.k, p.n, sms)
                               : SPlan(sizeof(T), p.batch, p.m, p.k, p.n, sms);
  }

  static cudaError_t Plan(const DeviceMatmul& p, Kernel f, size_t workspace_capacity,
                          MatmulPlan* plan) {
    if (f == Kernel::kTsm2s && p.m > kSMaxM) return cudaErrorInvalidValue;
    int sms = 0;
    if (cudaError_t e = SmCount(&sms); e != cudaSuccess) return e;
    SplitPlan s = MakePlan(p, f, sms);
    size_t need = SplitWorkspaceBytes(s, sizeof(T), p.batch, p.m, p.n);
    if (need > workspace_capacity) {  // one split needs no workspace and is always correct
      s.splits = 1;
      s.split_len = CeilDiv(std::max<int64_t>(p.k, 1), s.step) * s.step;
      need = 0;
    }
    if (s.Blocks(p.batch) > int64_t{1} << 31) return cudaErrorInvalidConfiguration;
    plan->blocks = static_cast<int>(s.Blocks(p.batch));
    plan->splits = s.splits;
    plan->split_len = s.split_len;
    plan->workspace_bytes = need;
    return cudaSuccess;
  }

  static SplitArgs Args(const DeviceMatmul& p, const MatmulPlan& plan, const SplitPlan& s,
                        void* workspace) {
    SplitArgs a{};
    a.a = p.a;
    a.b = p.b;
    a.c = p.c;
    a.partials = workspace;
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
    a.splits = plan.splits;
    a.split_len = plan.split_len;
    a.out_f32 = p.out_f32;
    return a;
  }

  template <int MT>
  static cudaError_t LaunchSWith(const SplitArgs& a, int blocks, cudaStream_t stream) {
    constexpr int kSmem = SSmem<T, MT>::kBytes;
    const void* kernel = reinterpret_cast<const void*>(&Tsm2SKernel<T, MT>);
    int per_sm = 0;  // also opts the kernel in to kSmem bytes of shared memory
    if (cudaError_t e = BlocksPerSm(kernel, kSThreads, kSmem, &per_sm); e != cudaSuccess) return e;
    Tsm2SKernel<T, MT><<<blocks, kSThreads, kSmem, stream>>>(a);
    return cudaGetLastError();
  }

  // `blocks` clusters of kSClusterBlocks blocks (small_left_cluster.cuh).
  template <int MT>
  static cudaError_t LaunchSCluster(const SplitArgs& a, int blocks, cudaStream_t stream) {
    return a.vec_ok ? LaunchSClusterWith<MT, true>(a, blocks, stream)
                    : LaunchSClusterWith<MT, false>(a, blocks, stream);
  }
  template <int MT, bool kVecOk>
  static cudaError_t LaunchSClusterWith(const SplitArgs& a, int blocks, cudaStream_t stream) {
    constexpr int kSmem = ClusterSmem<T>::kBytes, kThreads = ClusterSmem<T>::kThreads;
    constexpr auto kKernel = &Tsm2SClusterKernel<T, MT, kVecOk>;
    const void* kernel = reinterpret_cast<const void*>(kKernel);
    int per_sm = 0;  // also opts the kernel in to kSmem bytes of shared memory
    if (cudaError_t e = BlocksPerSm(kernel, kThreads, kSmem, &per_sm); e != cudaSuccess) return e;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>(blocks * kSClusterBlocks));
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = kSmem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[2];
    SetClusterLaunch(&cfg, attr, kSClusterBlocks, kSClusterPdl);
    if (cudaError_t e = cudaLaunchKernelEx(&cfg, kKernel, a); e != cudaSuccess) {
      return e;
    }
    return cudaGetLastError();
  }

  // One block per kCols-column tile (small_left_tma.cuh), with B and A as
  // tensor maps; a shared operand (batch stride 0) is a map of one batch.
  template <int kCols>
  static cudaError_t LaunchSTma(const DeviceMatmul& p, const SplitArgs& a, int blocks,
                                bool early_dependents, cudaStream_t stream) {
    using Sm = STmaSmem<kCols>;
    const CUtensorMapDataType type = std::is_same_v<T, __half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                               : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    CUtensorMap b_map, a_map;
    if (cudaError_t e = EncodeHalfTensorMap(&b_map, type, p.b, a.b_batch_stride ? p.batch : 1, p.k,
                                            p.n, Sm::kRows);
        e != cudaSuccess) {
      return e;
    }
    if (cudaError_t e =
            EncodeHalfTensorMap(&a_map, type, p.a, a.a_batch_stride ? p.batch : 1, p.m, p.k, 16);
        e != cudaSuccess) {
      return e;
    }
    constexpr auto kKernel = &Tsm2STmaKernel<T, kCols>;
    const void* kernel = reinterpret_cast<const void*>(kKernel);
    int per_sm = 0;  // also opts the kernel in to its shared memory
    if (cudaError_t e = BlocksPerSm(kernel, Sm::kThreads, Sm::kBytes, &per_sm); e != cudaSuccess) {
      return e;
    }
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>(blocks));
    cfg.blockDim = dim3(Sm::kThreads);
    cfg.dynamicSmemBytes = Sm::kBytes;
    cfg.stream = stream;
    cudaLaunchAttribute attr[2];
    SetClusterLaunch(&cfg, attr, 1, kSClusterPdl);
    if (cudaError_t e = cudaLaunchKernelEx(&cfg, kKernel, a, b_map, a_map, early_dependents);
        e != cudaSuccess) {
      return e;
    }
    return cudaGetLastError();
  }

  static cudaError_t LaunchS(const DeviceMatmul& p, SplitArgs a, const SplitPlan& s,
                             cudaStream_t stream) {
    constexpr int kCpt = SCols<T>::kCpt;
    a.vec_ok = p.n % kCpt == 0 && reinterpret_cast<uintptr_t>(p.b) % SCols<T>::kBytes == 0;
    const int64_t mt = Pow2AtLeast(p.m);
    const int blocks = static_cast<int>(a.splits * a.tiles_n * p.batch);
    if constexpr (sizeof(T) == 2) {
      if (s.tma) {  // no other kernel runs a tensor-map plan
        if (!HasClusters()) return cudaErrorInvalidDeviceFunction;
        // The copies need 16-byte aligned operands (n, k % 8 == 0: the plan),
        // and the stores an aligned C; XLA's buffers always are.
        if (reinterpret_cast<uintptr_t>(p.c) % 16 != 0) return cudaErrorInvalidValue;
        return s.tile_n == 64 ? LaunchSTma<64>(p, a, blocks, s.early_dependents, stream)
                              : LaunchSTma<128>(p, a, blocks, s.early_dependents, stream);
      }
    }
    if constexpr (sizeof(T) <= 4) {
      if (s.cluster) {  // no other kernel runs a cluster plan
        if (!HasClusters()) return cudaErrorInvalidDeviceFunction;
        // vec_ok: 16-byte copies of A and B, and one vector store per quad of
        // outputs (C, or the partial sums).
        a.vec_ok = p.n % 8 == 0 && p.k % 8 == 0 && reinterpret_cast<uintptr_t>(p.a) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(p.b) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(p.c) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(a.partials) % 16 == 0;
        if constexpr (sizeof(T) == 2) {
          return LaunchSCluster<16>(a, blocks, stream);
        } else {  // f32 multiplies m rounded up to a power of two rows of A
          return WithRowsOfA(mt, [&](auto rows) {
            return LaunchSCluster<decltype(rows)::value>(a, blocks, stream);
          });
        }
      }
    }
    if constexpr (sizeof(T) == 2) {
      if (s.mma && HasMmaSync()) {
        constexpr int kSmem = SMmaSmem<T>::kBytes;
        const void* kernel = reinterpret_cast<const void*>(&Tsm2SMmaKernel<T>);
        int per_sm = 0;  // also opts the kernel in to kSmem bytes of shared memory
        if (cudaError_t e = BlocksPerSm(kernel, kSThreads, kSmem, &per_sm); e != cudaSuccess) {
          return e;
        }
        Tsm2SMmaKernel<T><<<blocks, kSThreads, kSmem, stream>>>(a);
        return cudaGetLastError();
      }
    }
    return WithRowsOfA(
        mt, [&](auto rows) { return LaunchSWith<decltype(rows)::value>(a, blocks, stream); });
  }

  // launch(std::integral_constant<int, MT>) for MT = mt, one of the row
  // counts the S kernels are compiled for (1, 2, 4, 8, 16).
  template <typename Launch>
  static cudaError_t WithRowsOfA(int64_t mt, Launch&& launch) {
    switch (mt) {
      case 1:
        return launch(std::integral_constant<int, 1>{});
      case 2:
        return launch(std::integral_constant<int, 2>{});
      case 4:
        return launch(std::integral_constant<int, 4>{});
      case 8:
        return launch(std::integral_constant<int, 8>{});
      case 16:
        return launch(std::integral_constant<int, 16>{});
      default:
        return cudaErrorInvalidValue;
    }
  }

  // The tensor-core TSM2T, compiled per output tile: DMMA for f64
  // (tn_mma.cuh), 3xTF32 for f32 (tn_tf32.cuh), m16n8k16 for bf16 and f16
  // (tn_half.cuh).
  template <int TM, int TN>
  static cudaError_t LaunchTMmaWith(const SplitArgs& a, const SplitPlan& s, int blocks, int smem,
                                    cudaStream_t stream) {
    if constexpr (!TUsesMma(sizeof(T), TM, TN)) {
      return cudaErrorInvalidValue;  // a tile of the other element type
    } else {
      if (s.step != TMmaTile<T, TM, TN>::kStep) return cudaErrorInvalidValue;
      void (*kernel)(SplitArgs);
      if constexpr (std::is_same_v<T, double>) {
        kernel = &Tsm2TMmaKernel<TM, TN>;
      } else if constexpr (std::is_same_v<T, float>) {
        kernel = &Tsm2TTf32Kernel<TM, TN>;
      } else {
        kernel = &Tsm2THalfKernel<T, TM, TN>;
      }
      int per_sm = 0;  // also opts the kernel in to kTMaxSmem bytes of shared memory
      if (cudaError_t e =
              BlocksPerSm(reinterpret_cast<const void*>(kernel), kTThreads, kTMaxSmem, &per_sm);
          e != cudaSuccess) {
        return e;
      }
      kernel<<<blocks, kTThreads, smem, stream>>>(a);
      return cudaGetLastError();
    }
  }
  // Every tile TUsesMma admits for some element type (TPlan's power-of-two
  // edges, at most 4096 outputs).
  static cudaError_t LaunchTMma(const SplitArgs& a, const SplitPlan& s, int blocks, int smem,
                                cudaStream_t stream) {
    switch (s.tile_m * 1024 + s.tile_n) {
      case 16 * 1024 + 64:
        return LaunchTMmaWith<16, 64>(a, s, blocks, smem, stream);
      case 16 * 1024 + 128:
        return LaunchTMmaWith<16, 128>(a, s, blocks, smem, stream);
      case 16 * 1024 + 256:
        return LaunchTMmaWith<16, 256>(a, s, blocks, smem, stream);
      case 32 * 1024 + 32:
        return LaunchTMmaWith<32, 32>(a, s, blocks, smem, stream);
      case 32 * 1024 + 64:
        return LaunchTMmaWith<32, 64>(a, s, blocks, smem, stream);
      case 32 * 1024 + 128:
        return LaunchTMmaWith<32, 128>(a, s, blocks, smem, stream);
      case 64 * 1024 + 16:
        return LaunchTMmaWith<64, 16>(a, s, blocks, smem, stream);
      case 64 * 1024 + 32:
        return LaunchTMmaWith<64, 32>(a, s, blocks, smem, stream);
      case 64 * 1024 + 64:
        return LaunchTMmaWith<64, 64>(a, s, blocks, smem, stream);
      case 128 * 1024 + 8:
        return LaunchTMmaWith<128, 8>(a, s, blocks, smem, stream);
      case 128 * 1024 + 16:
        return LaunchTMmaWith<128, 16>(a, s, blocks, smem, stream);
      case 128 * 1024 + 32:
        return LaunchTMmaWith<128, 32>(a, s, blocks, smem, stream);
      case 256 * 1024 + 8:
        return LaunchTMmaWith<256, 8>(a, s, blocks, smem, stream);
      case 256 * 1024 + 16:
        return LaunchTMmaWith<256, 16>(a, s, blocks, smem, stream);
      case 512 * 1024 + 8:
        return LaunchTMmaWith<512, 8>(a, s, blocks, smem, stream);
      default:
        return cudaErrorInvalidValue;  // TUsesMma admits no other tile
    }
  }
  static bool HasClusters() {  // thread-block clusters: sm_90 and later
    int dev = 0, major = 0;
    return cudaGetDevice(&dev) == cudaSuccess &&
           cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
           major >= 9;
  }
  static bool HasMmaSync() {  // FP64, TF32, bf16 mma.sync and ldmatrix.trans: sm_80 and later
    int dev = 0, major = 0;
    return cudaGetDevice(&dev) == cudaSuccess &&
           cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
           major >= 8;
  }

  static cudaError_t LaunchT(const DeviceMatmul& p, SplitArgs a, const SplitPlan& s,
                             cudaStream_t stream) {
    constexpr int kV = kVec<T>;
    a.vec_ok = p.m % kV == 0 && p.n % kV == 0 && s.tile_m % kV == 0 && s.tile_n % kV == 0 &&
               reinterpret_cast<uintptr_t>(p.a) % 16 == 0 &&
               reinterpret_cast<uintptr_t>(p.b) % 16 == 0;
    // Below sm_80 the CUDA-core kernel runs the same plan (any step works
    // for it, and the padded ring is only larger than it needs).
    if (s.mma && HasMmaSync()) {
      const int smem = TSmemBytes(s, sizeof(T));
      if (smem > kTMaxSmem) return cudaErrorInvalidConfiguration;
      const int blocks = static_cast<int>(a.splits * a.tiles_m * a.tiles_n * p.batch);
      return LaunchTMma(a, s, blocks, smem, stream);
    }
    // TPlan never gives f64 8 x 8 blocks (128 accumulator registers would spill).
    constexpr int kWide = sizeof(T) <= 4 ? 8 : 4;
    if (s.thread_edge != 4 && s.thread_edge != kWide) return cudaErrorInvalidValue;
    const void* kernel = s.thread_edge == 8 ? reinterpret_cast<const void*>(&Tsm2TKernel<T, kWide>)
                                            : reinterpret_cast<const void*>(&Tsm2TKernel<T, 4>);
    int per_sm = 0;  // also opts the kernel in to kTMaxSmem bytes of shared memory
    if (cudaError_t e = BlocksPerSm(kernel, kTThreads, kTMaxSmem, &per_sm); e != cudaSuccess) {
      return e;
    }
    const int smem = TSmemBytes(s, sizeof(T));
    if (smem > kTMaxSmem) return cudaErrorInvalidConfiguration;
    const int blocks = static_cast<int>(a.splits * a.tiles_m * a.tiles_n * p.batch);
    if (s.thread_edge == 8) {
      Tsm2TKernel<T, kWide><<<blocks, kTThreads, smem, stream>>>(a);
    } else {
      Tsm2TKernel<T, 4><<<blocks, kTThreads, smem, stream>>>(a);
    }
    return cudaGetLastError();
  }

  static cudaError_t Launch(const DeviceMatmul& p, const MatmulPlan& plan, void* workspace,
                            cudaStream_t stream) {
    int sms = 0;
    if (cudaError_t e = SmCount(&sms); e != cudaSuccess) return e;
    const SplitPlan s = MakePlan(p, plan.family, sms);
    if (plan.workspace_bytes > 0 && workspace == nullptr) return cudaErrorInvalidValue;
    const SplitArgs a = Args(p, plan, s, workspace);
    cudaError_t e =
        plan.family == Kernel::kTsm2t ? LaunchT(p, a, s, stream) : LaunchS(p, a, s, stream);
    if (e != cudaSuccess || plan.splits <= 1) return e;
#ifdef TSM2_LAB_SKIP_SPLIT_SUM
    LabEmptyKernel<<<1, 32, 0, stream>>>();
    return cudaGetLastError();
#endif
    // Many splits (T): a block per 32 outputs, its warps over the splits;
    // else a thread per output. Lines of partials may be dropped from L2
    // once read where each warp's 32 outputs are whole lines of their own.
    const int64_t outputs = p.batch * p.m * p.n;
    const bool warps_over_splits = plan.splits >= 32;
    const bool discard = warps_over_splits && p.m * p.n % 32 == 0 &&
                         reinterpret_cast<uintptr_t>(workspace) % 128 == 0;
    const int64_t per_block = warps_over_splits ? 32 : kReduceThreads;
    const int reduce_blocks =
        static_cast<int>(std::min<int64_t>(CeilDiv(outputs, per_block), 16 * sms));
    if (warps_over_splits) {
      Tsm2SplitReduceKernel<T, true>
          <<<reduce_blocks, kReduceThreads, 0, stream>>>(a, p.batch, discard);
    } else {
      Tsm2SplitReduceKernel<T, false>
          <<<reduce_blocks, kReduceThreads, 0, stream>>>(a, p.batch, false);
    }
    return cudaGetLastError();
  }
};

}  // namespace tsm2

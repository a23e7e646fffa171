// Plans and launches the split-contraction families, TSM2S and TSM2T, for one
// element type T. SplitLauncher<T, STune, TTune>::Plan makes the split plan
// (split_plan.h, plain C++ so that Python sizes the workspace from the same
// numbers), resolves the one kernel that runs it and stores its launch
// function in the MatmulPlan; the Launch* functions below only build the
// kernel's arguments and launch it.
#pragma once

#include <cuda.h>  // CUtensorMap and its enums (types only: nothing links libcuda)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "ffi/common/device.h"
#include "ffi/common/status.h"
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
#include "ffi/matmul/split_plan.h"
#include "ffi/matmul/tensor_maps.h"

namespace tsm2 {

// Shared memory the T kernel may ask for (TSmemBytes stays below this).
constexpr int kTMaxSmem = 96 * 1024;

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

template <typename T, typename STune = STuning, typename TTune = TTuning>
struct SplitLauncher {
  static SplitPlan MakePlan(const DeviceMatmul& p, Kernel f, int sms) {
    return f == Kernel::kTsm2t ? TPlan<TTune>(sizeof(T), p.batch, p.m, p.k, p.n, sms)
                               : SPlan<STune>(sizeof(T), p.batch, p.m, p.k, p.n, sms);
  }

  static Status Plan(const DeviceMatmul& p, Kernel f, MatmulPlan* plan) {
    if (f == Kernel::kTsm2s && p.m > kSMaxM) {
      return TSM2_FAIL(cudaErrorInvalidValue, "TSM2S takes m <= kSMaxM rows of A");
    }
    TSM2_CUDA_RETURN_IF_ERROR(SmCount(&plan->sm_count));
    SplitPlan s = MakePlan(p, f, plan->sm_count);
    size_t need = SplitWorkspaceBytes(s, sizeof(T), p.batch, p.m, p.n);
    if (need > p.workspace_bytes) {  // one split needs no workspace and is always correct
      s.splits = 1;
      s.split_len = CeilDiv(std::max<int64_t>(p.k, 1), s.step) * s.step;
      need = 0;
    }
    if (s.Blocks(p.batch) > int64_t{1} << 31) {
      return TSM2_FAIL(cudaErrorInvalidConfiguration, "the split plan has more than 2^31 blocks");
    }
    plan->split = s;
    plan->blocks = static_cast<int>(s.Blocks(p.batch));
    plan->workspace_bytes = need;
    TSM2_RETURN_IF_ERROR(f == Kernel::kTsm2t ? PlanT(p, plan) : PlanS(p, plan));
    if (s.splits > 1) {
      // Many splits (T): a block per 32 outputs, its warps over the splits;
      // else a thread per output.
      plan->finish = s.splits >= 32 ? &AddSplits<true> : &AddSplits<false>;
    }
    return Status{};
  }

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
    return a;
  }

  // --- TSM2S -------------------------------------------------------------

  // Which S kernel runs the plan: the tensor-map kernel or the cluster kernel
  // where the plan says so (no other kernel runs their plans), else the
  // tensor-core kernel for 2-byte types from STune::kMmaMinM rows, else the
  // CUDA-core kernel; the last two for m rounded up to a power of two rows.
  static Status PlanS(const DeviceMatmul& p, MatmulPlan* plan) {
    const SplitPlan& s = plan->split;
    plan->vec_ok =
        p.n % SCols<T>::kCpt == 0 && reinterpret_cast<uintptr_t>(p.b) % SCols<T>::kBytes == 0;
    const int64_t mt = Pow2AtLeast(p.m);
    if constexpr (sizeof(T) == 2) {
      if (s.tma) {
        if (!HasClusters()) {
          return TSM2_FAIL(cudaErrorInvalidDeviceFunction, "the tensor-map S plan needs sm_90");
        }
        // The copies need 16-byte aligned operands (n, k % 8 == 0: the plan),
        // and the stores an aligned C; XLA's buffers always are.
        if (reinterpret_cast<uintptr_t>(p.c) % 16 != 0) {
          return TSM2_FAIL(cudaErrorInvalidValue,
                           "the tensor-map S kernel needs C 16-byte aligned");
        }
        plan->launch = s.tile_n == 64 ? &LaunchSTma<64> : &LaunchSTma<128>;
        plan->kernel_name = "Tsm2STmaKernel";
        return Status{};
      }
    }
    if constexpr (sizeof(T) <= 4) {
      if (s.cluster) {
        if (!HasClusters()) {
          return TSM2_FAIL(cudaErrorInvalidDeviceFunction, "the cluster S plan needs sm_90");
        }
        // 16-byte copies of A and B, and one vector store per quad of outputs
        // (C, or the partial sums).
        plan->vec_ok = p.n % 8 == 0 && p.k % 8 == 0 && reinterpret_cast<uintptr_t>(p.a) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(p.b) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(p.c) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(p.workspace) % 16 == 0;
        plan->kernel_name = "Tsm2SClusterKernel";
        if constexpr (sizeof(T) == 2) {  // m16 tiles whatever m
          plan->launch = plan->vec_ok ? &LaunchSCluster<16, true> : &LaunchSCluster<16, false>;
          return Status{};
        } else {  // f32 multiplies m rounded up to a power of two rows of A
          return WithRowsOfA(mt, [&](auto rows) {
            constexpr int kMt = decltype(rows)::value;
            plan->launch = plan->vec_ok ? &LaunchSCluster<kMt, true> : &LaunchSCluster<kMt, false>;
          });
        }
      }
    }
    if constexpr (sizeof(T) == 2) {
      if (s.mma && HasMmaSync()) {
        plan->launch = &LaunchSMma;
        plan->kernel_name = "Tsm2SMmaKernel";
        return Status{};
      }
    }
    plan->kernel_name = "Tsm2SKernel";
    return WithRowsOfA(mt, [&](auto rows) { plan->launch = &LaunchSCore<decltype(rows)::value>; });
  }

  // set(std::integral_constant<int, MT>) for MT = mt, one of the row counts
  // the S kernels are compiled for (1, 2, 4, 8, 16).
  template <typename Set>
  static Status WithRowsOfA(int64_t mt, Set&& set) {
    switch (mt) {
      case 1:
        set(std::integral_constant<int, 1>{});
        return Status{};
      case 2:
        set(std::integral_constant<int, 2>{});
        return Status{};
      case 4:
        set(std::integral_constant<int, 4>{});
        return Status{};
      case 8:
        set(std::integral_constant<int, 8>{});
        return Status{};
      case 16:
        set(std::integral_constant<int, 16>{});
        return Status{};
      default:
        return TSM2_FAIL(cudaErrorInvalidValue, "TSM2S takes m <= 16 rows of A");
    }
  }

  template <int MT>
  static Status LaunchSCore(const DeviceMatmul& p, const MatmulPlan& plan, cudaStream_t stream) {
    constexpr int kSmem = SSmem<T, MT, STune>::kBytes;
    constexpr auto kKernel = &Tsm2SKernel<T, MT, STune>;
    int per_sm = 0;  // also opts the kernel in to kSmem bytes of shared memory
    TSM2_CUDA_RETURN_IF_ERROR(
        BlocksPerSm(reinterpret_cast<const void*>(kKernel), kSThreads, kSmem, &per_sm));
    kKernel<<<plan.blocks, kSThreads, kSmem, stream>>>(Args(p, plan));
    TSM2_RETURN_IF_LAUNCH_FAILED("Tsm2SKernel");
    return Status{};
  }

  static Status LaunchSMma(const DeviceMatmul& p, const MatmulPlan& plan, cudaStream_t stream) {
    constexpr int kSmem = SMmaSmem<T, STune>::kBytes;
    constexpr auto kKernel = &Tsm2SMmaKernel<T, STune>;
    int per_sm = 0;  // also opts the kernel in to kSmem bytes of shared memory
    TSM2_CUDA_RETURN_IF_ERROR(
        BlocksPerSm(reinterpret_cast<const void*>(kKernel), kSThreads, kSmem, &per_sm));
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
    const CUtensorMapDataType type = std::is_same_v<T, __half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                               : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    const SplitArgs a = Args(p, plan);
    CUtensorMap b_map, a_map;
    TSM2_CUDA_RETURN_IF_ERROR(EncodeHalfTensorMap(&b_map, type, p.b, a.b_batch_stride ? p.batch : 1,
                                                  p.k, p.n, Sm::kRows));
    TSM2_CUDA_RETURN_IF_ERROR(
        EncodeHalfTensorMap(&a_map, type, p.a, a.a_batch_stride ? p.batch : 1, p.m, p.k, 16));
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

  // Which T kernel runs the plan: the tensor-core kernel compiled for the
  // plan's output tile where the plan says so and the GPU has mma.sync
  // (sm_80), else the CUDA-core kernel with the plan's thread blocks (below
  // sm_80 it runs the tensor-core plans too: any step works for it, and the
  // padded ring is only larger than it needs).
  static Status PlanT(const DeviceMatmul& p, MatmulPlan* plan) {
    const SplitPlan& s = plan->split;
    constexpr int kV = kVec<T>;
    plan->vec_ok = p.m % kV == 0 && p.n % kV == 0 && s.tile_m % kV == 0 && s.tile_n % kV == 0 &&
                   reinterpret_cast<uintptr_t>(p.a) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(p.b) % 16 == 0;
    if (TSmemBytes(s, sizeof(T)) > kTMaxSmem) {
      return TSM2_FAIL(cudaErrorInvalidConfiguration, "the T plan's ring exceeds kTMaxSmem");
    }
    if (s.mma && HasMmaSync()) {
      plan->launch = TMmaLaunchFor(s);
      plan->kernel_name = std::is_same_v<T, double>  ? "Tsm2TMmaKernel"
                          : std::is_same_v<T, float> ? "Tsm2TTf32Kernel"
                                                     : "Tsm2THalfKernel";
      if (plan->launch == nullptr) {
        return TSM2_FAIL(cudaErrorInvalidValue, "no tensor-core T kernel for the plan's tile");
      }
      return Status{};
    }
    // TPlan never gives f64 8 x 8 blocks (128 accumulator registers would spill).
    constexpr int kWide = sizeof(T) <= 4 ? 8 : 4;
    if (s.thread_edge != 4 && s.thread_edge != kWide) {
      return TSM2_FAIL(cudaErrorInvalidValue, "no CUDA-core T kernel for the plan's thread blocks");
    }
    plan->launch = s.thread_edge == 8 ? &LaunchTCore<kWide> : &LaunchTCore<4>;
    plan->kernel_name = "Tsm2TKernel";
    return Status{};
  }

  template <int E>
  static Status LaunchTCore(const DeviceMatmul& p, const MatmulPlan& plan, cudaStream_t stream) {
    constexpr auto kKernel = &Tsm2TKernel<T, E>;
    int per_sm = 0;  // also opts the kernel in to kTMaxSmem bytes of shared memory
    TSM2_CUDA_RETURN_IF_ERROR(
        BlocksPerSm(reinterpret_cast<const void*>(kKernel), kTThreads, kTMaxSmem, &per_sm));
    const int smem = TSmemBytes(plan.split, sizeof(T));
    kKernel<<<plan.blocks, kTThreads, smem, stream>>>(Args(p, plan));
    TSM2_RETURN_IF_LAUNCH_FAILED("Tsm2TKernel");
    return Status{};
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
    const int smem = TSmemBytes(plan.split, sizeof(T));
    kernel<<<plan.blocks, kTThreads, smem, stream>>>(Args(p, plan));
    TSM2_RETURN_IF_LAUNCH_FAILED("the tensor-core T kernel");
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
    Tsm2SplitReduceKernel<T, kWarpsOverSplits>
        <<<blocks, kReduceThreads, 0, stream>>>(Args(p, plan), p.batch, discard);
    TSM2_RETURN_IF_LAUNCH_FAILED("Tsm2SplitReduceKernel");
    return Status{};
  }
};

}  // namespace tsm2

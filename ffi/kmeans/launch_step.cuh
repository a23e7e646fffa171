// Plans and launches the fused Lloyd step for one element type T: the
// kernel variant (the wide-row or the tensor-core step for f32 where they
// take the problem, else the CUDA-core step for T, k rounded up to kp and the
// row's vector class; plan.h), the persistent grid (in clusters where the
// plan splits d over blocks), and the fixed-order reduction of the
// partials. PlanKmeansStepWith resolves all of it once into a
// KmeansStepPlan; the variants' Launch only builds arguments and launches.
// Tune (plan.h KmeansTuning) is what the lab varies.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "ffi/common/device.h"
#include "ffi/common/status.h"
#include "ffi/kmeans/kernels/kmeans.cuh"
#include "ffi/kmeans/kernels/kmeans_mma.cuh"
#include "ffi/kmeans/kernels/kmeans_wide.cuh"
#include "ffi/kmeans/launcher.h"
#include "ffi/kmeans/plan.h"

namespace tsm2 {

// The kernel arguments every step variant shares; each adds its scheduling
// fields.
inline KmeansArgs KmeansCommonArgs(const DeviceKmeans& p) {
  KmeansArgs a{};
  a.x = p.x;
  a.c = p.c;
  a.w = p.w;
  a.labels = p.labels;
  a.mind = p.mind;
  a.partials = p.workspace;
  a.n = p.n;
  a.d = static_cast<int>(p.d);
  a.k = static_cast<int>(p.k);
  return a;
}

// The checked step's arguments (kernels/kmeans_row_check.cuh): its outputs
// zeroed on the stream, the threshold for a dot of e_dot and x.s of e_q units
// of rounding (row_check.h).
inline Status KmeansCheckSetup(const DeviceKmeans& p, int acc_size, double e_dot, double e_q,
                               cudaStream_t stream, KmeansCheckArgs* ck) {
  ck->faults = p.row_faults;
  ck->margin = p.row_margin;
  ck->inject = p.inject;
  KmeansRowTolerance(acc_size, e_dot, e_q, p.d, p.k, &ck->tau, &ck->eta);
  TSM2_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(p.row_faults, 0, sizeof(int32_t), stream));
  TSM2_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(p.row_margin, 0, sizeof(float), stream));
  return Status{};
}

// The fixed-order sum of plan.owners partials into sums, counts and inertia.
template <typename Acc>
Status KmeansReduce(const DeviceKmeans& p, const KmeansStepPlan& plan, cudaStream_t stream) {
  const int64_t elems = KmeansPartialElems(p.d, p.k);
  KmeansReduceKernel<Acc>
      <<<static_cast<unsigned>((elems + 31) / 32), 32 * kKmeansReduceSlices, 0, stream>>>(
          static_cast<const Acc*>(p.workspace), elems, plan.owners, p.k * p.d,
          static_cast<int>(p.k), static_cast<Acc*>(p.sums), static_cast<Acc*>(p.counts),
          static_cast<Acc*>(p.inertia));
  TSM2_RETURN_IF_LAUNCH_FAILED("KmeansReduceKernel");
  return Status{};
}

// Each step variant below gives its accumulator type, how many partials
// (owners) its persistent grid can keep resident, and how to launch its step
// kernel over plan.owners of them; PlanKmeansVariant does the rest for all.

// The f32 tensor-core step (kernels/kmeans_mma.cuh): DC the row class (64,
// 128 or 256 elements), MT the 16-centroid tiles, ROWS the rows of a tile.
template <int DC, int MT, int ROWS, int CHECK = 0>
struct KmeansMmaVariant {
  using Cfg = KmeansMmaConfig<DC, MT, ROWS, CHECK>;
  using Acc = float;
  static constexpr KmeansStep kStep = KmeansStep::kTensorCores;
  static constexpr const char* kName = "KmeansMmaStepKernel";

  static cudaError_t Resident(const DeviceKmeans& p, int sms, int64_t* cap) {
    int per_sm = 0;
    if (cudaError_t e =
            BlocksPerSm(reinterpret_cast<const void*>(&KmeansMmaStepKernel<DC, MT, ROWS, CHECK>),
                        Cfg::kThreads, Cfg::kSmemBytes, &per_sm);
        e != cudaSuccess) {
      return e;
    }
    const int64_t tiles = (p.n + Cfg::kRows - 1) / Cfg::kRows;
    *cap = std::min(tiles, static_cast<int64_t>(per_sm) * sms);
    return cudaSuccess;
  }

  static Status Launch(const DeviceKmeans& p, const KmeansStepPlan& plan, cudaStream_t stream) {
    KmeansArgs a = KmeansCommonArgs(p);
    a.tiles = (p.n + Cfg::kRows - 1) / Cfg::kRows;
    if constexpr (CHECK > 0) {
      // Dots: operands split in TF32 hi + lo (3 * 2^-20 = 48 u with the
      // dropped lo * lo), at most DC / 16 mma per accumulator chain, each
      // taken as 32 u of its inputs' absolute sum (tensor cores align and
      // truncate), and 8 more additions. x . s: a lane's DC / 4 fused
      // multiply-adds, the split-K add and two shuffles.
      const double e_dot = 56.0 + 32.0 * (DC / 16), e_q = DC / 4 + 3;
      TSM2_RETURN_IF_ERROR(KmeansCheckSetup(p, 4, e_dot, e_q, stream, &a.check));
    }
    KmeansMmaStepKernel<DC, MT, ROWS, CHECK>
        <<<static_cast<unsigned>(plan.owners), Cfg::kThreads, Cfg::kSmemBytes, stream>>>(a);
    TSM2_RETURN_IF_LAUNCH_FAILED("KmeansMmaStepKernel");
    return Status{};
  }
};

// The f32 tensor-core step for wide rows (kernels/kmeans_wide.cuh): one
// cluster of KmeansWideCluster(d) blocks per partial; CHECK > 0: the
// row-checked step (kernels/kmeans_row_check.cuh).
template <int CHECK = 0>
struct KmeansWideVariant {
  using Cfg = KmeansWideConfig<CHECK>;
  using Acc = float;
  static constexpr KmeansStep kStep = KmeansStep::kTensorCoresCluster;
  static constexpr const char* kName = "KmeansWideStepKernel";

  static cudaLaunchConfig_t Config(int clusters, int cl, cudaStream_t stream,
                                   cudaLaunchAttribute* attr) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>(clusters * cl));
    cfg.blockDim = dim3(Cfg::kThreads);
    cfg.dynamicSmemBytes = static_cast<size_t>(Cfg::kSmemBytes);
    cfg.stream = stream;
    attr->id = cudaLaunchAttributeClusterDimension;
    attr->val.clusterDim.x = static_cast<unsigned>(cl);
    attr->val.clusterDim.y = 1;
    attr->val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cfg;
  }

  static cudaError_t Resident(const DeviceKmeans& p, int sms, int64_t* cap) {
    const void* kernel = reinterpret_cast<const void*>(&KmeansWideStepKernel<CHECK>);
    int per_sm = 0;  // also opts the kernel in to its shared memory
    if (cudaError_t e = BlocksPerSm(kernel, Cfg::kThreads, Cfg::kSmemBytes, &per_sm);
        e != cudaSuccess) {
      return e;
    }
    const int cl = KmeansWideCluster(p.d);
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = Config(sms / cl, cl, nullptr, &attr);
    int clusters = 0;
    if (cudaError_t e =
            cudaOccupancyMaxActiveClusters(&clusters, &KmeansWideStepKernel<CHECK>, &cfg);
        e != cudaSuccess) {
      return e;
    }
    if (clusters < 1) return cudaErrorInvalidConfiguration;
    const int64_t tiles = (p.n + Cfg::kRows - 1) / Cfg::kRows;
    *cap = std::min<int64_t>(tiles, clusters);
    return cudaSuccess;
  }

  static Status Launch(const DeviceKmeans& p, const KmeansStepPlan& plan, cudaStream_t stream) {
    KmeansArgs a = KmeansCommonArgs(p);
    a.tiles = (p.n + Cfg::kRows - 1) / Cfg::kRows;
    if constexpr (CHECK > 0) {
      // Dots: operands split in TF32 hi + lo (48 u with the dropped
      // lo * lo); the cross terms' accumulator chains 16 mma over a math
      // warp's 64 columns, each taken as 32 u of its inputs' absolute sum;
      // then the hi * hi add, 8 math warps and up to kMaxCl ranks. x . s: a
      // control lane's 16 fused multiply-adds, the warp's 5 levels and the
      // ranks.
      const double e_dot = 48.0 + 32.0 * 16 + 1 + Cfg::kMathWarps + Cfg::kMaxCl;
      const double e_q = 16.0 + 5 + Cfg::kMaxCl;
      TSM2_RETURN_IF_ERROR(KmeansCheckSetup(p, 4, e_dot, e_q, stream, &a.check));
    }
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = Config(plan.owners, KmeansWideCluster(p.d), stream, &attr);
    TSM2_CUDA_RETURN_IF_ERROR(cudaLaunchKernelEx(&cfg, &KmeansWideStepKernel<CHECK>, a));
    TSM2_RETURN_IF_LAUNCH_FAILED("KmeansWideStepKernel");
    return Status{};
  }
};

// The CUDA-core step for element type T, k padded to KP, vector class CLS;
// CHECK > 0: the row-checked step (kernels/kmeans_row_check.cuh).
template <typename T, int KP, int CLS, int CHECK = 0>
struct KmeansVariant {
  using Cfg = KmeansConfig<T, KP, CLS, CHECK>;
  using Acc = AccType<T>;
  static constexpr KmeansPlan kP = Cfg::kP;
  static constexpr KmeansStep kStep = KmeansStep::kCudaCores;
  static constexpr const char* kName = "KmeansStepKernel";

  static const void* Kernel() {
    return reinterpret_cast<const void*>(&KmeansStepKernel<T, KP, CLS, CHECK>);
  }

  static cudaLaunchConfig_t Config(int blocks, cudaStream_t stream, cudaLaunchAttribute* attr) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>(blocks));
    cfg.blockDim = dim3(Cfg::kThreads);
    cfg.dynamicSmemBytes = static_cast<size_t>(kP.smem_bytes);
    cfg.stream = stream;
    attr->id = cudaLaunchAttributeClusterDimension;
    attr->val.clusterDim.x = Cfg::kCl;
    attr->val.clusterDim.y = 1;
    attr->val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = Cfg::kCl > 1 ? 1 : 0;
    return cfg;
  }

  // Partials the launch writes: blocks (local plans) or clusters.
  static cudaError_t Resident(const DeviceKmeans& p, int sms, int64_t* cap) {
    int per_sm = 0;
    if (cudaError_t e = BlocksPerSm(Kernel(), Cfg::kThreads, kP.smem_bytes, &per_sm);
        e != cudaSuccess) {
      return e;
    }
    int64_t resident = static_cast<int64_t>(std::min(per_sm, kKmeansMaxBlocksPerSm)) * sms;
    if constexpr (Cfg::kCl > 1) {
      int clusters = 0;
      cudaLaunchAttribute attr;
      const cudaLaunchConfig_t cfg = Config(Cfg::kCl * sms, nullptr, &attr);
      if (cudaError_t e =
              cudaOccupancyMaxActiveClusters(&clusters, &KmeansStepKernel<T, KP, CLS, CHECK>, &cfg);
          e != cudaSuccess) {
        return e;
      }
      if (clusters < 1) return cudaErrorInvalidConfiguration;
      resident = std::min<int64_t>(clusters, resident / Cfg::kCl);
    }
    *cap = std::min(KmeansMaxOwners(kP, p.n, sms), resident);
    return cudaSuccess;
  }

  static Status Launch(const DeviceKmeans& p, const KmeansStepPlan& plan, cudaStream_t stream) {
    const int itemsize = static_cast<int>(sizeof(T));
    KmeansArgs a = KmeansCommonArgs(p);
    a.tiles = KmeansTiles(kP, p.n);
    a.units = kP.local ? static_cast<int64_t>(plan.owners) * kKmeansWarps : plan.owners;
    a.nvd = static_cast<int>(KmeansRowVecs(itemsize, p.d));
    a.x_vec_ok =
        p.d % Cfg::kE == 0 && reinterpret_cast<uintptr_t>(p.x) % sizeof(typename Cfg::Raw) == 0;
    if constexpr (CHECK > 0) {
      // A lane's chain of J * E fused multiply-adds, the warp's butterfly
      // (5), the row's warps (nwc) and the cluster's blocks, for the dots
      // and x.s alike.
      const double chain = Cfg::kJ * Cfg::kE + 5 + Cfg::kNwc + Cfg::kCl;
      TSM2_RETURN_IF_ERROR(
          KmeansCheckSetup(p, static_cast<int>(sizeof(Acc)), chain, chain, stream, &a.check));
    }
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = Config(plan.owners * Cfg::kCl, stream, &attr);
    TSM2_CUDA_RETURN_IF_ERROR(cudaLaunchKernelEx(&cfg, &KmeansStepKernel<T, KP, CLS, CHECK>, a));
    TSM2_RETURN_IF_LAUNCH_FAILED("KmeansStepKernel");
    return Status{};
  }
};

// Plans variant V: partials it writes are what stays resident (and its plan
// allows) and no more than the workspace holds.
template <typename V>
Status PlanKmeansVariant(const DeviceKmeans& p, KmeansStepPlan* plan) {
  int sms = 0;
  TSM2_CUDA_RETURN_IF_ERROR(SmCount(&sms));
  int64_t cap = 0;
  TSM2_CUDA_RETURN_IF_ERROR(V::Resident(p, sms, &cap));
  const int64_t per_owner =
      KmeansPartialElems(p.d, p.k) * static_cast<int64_t>(sizeof(typename V::Acc));
  plan->owners =
      static_cast<int>(std::min(cap, static_cast<int64_t>(p.workspace_bytes) / per_owner));
  if (p.n > 0 && plan->owners < 1) {
    return TSM2_FAIL(cudaErrorInvalidValue, "the k-means workspace holds no partial");
  }
  plan->step = V::kStep;
  plan->kernel_name = V::kName;
  plan->launch = &V::Launch;
  plan->finish = &KmeansReduce<typename V::Acc>;
  return Status{};
}

// Only the CUDA-core variants that have a plan (KmeansChoosePlan) are
// instantiated.
template <typename T, int KP, int CLS, int CHECK>
Status PlanCudaCoreVariant(const DeviceKmeans& p, KmeansStepPlan* plan) {
  if constexpr (KmeansChoosePlan(static_cast<int>(sizeof(T)), KP, CLS, CHECK > 0).ok) {
    return PlanKmeansVariant<KmeansVariant<T, KP, CLS, CHECK>>(p, plan);
  } else {
    return TSM2_FAIL(cudaErrorInvalidValue, "no CUDA-core k-means variant for (d, k)");
  }
}

template <typename T, int KP, int CHECK>
Status PlanWithClass(const DeviceKmeans& p, int cls, KmeansStepPlan* plan) {
  switch (cls) {
    case 0:
      return PlanCudaCoreVariant<T, KP, 0, CHECK>(p, plan);
    case 1:
      return PlanCudaCoreVariant<T, KP, 1, CHECK>(p, plan);
    case 2:
      return PlanCudaCoreVariant<T, KP, 2, CHECK>(p, plan);
    case 3:
      return PlanCudaCoreVariant<T, KP, 3, CHECK>(p, plan);
    case 4:
      return PlanCudaCoreVariant<T, KP, 4, CHECK>(p, plan);
    case 5:
      return PlanCudaCoreVariant<T, KP, 5, CHECK>(p, plan);
    case 6:
      // Only f64 rows reach 2048 vectors at d <= kKmeansMaxD.
      if constexpr (sizeof(T) == 8) return PlanCudaCoreVariant<T, KP, 6, CHECK>(p, plan);
      return TSM2_FAIL(cudaErrorInvalidValue, "no k-means vector class 6 for this type");
    default:
      return TSM2_FAIL(cudaErrorInvalidValue, "no k-means vector class for d");
  }
}

// The f32 tensor-core step's variant: the row class (64, 128 or 256
// elements) and one or two 16-centroid tiles, with Tune's rows per tile for
// one tile.
template <typename Tune, int CHECK = 0>
Status PlanMmaVariant(const DeviceKmeans& p, KmeansStepPlan* plan) {
  const bool wide = p.d > 128, two = p.k > 16;
  constexpr int kOne = Tune::kOneTileRows, kShort = Tune::kOneTileRowsShort, kTwo = kKmeansMmaRows;
  if constexpr (Tune::kNarrow) {
    if (p.d <= 64) {
      return two ? PlanKmeansVariant<KmeansMmaVariant<64, 2, kTwo, CHECK>>(p, plan)
                 : PlanKmeansVariant<KmeansMmaVariant<64, 1, kShort, CHECK>>(p, plan);
    }
  }
  if (wide) {
    return two ? PlanKmeansVariant<KmeansMmaVariant<256, 2, kTwo, CHECK>>(p, plan)
               : PlanKmeansVariant<KmeansMmaVariant<256, 1, kOne, CHECK>>(p, plan);
  }
  return two ? PlanKmeansVariant<KmeansMmaVariant<128, 2, kTwo, CHECK>>(p, plan)
             : PlanKmeansVariant<KmeansMmaVariant<128, 1, kShort, CHECK>>(p, plan);
}

// CHECK > 0: the row-checked step (kernels/kmeans_row_check.cuh), 2 with its
// fault injection; p.row_faults and p.row_margin must be set.
template <typename T, typename Tune = KmeansTuning, int CHECK = 0>
Status PlanKmeansStepWith(const DeviceKmeans& p, KmeansStepPlan* plan) {
  *plan = KmeansStepPlan{};
  const int itemsize = static_cast<int>(sizeof(T));
  if (!KmeansSupported(itemsize, p.d, p.k) || p.n < 0) {
    return TSM2_FAIL(cudaErrorInvalidValue, "the fused k-means step does not take (d, k)");
  }
  int cc = 0, smem = 0;
  TSM2_CUDA_RETURN_IF_ERROR(ComputeCapability(&cc));
  TSM2_CUDA_RETURN_IF_ERROR(SmemPerBlockOptin(&smem));
  if (!KmeansRunsOn(itemsize, p.d, p.k, cc, smem)) {
    return TSM2_FAIL(cudaErrorInvalidDeviceFunction,
                     "the k-means plan for (d, k) needs clusters (sm_90) or more shared memory");
  }
  if constexpr (CHECK > 0) {
    if (p.row_faults == nullptr || p.row_margin == nullptr || (CHECK == 2 && p.inject == nullptr)) {
      return TSM2_FAIL(cudaErrorInvalidValue, "the checked k-means step needs its outputs");
    }
  }
  if constexpr (std::is_same_v<T, float>) {
    const bool aligned = reinterpret_cast<uintptr_t>(p.x) % 16 == 0;
    switch (KmeansStepFor<Tune>(itemsize, p.d, p.k, cc, smem, aligned)) {
      case KmeansStep::kTensorCoresCluster:
        return PlanKmeansVariant<KmeansWideVariant<CHECK>>(p, plan);
      case KmeansStep::kTensorCores:
        return PlanMmaVariant<Tune, CHECK>(p, plan);
      case KmeansStep::kCudaCores:
        break;
    }
  }
  const int cls = KmeansClass(itemsize, p.d);
  switch (KmeansKPad(p.k)) {
    case 4:
      return PlanWithClass<T, 4, CHECK>(p, cls, plan);
    case 8:
      return PlanWithClass<T, 8, CHECK>(p, cls, plan);
    case 16:
      return PlanWithClass<T, 16, CHECK>(p, cls, plan);
    case 32:
      return PlanWithClass<T, 32, CHECK>(p, cls, plan);
    default:
      return TSM2_FAIL(cudaErrorInvalidValue, "no k-means variant for k");
  }
}

// The checked planner's specializations for every element type at CHECK,
// one translation unit per CHECK (launch_step_checked.cu, _inject.cu).
#define TSM2_KMEANS_STEP_CHECKED_FOR(E, CHECK)                                          \
  template <>                                                                           \
  Status PlanKmeansStepChecked<E, CHECK>(const DeviceKmeans& p, KmeansStepPlan* plan) { \
    return PlanKmeansStepWith<CudaType<E>, KmeansTuning, CHECK>(p, plan);               \
  }
#define TSM2_KMEANS_STEP_CHECKED(CHECK)                \
  TSM2_KMEANS_STEP_CHECKED_FOR(ElemType::kF32, CHECK)  \
  TSM2_KMEANS_STEP_CHECKED_FOR(ElemType::kF64, CHECK)  \
  TSM2_KMEANS_STEP_CHECKED_FOR(ElemType::kBF16, CHECK) \
  TSM2_KMEANS_STEP_CHECKED_FOR(ElemType::kF16, CHECK)

}  // namespace tsm2

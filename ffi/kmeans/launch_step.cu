// Plans and launches the fused Lloyd step: picks the kernel variant (element
// type, k rounded up to kp, the row's vector class; kmeans_plan.h), sizes the
// persistent grid (in clusters where the plan splits d over blocks) and
// launches the step and then the fixed-order reduction of the partials.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "ffi/kmeans/kernels/kmeans.cuh"
#include "ffi/kmeans/kernels/kmeans_mma.cuh"
#include "ffi/kmeans/kernels/kmeans_wide.cuh"
#include "ffi/kmeans/launcher.h"
#include "ffi/common/device.h"

namespace tsm2 {
namespace {

cudaError_t SmCount(int* sms) {
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
  return cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, dev);
}

// The kernel arguments both steps share; each adds its scheduling fields.
KmeansArgs CommonArgs(const DeviceKmeans& p, void* workspace) {
  KmeansArgs a{};
  a.x = p.x;
  a.c = p.c;
  a.w = p.w;
  a.labels = p.labels;
  a.mind = p.mind;
  a.partials = workspace;
  a.n = p.n;
  a.d = static_cast<int>(p.d);
  a.k = static_cast<int>(p.k);
  return a;
}

// The fixed-order sum of `owners` partials into sums, counts and inertia.
template <typename Acc>
cudaError_t LaunchReduce(const DeviceKmeans& p, const void* workspace, int owners,
                         cudaStream_t stream) {
  const int64_t elems = KmeansPartialElems(p.d, p.k);
  KmeansReduceKernel<Acc>
      <<<static_cast<unsigned>((elems + 31) / 32), 32 * kKmeansReduceSlices, 0, stream>>>(
          static_cast<const Acc*>(workspace), elems, owners, p.k * p.d, static_cast<int>(p.k),
          static_cast<Acc*>(p.sums), static_cast<Acc*>(p.counts), static_cast<Acc*>(p.inertia));
  return cudaGetLastError();
}

// Each step variant below gives its accumulator type, how many partials
// (owners) its persistent grid can keep resident, and how to launch its step
// kernel over a given number of owners; PlanOwners and LaunchVariant do the
// rest for all of them.

// The f32 tensor-core step (kernels/kmeans_mma.cuh): DC the row class (128
// or 256 elements), MT the 16-centroid tiles, ROWS the rows of a tile.
template <int DC, int MT, int ROWS>
struct KmeansMmaVariant {
  using Cfg = KmeansMmaConfig<DC, MT, ROWS>;
  using Acc = float;

  static cudaError_t Resident(const DeviceKmeans& p, int sms, int64_t* cap) {
    int per_sm = 0;
    if (cudaError_t e =
            BlocksPerSm(reinterpret_cast<const void*>(&KmeansMmaStepKernel<DC, MT, ROWS>),
                        Cfg::kThreads, Cfg::kSmemBytes, &per_sm);
        e != cudaSuccess) {
      return e;
    }
    const int64_t tiles = (p.n + Cfg::kRows - 1) / Cfg::kRows;
    *cap = std::min(tiles, static_cast<int64_t>(per_sm) * sms);
    return cudaSuccess;
  }

  static cudaError_t Run(const DeviceKmeans& p, void* workspace, int owners, cudaStream_t stream) {
    KmeansArgs a = CommonArgs(p, workspace);
    a.tiles = (p.n + Cfg::kRows - 1) / Cfg::kRows;
    KmeansMmaStepKernel<DC, MT, ROWS>
        <<<static_cast<unsigned>(owners), Cfg::kThreads, Cfg::kSmemBytes, stream>>>(a);
    return cudaGetLastError();
  }
};

// The f32 tensor-core step for wide rows (kernels/kmeans_wide.cuh): one
// cluster of KmeansWideCluster(d) blocks per partial.
struct KmeansWideVariant {
  using Cfg = KmeansWideConfig;
  using Acc = float;

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
    const void* kernel = reinterpret_cast<const void*>(&KmeansWideStepKernel<>);
    int per_sm = 0;  // also opts the kernel in to its shared memory
    if (cudaError_t e = BlocksPerSm(kernel, Cfg::kThreads, Cfg::kSmemBytes, &per_sm);
        e != cudaSuccess) {
      return e;
    }
    const int cl = KmeansWideCluster(p.d);
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = Config(sms / cl, cl, nullptr, &attr);
    int clusters = 0;
    if (cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, &KmeansWideStepKernel<>, &cfg);
        e != cudaSuccess) {
      return e;
    }
    if (clusters < 1) return cudaErrorInvalidConfiguration;
    const int64_t tiles = (p.n + Cfg::kRows - 1) / Cfg::kRows;
    *cap = std::min<int64_t>(tiles, clusters);
    return cudaSuccess;
  }

  static cudaError_t Run(const DeviceKmeans& p, void* workspace, int owners, cudaStream_t stream) {
    KmeansArgs a = CommonArgs(p, workspace);
    a.tiles = (p.n + Cfg::kRows - 1) / Cfg::kRows;
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = Config(owners, KmeansWideCluster(p.d), stream, &attr);
    if (cudaError_t e = cudaLaunchKernelEx(&cfg, &KmeansWideStepKernel<>, a); e != cudaSuccess) {
      return e;
    }
    return cudaGetLastError();
  }
};

template <typename T, int KP, int CLS>
struct KmeansVariant {
  using Cfg = KmeansConfig<T, KP, CLS>;
  using Acc = AccType<T>;
  static constexpr KmeansPlan kP = Cfg::kP;

  static const void* Kernel() {
    return reinterpret_cast<const void*>(&KmeansStepKernel<T, KP, CLS>);
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
              cudaOccupancyMaxActiveClusters(&clusters, &KmeansStepKernel<T, KP, CLS>, &cfg);
          e != cudaSuccess) {
        return e;
      }
      if (clusters < 1) return cudaErrorInvalidConfiguration;
      resident = std::min<int64_t>(clusters, resident / Cfg::kCl);
    }
    *cap = std::min(KmeansMaxOwners(kP, p.n, sms), resident);
    return cudaSuccess;
  }

  static cudaError_t Run(const DeviceKmeans& p, void* workspace, int owners, cudaStream_t stream) {
    const int itemsize = static_cast<int>(sizeof(T));
    KmeansArgs a = CommonArgs(p, workspace);
    a.tiles = KmeansTiles(kP, p.n);
    a.units = kP.local ? static_cast<int64_t>(owners) * kKmeansWarps : owners;
    a.nvd = static_cast<int>(KmeansRowVecs(itemsize, p.d));
    a.x_vec_ok =
        p.d % Cfg::kE == 0 && reinterpret_cast<uintptr_t>(p.x) % sizeof(typename Cfg::Raw) == 0;
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = Config(owners * Cfg::kCl, stream, &attr);
    if (cudaError_t e = cudaLaunchKernelEx(&cfg, &KmeansStepKernel<T, KP, CLS>, a);
        e != cudaSuccess) {
      return e;
    }
    return cudaGetLastError();
  }
};

// Partials a launch of variant V writes: what stays resident (and its plan
// allows), and no more than the workspace holds.
template <typename V>
cudaError_t PlanOwners(const DeviceKmeans& p, size_t workspace_bytes, int* owners) {
  int sms = 0;
  if (cudaError_t e = SmCount(&sms); e != cudaSuccess) return e;
  int64_t cap = 0;
  if (cudaError_t e = V::Resident(p, sms, &cap); e != cudaSuccess) return e;
  const int64_t per_owner =
      KmeansPartialElems(p.d, p.k) * static_cast<int64_t>(sizeof(typename V::Acc));
  *owners = static_cast<int>(std::min(cap, static_cast<int64_t>(workspace_bytes) / per_owner));
  return cudaSuccess;
}

// The step of variant V, then the fixed-order reduction of its partials.
template <typename V>
cudaError_t LaunchVariant(const DeviceKmeans& p, void* workspace, size_t workspace_bytes,
                          cudaStream_t stream) {
  int owners = 0;
  if (cudaError_t e = PlanOwners<V>(p, workspace_bytes, &owners); e != cudaSuccess) return e;
  if (p.n > 0 && owners < 1) return cudaErrorInvalidValue;  // workspace too small
  if (owners > 0) {
    if (cudaError_t e = V::Run(p, workspace, owners, stream); e != cudaSuccess) return e;
  }
  return LaunchReduce<typename V::Acc>(p, workspace, owners, stream);
}

struct PlanOp {
  const DeviceKmeans& p;
  size_t workspace_bytes;
  int* owners;
  template <typename V>
  cudaError_t Run() const {
    return PlanOwners<V>(p, workspace_bytes, owners);
  }
};

struct LaunchOp {
  const DeviceKmeans& p;
  void* workspace;
  size_t workspace_bytes;
  cudaStream_t stream;
  template <typename V>
  cudaError_t Run() const {
    return LaunchVariant<V>(p, workspace, workspace_bytes, stream);
  }
};

// Only the variants that have a plan (KmeansChoosePlan) are instantiated.
template <typename T, int KP, int CLS, typename Op>
cudaError_t RunVariant(const Op& op) {
  if constexpr (KmeansChoosePlan(static_cast<int>(sizeof(T)), KP, CLS).ok) {
    return op.template Run<KmeansVariant<T, KP, CLS>>();
  } else {
    return cudaErrorInvalidValue;
  }
}

template <typename T, int KP, typename Op>
cudaError_t WithClass(int cls, const Op& op) {
  switch (cls) {
    case 0:
      return RunVariant<T, KP, 0>(op);
    case 1:
      return RunVariant<T, KP, 1>(op);
    case 2:
      return RunVariant<T, KP, 2>(op);
    case 3:
      return RunVariant<T, KP, 3>(op);
    case 4:
      return RunVariant<T, KP, 4>(op);
    case 5:
      return RunVariant<T, KP, 5>(op);
    case 6:
      // Only f64 rows reach 2048 vectors at d <= kKmeansMaxD.
      if constexpr (sizeof(T) == 8) return RunVariant<T, KP, 6>(op);
      return cudaErrorInvalidValue;
    default:
      return cudaErrorInvalidValue;
  }
}

// f32 rows the tensor-core step takes (aligned X, KmeansMmaTakes).
template <typename Op>
bool WithMmaVariant(const DeviceKmeans& p, const Op& op, cudaError_t* err) {
  if (!KmeansMmaTakes(4, p.d, p.k) || reinterpret_cast<uintptr_t>(p.x) % 16 != 0) return false;
  const bool wide = p.d > 128, two = p.k > 16;
  constexpr int kOne = kKmeansMmaOneTileRows, kTwo = kKmeansMmaRows;
  if (wide) {
    *err = two ? op.template Run<KmeansMmaVariant<256, 2, kTwo>>()
               : op.template Run<KmeansMmaVariant<256, 1, kOne>>();
  } else {
    *err = two ? op.template Run<KmeansMmaVariant<128, 2, kTwo>>()
               : op.template Run<KmeansMmaVariant<128, 1, kOne>>();
  }
  return true;
}

template <typename T, typename Op>
cudaError_t WithVariant(const DeviceKmeans& p, const Op& op) {
  const int itemsize = static_cast<int>(sizeof(T));
  if (!KmeansSupported(itemsize, p.d, p.k) || p.n < 0) return cudaErrorInvalidValue;
  if constexpr (std::is_same_v<T, float>) {
    if (KmeansWideTakes(4, p.d, p.k) && reinterpret_cast<uintptr_t>(p.x) % 16 == 0) {
      return op.template Run<KmeansWideVariant>();
    }
    cudaError_t err = cudaSuccess;
    if (WithMmaVariant(p, op, &err)) return err;
  }
  const int cls = KmeansClass(itemsize, p.d);
  switch (KmeansKPad(p.k)) {
    case 4:
      return WithClass<T, 4>(cls, op);
    case 8:
      return WithClass<T, 8>(cls, op);
    case 16:
      return WithClass<T, 16>(cls, op);
    case 32:
      return WithClass<T, 32>(cls, op);
    default:
      return cudaErrorInvalidValue;
  }
}

template <typename Op>
cudaError_t WithType(const DeviceKmeans& p, const Op& op) {
  switch (p.type) {
    case ElemType::kF32:
      return WithVariant<float>(p, op);
    case ElemType::kF64:
      return WithVariant<double>(p, op);
    case ElemType::kBF16:
      return WithVariant<__nv_bfloat16>(p, op);
    case ElemType::kF16:
      return WithVariant<__half>(p, op);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t PlanKmeansStep(const DeviceKmeans& p, size_t workspace_bytes, int* owners) {
  return WithType(p, PlanOp{p, workspace_bytes, owners});
}

cudaError_t LaunchKmeansStep(const DeviceKmeans& p, void* workspace, size_t workspace_bytes,
                             cudaStream_t stream) {
  return WithType(p, LaunchOp{p, workspace, workspace_bytes, stream});
}

#ifdef TSM2_KMW_TRACE
// Lab only: the wide step's phase cycles (kernels/kmeans_wide.cuh), then zeroed.
cudaError_t KmeansWideTrace(unsigned long long* out) {
  if (cudaError_t e = cudaMemcpyFromSymbol(out, g_kmw_trace, 16 * sizeof(unsigned long long));
      e != cudaSuccess) {
    return e;
  }
  unsigned long long zero[16] = {};
  return cudaMemcpyToSymbol(g_kmw_trace, zero, sizeof zero);
}
#endif

}  // namespace tsm2

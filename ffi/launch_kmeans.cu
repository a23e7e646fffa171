// Plans and launches the fused Lloyd step: picks the kernel variant (element
// type, k rounded up to kp, d rounded up to dc; kmeans_plan.h), sizes the
// persistent grid and launches the step and then the fixed-order reduction
// of the blocks' partials.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "ffi/kernels/kmeans.cuh"
#include "ffi/launch_kmeans.h"
#include "ffi/occupancy.h"

namespace tsm2 {
namespace {

template <typename T, int KP, int DC>
struct KmeansVariant {
  using Cfg = KmeansConfig<T, KP, DC>;
  using Acc = AccType<T>;

  static const void* Kernel() {
    return reinterpret_cast<const void*>(&KmeansStepKernel<T, KP, DC>);
  }

  static cudaError_t Plan(const DeviceKmeans& p, size_t workspace_bytes, int* blocks) {
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
    const int64_t tiles = (p.n + Cfg::kRows - 1) / Cfg::kRows;
    const int64_t per_block = KmeansPartialElems(p.d, p.k) * static_cast<int64_t>(sizeof(Acc));
    const int64_t by_workspace = static_cast<int64_t>(workspace_bytes) / per_block;
    const int64_t resident = static_cast<int64_t>(std::min(per_sm, kKmeansMaxBlocksPerSm)) * sms;
    *blocks = static_cast<int>(std::min({tiles, resident, by_workspace}));
    return cudaSuccess;
  }

  static cudaError_t Launch(const DeviceKmeans& p, void* workspace, size_t workspace_bytes,
                            cudaStream_t stream) {
    int blocks = 0;
    if (cudaError_t e = Plan(p, workspace_bytes, &blocks); e != cudaSuccess) return e;
    if (p.n > 0 && blocks < 1) return cudaErrorInvalidValue;  // workspace too small
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
    a.tiles = (p.n + Cfg::kRows - 1) / Cfg::kRows;
    a.blocks = blocks;
    a.nvd = static_cast<int>((p.d + kVec<T> - 1) / kVec<T>);
    a.x_vec_ok = p.d % kVec<T> == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0;
    a.l = KmeansLayoutFor(static_cast<int>(sizeof(T)), static_cast<int>(sizeof(Acc)), KP, DC, p.d);
    if (blocks > 0) {
      KmeansStepKernel<T, KP, DC><<<blocks, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(a);
      if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    }
    const int64_t elems = KmeansPartialElems(p.d, p.k);
    KmeansReduceKernel<Acc><<<static_cast<unsigned>((elems + 31) / 32), 256, 0, stream>>>(
        static_cast<const Acc*>(workspace), elems, blocks, p.k * p.d, static_cast<int>(p.k),
        static_cast<Acc*>(p.sums), static_cast<Acc*>(p.counts), static_cast<Acc*>(p.inertia));
    return cudaGetLastError();
  }
};

struct PlanOp {
  const DeviceKmeans& p;
  size_t workspace_bytes;
  int* blocks;
  template <typename V>
  cudaError_t Run() const {
    return V::Plan(p, workspace_bytes, blocks);
  }
};

struct LaunchOp {
  const DeviceKmeans& p;
  void* workspace;
  size_t workspace_bytes;
  cudaStream_t stream;
  template <typename V>
  cudaError_t Run() const {
    return V::Launch(p, workspace, workspace_bytes, stream);
  }
};

// Only the variants that fit (KmeansVariantFits) are instantiated.
template <typename T, int KP, int DC, typename Op>
cudaError_t RunVariant(const Op& op) {
  if constexpr (KmeansVariantFits(static_cast<int>(sizeof(T)), KP, DC)) {
    return op.template Run<KmeansVariant<T, KP, DC>>();
  } else {
    return cudaErrorInvalidValue;
  }
}

template <typename T, int KP, typename Op>
cudaError_t WithDClass(int dc, const Op& op) {
  switch (dc) {
    case 128:
      return RunVariant<T, KP, 128>(op);
    case 256:
      return RunVariant<T, KP, 256>(op);
    case 512:
      return RunVariant<T, KP, 512>(op);
    case 1024:
      return RunVariant<T, KP, 1024>(op);
    default:
      return cudaErrorInvalidValue;
  }
}

template <typename T, typename Op>
cudaError_t WithVariant(const DeviceKmeans& p, const Op& op) {
  const int itemsize = static_cast<int>(sizeof(T));
  if (!KmeansSupported(itemsize, p.d, p.k) || p.n < 0) return cudaErrorInvalidValue;
  const int dc = KmeansDClass(p.d);
  switch (KmeansKPad(p.k)) {
    case 4:
      return WithDClass<T, 4>(dc, op);
    case 8:
      return WithDClass<T, 8>(dc, op);
    case 16:
      return WithDClass<T, 16>(dc, op);
    case 32:
      return WithDClass<T, 32>(dc, op);
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

cudaError_t PlanKmeansStep(const DeviceKmeans& p, size_t workspace_bytes, int* blocks) {
  return WithType(p, PlanOp{p, workspace_bytes, blocks});
}

cudaError_t LaunchKmeansStep(const DeviceKmeans& p, void* workspace, size_t workspace_bytes,
                             cudaStream_t stream) {
  return WithType(p, LaunchOp{p, workspace, workspace_bytes, stream});
}

}  // namespace tsm2

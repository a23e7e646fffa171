// Plans and launches the k-means step for any k on the current device: the
// tiled assignment (kernels/kmeans_assign.cuh) and the sums by buckets
// (kernels/kmeans_sums.cuh), each instantiated for its element types.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>

#include "ffi/common/cuda_types.cuh"
#include "ffi/common/device.h"
#include "ffi/kmeans/kernels/kmeans_assign.cuh"
#include "ffi/kmeans/kernels/kmeans_assign_refine.cuh"
#include "ffi/kmeans/kernels/kmeans_assign_wgmma.cuh"
#include "ffi/kmeans/kernels/kmeans_sums.cuh"
#include "ffi/kmeans/launch_sums_sorted.cuh"
#include "ffi/kmeans/tiled_launcher.h"
#include "ffi/kmeans/tiled_plan.h"
#include "ffi/matmul/tensor_maps.h"

namespace tsm2 {
namespace {

// What the plans take from the device, asked once per device.
struct TiledDevice {
  int cc = 0;  // 10 * major + minor
  int sms = 0;
  int smem_optin = 0;   // dynamic shared memory a block may opt in to
  int smem_per_sm = 0;  // what an SM holds
};

Status QueryDevice(TiledDevice* out) {
  static std::mutex mu;
  static std::map<int, TiledDevice> cache;
  int dev = 0;
  TSM2_CUDA_RETURN_IF_ERROR(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(dev);
  if (it == cache.end()) {
    TiledDevice t;
    TSM2_CUDA_RETURN_IF_ERROR(ComputeCapability(&t.cc));  // JAX_TSM2_PRETEND_CC caps it
    TSM2_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&t.sms, cudaDevAttrMultiProcessorCount, dev));
    TSM2_CUDA_RETURN_IF_ERROR(
        cudaDeviceGetAttribute(&t.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    TSM2_CUDA_RETURN_IF_ERROR(
        cudaDeviceGetAttribute(&t.smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
    it = cache.emplace(dev, t).first;
  }
  *out = it->second;
  return Status{};
}

// Blocks of `kernel` an SM holds with `smem` bytes of dynamic shared memory
// (at least 1), after opting the kernel in to the device's most: asked once
// per (kernel, device, smem).
Status ResidentBlocks(const void* kernel, int threads, int64_t smem, const TiledDevice& dev,
                      int* out) {
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, int64_t>, int> cache;
  int id = 0;
  TSM2_CUDA_RETURN_IF_ERROR(cudaGetDevice(&id));
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(kernel, id, smem);
  auto it = cache.find(key);
  if (it == cache.end()) {
    TSM2_CUDA_RETURN_IF_ERROR(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dev.smem_optin));
    int blocks = 0;
    TSM2_CUDA_RETURN_IF_ERROR(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &blocks, kernel, threads, static_cast<size_t>(smem)));
    if (blocks < 1) return TSM2_FAIL(cudaErrorInvalidConfiguration, "no k-means block fits an SM");
    it = cache.emplace(key, blocks).first;
  }
  *out = it->second;
  return Status{};
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename T, bool kFast, bool kAsync>
Status LaunchAssignKernel(const KmeansAssignArgs& a, const KmeansAssignPlan& plan,
                          const TiledDevice& dev, cudaStream_t stream) {
  const void* kernel = reinterpret_cast<const void*>(&KmeansAssignKernel<T, kFast, kAsync>);
  int per_sm = 0;
  TSM2_RETURN_IF_ERROR(ResidentBlocks(kernel, kAssignThreads, plan.smem_bytes, dev, &per_sm));
  const int64_t grid = std::min<int64_t>(plan.items, int64_t{per_sm} * dev.sms);
  KmeansAssignKernel<T, kFast, kAsync><<<static_cast<unsigned>(grid), kAssignThreads,
                                         static_cast<size_t>(plan.smem_bytes), stream>>>(a);
  TSM2_RETURN_IF_LAUNCH_FAILED("KmeansAssignKernel");
  return Status{};
}

// Whether this build carries sm_90a machine code (CMakeLists.txt defines
// TSM2_KMEANS_WGMMA where CMAKE_CUDA_ARCHITECTURES lists 90a) and the GPU
// runs it: the warpgroup assignment's condition besides the operands'.
constexpr bool kBuiltForSm90a =
#if defined(TSM2_KMEANS_WGMMA)
    true;
#else
    false;
#endif

// Whether the build, the GPU and X allow the warpgroup assignment (f32 in the
// TF32 mode, bf16, f16): X 16-byte aligned, dimensions the tensor maps'
// 32-bit coordinates hold, a plan that fits the GPU's shared memory.
template <typename T>
bool AssignWgRuns(const void* x, int64_t n, int64_t d, int64_t k, const KmeansAssignPlan& plan,
                  const TiledDevice& dev) {
  constexpr int kItem = static_cast<int>(sizeof(T));
  return kBuiltForSm90a && dev.cc == 90 && Aligned16(x) && RowTensorMapFits(kItem, 1, n, d) &&
         RowTensorMapFits(kItem, 1, k, d) && KmeansAssignWgPlanOf(plan, dev.smem_optin).ok;
}

// The warpgroup assignment where AssignWgRuns and `c`, the centroids the
// products read (for f32, the rounded copy), allow it. Sets *done. With
// kGap it writes labels, and for KmeansRefineKernel each row's gaps to its
// second and third lowest keys and its second's centroid into `refine`
// (laid out by `layout`), no distances.
template <typename T, bool kGap = false>
Status LaunchAssignWg(const KmeansAssignArgs& base, const void* c, const KmeansAssignPlan& plan,
                      const TiledDevice& dev, cudaStream_t stream, bool* done,
                      const KmeansRefineLayout* layout = nullptr, char* refine = nullptr) {
  *done = false;
  if (c == nullptr || !Aligned16(c) ||
      !AssignWgRuns<T>(base.x, base.n, base.d, base.k, plan, dev)) {
    return Status{};
  }
  constexpr int kItem = static_cast<int>(sizeof(T));
  const KmeansAssignWgPlan wp = KmeansAssignWgPlanOf(plan, dev.smem_optin);
  KmeansAssignWgArgs w{};
  w.a = base;
  if (layout != nullptr) {
    w.gap2 = reinterpret_cast<float*>(refine + layout->off_gap2);
    w.gap3 = reinterpret_cast<float*>(refine + layout->off_gap3);
    w.runner_up = reinterpret_cast<int32_t*>(refine + layout->off_runner_up);
    w.norms_max = reinterpret_cast<const float*>(refine + layout->off_norms);
  }
  w.a.stages = wp.stages;
  w.a.resident = wp.resident;
  w.a.res_slots = wp.res_slots;
  TSM2_CUDA_RETURN_IF_ERROR(
      EncodeRowTensorMap(&w.x_map, MapType<T>(), kItem, base.x, 1, base.n, base.d, kAssignRows));
  TSM2_CUDA_RETURN_IF_ERROR(
      EncodeRowTensorMap(&w.c_map, MapType<T>(), kItem, c, 1, base.k, base.d, kAssignCents));
  const void* kernel = reinterpret_cast<const void*>(&KmeansAssignWgKernel<T, kGap>);
  int per_sm = 0;
  TSM2_RETURN_IF_ERROR(ResidentBlocks(kernel, kAssignWgThreads, wp.smem_bytes, dev, &per_sm));
  const int64_t grid = std::min<int64_t>(plan.items, int64_t{per_sm} * dev.sms);
  KmeansAssignWgKernel<T, kGap><<<static_cast<unsigned>(grid), kAssignWgThreads,
                                  static_cast<size_t>(wp.smem_bytes), stream>>>(w);
  TSM2_RETURN_IF_LAUNCH_FAILED("KmeansAssignWgKernel");
  *done = true;
  return Status{};
}

// The refinement of the warpgroup kernel's TF32 ranking (kGap): every row's
// exact distance, close calls between two centroids settled by one more exact
// dot, and the rows with more ranked again against every centroid.
Status LaunchRefine(const KmeansRefineArgs& r, const TiledDevice& dev, cudaStream_t stream) {
  const int64_t row_blocks = std::min<int64_t>(CeilDiv(r.n * r.lanes, 256), int64_t{8} * dev.sms);
  KmeansRefineKernel<<<static_cast<unsigned>(row_blocks), 256, 0, stream>>>(r);
  TSM2_RETURN_IF_LAUNCH_FAILED("KmeansRefineKernel");
  const int64_t blocks = std::min<int64_t>(CeilDiv(r.n, kRecomputeRows), int64_t{4} * dev.sms);
  KmeansRecomputeKernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(r);
  TSM2_RETURN_IF_LAUNCH_FAILED("KmeansRecomputeKernel");
  const int64_t write_blocks = std::min<int64_t>(CeilDiv(r.n, 256), int64_t{2} * dev.sms);
  KmeansRecomputeWriteKernel<<<static_cast<unsigned>(write_blocks), 256, 0, stream>>>(r);
  TSM2_RETURN_IF_LAUNCH_FAILED("KmeansRecomputeWriteKernel");
  return Status{};
}

template <typename T>
Status LaunchAssign(const DeviceKmeansAssign& p, cudaStream_t stream) {
  if (p.n == 0) return Status{};
  TiledDevice dev;
  TSM2_RETURN_IF_ERROR(QueryDevice(&dev));
  const int itemsize = static_cast<int>(sizeof(T));
  KmeansAssignPlan plan = KmeansAssignPlanOf(itemsize, p.n, p.d, p.k, dev.sms, dev.smem_optin);
  if (!plan.ok) return TSM2_FAIL(cudaErrorInvalidValue, "no k-means assignment plan for (d, k)");
  if (static_cast<int64_t>(p.workspace_bytes) < plan.off_split) {
    return TSM2_FAIL(cudaErrorInvalidValue, "the k-means assignment workspace is too small");
  }
  if (static_cast<int64_t>(p.workspace_bytes) < plan.workspace_bytes) {
    // Sized for fewer SMs than this device has: as many splits as it holds.
    const int64_t fit = (static_cast<int64_t>(p.workspace_bytes) - plan.off_split) / (p.n * 8);
    plan = KmeansAssignPlanOf(itemsize, p.n, p.d, p.k, dev.sms, dev.smem_optin, fit < 2 ? 1 : fit);
  }
  char* ws = static_cast<char*>(p.workspace);
  float* csq = reinterpret_cast<float*>(ws + plan.off_csq);
  int32_t* flags = reinterpret_cast<int32_t*>(ws + plan.off_flags);
  float* split_key = reinterpret_cast<float*>(ws + plan.off_split);
  int32_t* split_idx = reinterpret_cast<int32_t*>(ws + plan.off_split + plan.splits * p.n * 4);
  const T* x = static_cast<const T*>(p.x);
  const T* c = static_cast<const T*>(p.c);

  // The warpgroup kernel's operands: f32 in the TF32 mode reads the rounded
  // copy of the centroids, made only where that kernel runs and the
  // workspace holds it; bf16/f16 the centroids. f32 in the default mode
  // runs there too, refined to f32 accuracy (kmeans_assign_refine.cuh),
  // where each row tile is one item (a row's three lowest keys need every
  // centroid tile), the workspace holds the copy and the refinement's
  // arrays, and k spans two centroid tiles or more: with one, every row
  // takes the ranking's slow path (three lowest of a tile that beats the
  // row's third) while the split products cost least (1e6 x 64, k = 64,
  // H100: 0.85 ms an iteration refined against 0.62). Elsewhere f32 takes
  // the split products of KmeansAssignKernel.
  const int64_t round_at = CeilDiv(plan.workspace_bytes, 16) * 16;
  const int64_t room = static_cast<int64_t>(p.workspace_bytes) - round_at;
  const bool refine = std::is_same_v<T, float> && p.precision == KmeansPrecision::kFloat32 &&
                      plan.splits == 1 && plan.ctiles >= 2 && Aligned16(p.c) &&
                      room >= KmeansAssignRefineBytes(p.n, p.k, p.d) &&
                      AssignWgRuns<T>(p.x, p.n, p.d, p.k, plan, dev);
  const bool wg_mode =
      refine || ((!std::is_same_v<T, float> || p.precision == KmeansPrecision::kTensorFloat32) &&
                 AssignWgRuns<T>(p.x, p.n, p.d, p.k, plan, dev));
  const void* wg_c = std::is_same_v<T, float> ? nullptr : p.c;
  float* c_round = nullptr;
  if (std::is_same_v<T, float> && wg_mode && room >= p.k * p.d * 4) {
    c_round = reinterpret_cast<float*>(ws + round_at);
    wg_c = c_round;
  }
  const KmeansRefineLayout rl = KmeansRefineLayoutOf(p.n);
  char* refine_ws = ws + round_at + KmeansAssignTf32CopyBytes(p.k, p.d);
  int32_t* count = reinterpret_cast<int32_t*>(refine_ws + rl.off_count);
  float* norms_max = reinterpret_cast<float*>(refine_ws + rl.off_norms);

  TSM2_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(flags, 0, kAssignFlagsBytes, stream));
  if (refine) TSM2_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(count, 0, 16, stream));
  const int64_t csq_blocks = std::min<int64_t>(CeilDiv(p.k, 8), int64_t{4} * dev.sms);
  KmeansCsqKernel<T><<<static_cast<unsigned>(csq_blocks), 256, 0, stream>>>(
      c, p.k, static_cast<int>(p.d), csq, flags, c_round, refine ? norms_max : nullptr);
  TSM2_RETURN_IF_LAUNCH_FAILED("KmeansCsqKernel");

  KmeansAssignArgs a{};
  a.x = p.x;
  a.c = p.c;
  a.x_sq = p.x_sq;
  a.csq = csq;
  a.flags = flags;
  a.labels = p.labels;
  a.mind = p.mind;
  a.split_key = split_key;
  a.split_idx = split_idx;
  a.n = p.n;
  a.d = static_cast<int>(p.d);
  a.k = static_cast<int>(p.k);
  a.qd = static_cast<int>(plan.qd);
  a.ctiles = static_cast<int>(plan.ctiles);
  a.splits = static_cast<int>(plan.splits);
  a.items = plan.items;
  a.stages = plan.stages;
  a.res_slots = plan.res_slots;
  a.resident = plan.resident;
  const bool async = (p.d * itemsize) % 16 == 0 && Aligned16(p.x) && Aligned16(p.c);
  // f32's split products stay on KmeansAssignKernel: they need each
  // operand's high and low TF32 parts, which the boxes do not hold.
  bool done = false;
  if (refine) {
    if constexpr (std::is_same_v<T, float>) {
      // Where it does not run after all, the split products below do.
      TSM2_RETURN_IF_ERROR(
          (LaunchAssignWg<T, true>(a, wg_c, plan, dev, stream, &done, &rl, refine_ws)));
      if (done) {
        KmeansRefineArgs r{};
        r.x = static_cast<const float*>(p.x);
        r.c = static_cast<const float*>(p.c);
        r.x_sq = p.x_sq;
        r.csq = csq;
        r.gap2 = reinterpret_cast<const float*>(refine_ws + rl.off_gap2);
        r.gap3 = reinterpret_cast<const float*>(refine_ws + rl.off_gap3);
        r.runner_up = reinterpret_cast<const int32_t*>(refine_ws + rl.off_runner_up);
        r.norms_max = norms_max;
        r.labels = p.labels;
        r.mind = p.mind;
        r.list = reinterpret_cast<int32_t*>(refine_ws + rl.off_list);
        r.count = count;
        r.best = reinterpret_cast<unsigned long long*>(refine_ws + rl.off_best);
        r.n = p.n;
        r.d = static_cast<int>(p.d);
        r.k = static_cast<int>(p.k);
        r.lanes = KmeansRefineLanes(r.d);
        TSM2_RETURN_IF_ERROR(LaunchRefine(r, dev, stream));
      }
    }
  } else if (wg_mode) {
    TSM2_RETURN_IF_ERROR(LaunchAssignWg<T>(a, wg_c, plan, dev, stream, &done));
  }
  using Launch = Status (*)(const KmeansAssignArgs&, const KmeansAssignPlan&, const TiledDevice&,
                            cudaStream_t);
  Launch launch =
      async ? &LaunchAssignKernel<T, false, true> : &LaunchAssignKernel<T, false, false>;
  if constexpr (std::is_same_v<T, float>) {
    if (p.precision == KmeansPrecision::kTensorFloat32) {
      launch = async ? &LaunchAssignKernel<T, true, true> : &LaunchAssignKernel<T, true, false>;
    }
  }
  if (!done) TSM2_RETURN_IF_ERROR(launch(a, plan, dev, stream));
  const unsigned row_blocks =
      static_cast<unsigned>(std::min<int64_t>(CeilDiv(p.n, 256), int64_t{4} * dev.sms));
  if (plan.splits > 1) {
    KmeansSplitMergeKernel<<<row_blocks, 256, 0, stream>>>(
        split_key, split_idx, p.x_sq, p.n, static_cast<int>(plan.splits), p.labels, p.mind);
    TSM2_RETURN_IF_LAUNCH_FAILED("KmeansSplitMergeKernel");
  }
  KmeansFixupKernel<T><<<row_blocks, 256, 0, stream>>>(
      x, c, p.x_sq, csq, flags, p.n, static_cast<int>(p.d), p.k, p.labels, p.mind);
  TSM2_RETURN_IF_LAUNCH_FAILED("KmeansFixupKernel");
  return Status{};
}

template <typename T>
Status LaunchSums(const DeviceKmeansSums& p, cudaStream_t stream) {
  using Acc = AccType<T>;
  constexpr int kAcc = static_cast<int>(sizeof(Acc));
  TiledDevice dev;
  TSM2_RETURN_IF_ERROR(QueryDevice(&dev));
  KmeansSumsPlan plan = KmeansSumsPlanWith(kAcc, p.n, p.d, p.k, p.bucket, p.chunks, p.piece);
  if (plan.ok && plan.piece > 0 &&
      plan.workspace_bytes <= static_cast<int64_t>(p.workspace_bytes)) {
    return LaunchSumsSorted<T>(p, plan, stream);
  }
  // The attributes' bucket plan where this device holds it, else this
  // device's largest bucket in one chunk (no partials): the same sums in
  // another order.
  if (!plan.ok || plan.piece > 0 || plan.smem_bytes > dev.smem_optin ||
      plan.workspace_bytes > static_cast<int64_t>(p.workspace_bytes)) {
    const int64_t per = KmeansSumsSmem(kAcc, p.d, 1) - kSumsStaticSmem;
    const int64_t bucket = (dev.smem_optin - kSumsStaticSmem) / per;
    if (bucket < 1 || CeilDiv(p.k, bucket) > 65535) {
      return TSM2_FAIL(cudaErrorInvalidValue,
                       "the k-means sums workspace is smaller than the plan's "
                       "(size it by kmeans_tiled_plan's sums_workspace_bytes)");
    }
    plan = KmeansSumsPlanWith(kAcc, p.n, p.d, p.k, bucket, 1);
  }
  KmeansSumsArgs a{};
  a.x = p.x;
  a.w = p.w;
  a.labels = p.labels;
  a.mind = p.mind;
  a.sums = p.sums;
  a.counts = p.counts;
  a.inertia = p.inertia;
  a.partials = p.workspace;
  a.n = p.n;
  a.k = p.k;
  a.d = static_cast<int>(p.d);
  a.bucket = static_cast<int>(plan.bucket);
  a.chunks = static_cast<int>(plan.chunks);
  a.groups = plan.groups;
  a.q = static_cast<int>(KmeansSumsChunks(kAcc, p.d));
  constexpr int kV = 16 / kAcc;
  a.x_vec = p.d % kV == 0 && reinterpret_cast<uintptr_t>(p.x) % (kV * sizeof(T)) == 0;
  const void* kernel = reinterpret_cast<const void*>(&KmeansSumsKernel<T, Acc>);
  int per_sm = 0;  // opts the kernel in to its shared memory
  TSM2_RETURN_IF_ERROR(ResidentBlocks(kernel, kSumsThreads, plan.smem_bytes, dev, &per_sm));
  const dim3 grid(static_cast<unsigned>(plan.chunks), static_cast<unsigned>(plan.buckets));
  KmeansSumsKernel<T, Acc><<<grid, kSumsThreads, static_cast<size_t>(plan.smem_bytes), stream>>>(a);
  TSM2_RETURN_IF_LAUNCH_FAILED("KmeansSumsKernel");
  if (plan.chunks > 1) {
    const int64_t total = p.k * p.d + p.k + 1;
    const unsigned blocks =
        static_cast<unsigned>(std::min<int64_t>(CeilDiv(total, 256), int64_t{8} * dev.sms));
    KmeansSumsReduceKernel<Acc><<<blocks, 256, 0, stream>>>(
        static_cast<const Acc*>(p.workspace), p.k, static_cast<int>(p.d), plan.bucket, plan.chunks,
        static_cast<Acc*>(p.sums), static_cast<Acc*>(p.counts), static_cast<Acc*>(p.inertia));
    TSM2_RETURN_IF_LAUNCH_FAILED("KmeansSumsReduceKernel");
  }
  return Status{};
}

}  // namespace

template <>
Status LaunchKmeansAssign<ElemType::kF32>(const DeviceKmeansAssign& p, cudaStream_t stream) {
  return LaunchAssign<float>(p, stream);
}
template <>
Status LaunchKmeansAssign<ElemType::kBF16>(const DeviceKmeansAssign& p, cudaStream_t stream) {
  return LaunchAssign<CudaType<ElemType::kBF16>>(p, stream);
}
template <>
Status LaunchKmeansAssign<ElemType::kF16>(const DeviceKmeansAssign& p, cudaStream_t stream) {
  return LaunchAssign<CudaType<ElemType::kF16>>(p, stream);
}

template <>
Status LaunchKmeansSums<ElemType::kF32>(const DeviceKmeansSums& p, cudaStream_t stream) {
  return LaunchSums<float>(p, stream);
}
template <>
Status LaunchKmeansSums<ElemType::kF64>(const DeviceKmeansSums& p, cudaStream_t stream) {
  return LaunchSums<double>(p, stream);
}
template <>
Status LaunchKmeansSums<ElemType::kBF16>(const DeviceKmeansSums& p, cudaStream_t stream) {
  return LaunchSums<CudaType<ElemType::kBF16>>(p, stream);
}
template <>
Status LaunchKmeansSums<ElemType::kF16>(const DeviceKmeansSums& p, cudaStream_t stream) {
  return LaunchSums<CudaType<ElemType::kF16>>(p, stream);
}

}  // namespace tsm2

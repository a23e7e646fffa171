// Plans and launches the tile families, TSM2R and TSM2L, for one element
// type: the R tile (kernels/tsm2.cuh), the L tile (kernels/tsm2l.cuh) and
// TSM2L's row-per-thread kernel (kernels/row_per_thread.cuh), each for the
// n-tiles of tiles.h. A variant's Plan derives the ring depth and the grid
// from the device and stores its Launch in the MatmulPlan; the planner
// (plan.cuh PlanTiles) picks the variant.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <utility>

#include "ffi/common/device.h"
#include "ffi/common/status.h"
#include "ffi/matmul/kernels/row_per_thread.cuh"
#include "ffi/matmul/kernels/tsm2.cuh"
#include "ffi/matmul/kernels/tsm2_mma.cuh"
#include "ffi/matmul/kernels/tsm2_mma_tma.cuh"
#include "ffi/matmul/kernels/tsm2l.cuh"
#include "ffi/matmul/launcher.h"
#include "ffi/matmul/tensor_maps.h"
#include "ffi/matmul/tiles.h"

namespace tsm2 {

// What the streaming plans ask of the device, once per device.
struct StreamDevice {
  int sm_count = 0;
  int max_smem = 0;        // dynamic shared memory one block may opt in to
  double bytes_per_s = 0;  // DRAM bandwidth the driver reports the parts for
};

// Where the driver reports no memory clock or bus width (some virtualized
// devices), a bandwidth per SM at the high end of today's HBM parts, so the
// ring errs on the deep side.
constexpr double kFallbackBytesPerSmPerS = 40e9;

inline cudaError_t GetStreamDevice(StreamDevice* out) {
  static std::mutex mu;
  static std::map<int, StreamDevice> cache;
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(dev); it != cache.end()) {
    *out = it->second;
    return cudaSuccess;
  }
  StreamDevice d;
  int clock_khz = 0, bus_bits = 0;
  if (cudaError_t e = SmCount(&d.sm_count); e != cudaSuccess) return e;
  if (cudaError_t e =
          cudaDeviceGetAttribute(&d.max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
      e != cudaSuccess) {
    return e;
  }
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    clock_khz = bus_bits = 0;
  }
  // Double data rate: two transfers of the bus width per memory clock.
  d.bytes_per_s = clock_khz > 0 && bus_bits > 0 ? 2.0 * clock_khz * 1e3 * bus_bits / 8
                                                : kFallbackBytesPerSmPerS * d.sm_count;
  cache[dev] = d;
  *out = d;
  return cudaSuccess;
}

// Blocks per SM of `kernel` at `threads` threads and `smem` bytes of dynamic
// shared memory, cached per kernel, device and size; the first query of a
// kernel on a device opts it in to `max_smem` bytes.
inline cudaError_t StreamBlocksPerSm(const void* kernel, int threads, int smem, int max_smem,
                                     int* out) {
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, int, int>, int> cache;
  static std::set<std::pair<const void*, int>> opted_in;
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(kernel, dev, threads, smem);
  if (auto it = cache.find(key); it != cache.end()) {
    *out = it->second;
    return cudaSuccess;
  }
  if (opted_in.insert({kernel, dev}).second) {
    if (cudaError_t e =
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem);
        e != cudaSuccess) {
      opted_in.erase({kernel, dev});
      return e;
    }
  }
  int blocks = 0;
  if (cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem);
      e != cudaSuccess) {
    return e;
  }
  cache[key] = blocks;
  *out = blocks;
  return cudaSuccess;
}

// The ring depth for a streaming kernel on device `dev` (tiles.h
// ChooseStages): `fixed` and `per_stage` bytes of shared memory, `data`
// bytes of A per stage. out->stages is 0 where two stages do not fit.
// Cached per kernel, device and sizes: the handler plans every call.
inline Status PlanStages(const void* kernel, int threads, int fixed, int per_stage, int64_t data,
                         const StreamDevice& dev, StageChoice* out) {
  using Key = std::tuple<const void*, int, int, int, int, int64_t>;
  static std::mutex mu;
  static std::map<Key, StageChoice> cache;
  int device = 0;
  TSM2_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  const Key key{kernel, device, threads, fixed, per_stage, data};
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(key); it != cache.end()) {
      *out = it->second;
      return Status{};
    }
  }
  cudaError_t err = cudaSuccess;
  auto occupancy = [&](int smem) {
    int blocks = 0;
    if (err == cudaSuccess) err = StreamBlocksPerSm(kernel, threads, smem, dev.max_smem, &blocks);
    return err == cudaSuccess ? blocks : 0;
  };
  *out = ChooseStages(fixed, per_stage, data, InFlightTarget(dev.bytes_per_s, dev.sm_count),
                      dev.max_smem, occupancy);
  TSM2_CUDA_RETURN_IF_ERROR(err);
  std::lock_guard<std::mutex> lock(mu);
  cache[key] = *out;
  return Status{};
}

// The streaming tiles copy A as 16-byte vectors from 16-byte aligned
// addresses; a misaligned A would have its first vector start before the
// buffer. XLA's buffers are always aligned.
inline Status CheckAligned(const DeviceMatmul& p) {
  if (reinterpret_cast<uintptr_t>(p.a) % 16 != 0) {
    return TSM2_FAIL(cudaErrorInvalidValue, "the streaming tiles need A 16-byte aligned");
  }
  return Status{};
}

// Whether rows of A are whole 16-byte vectors (and A aligned): the tiles
// then read them 16 bytes at a time.
template <typename T>
bool VecRowsOf(const DeviceMatmul& p) {
  return p.k * static_cast<int64_t>(sizeof(T)) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(p.a) % 16 == 0;
}

inline int OutSize(const DeviceMatmul& p, int itemsize) { return p.out_f32 ? 4 : itemsize; }

// --- TSM2R -------------------------------------------------------------------

// How an R tile computes and fills its ring.
enum class RTileKind {
  kCore,    // CUDA-core FMAs, cp.async ring (kernels/tsm2.cuh)
  kMma,     // tensor cores, cp.async ring (kernels/tsm2_mma.cuh)
  kMmaTma,  // tensor cores, tensor-map ring (kernels/tsm2_mma_tma.cuh)
};

// An R tile of kind kKind. The tensor-core tiles' workspace holds B's stage
// images first (Tsm2MmaImageKernel writes them before the tile runs); the
// partial sums of split tiles follow.
template <typename T, int NT, typename Cfg, RTileKind kKind>
struct RTileVariant {
  static constexpr int kRows = Cfg::kRows;
  static constexpr bool kMma = kKind != RTileKind::kCore;

  static const void* Kernel() {
    if constexpr (kKind == RTileKind::kMmaTma) {
      return reinterpret_cast<const void*>(&Tsm2MmaTmaKernel<T, NT, Cfg>);
    } else if constexpr (kMma) {
      return reinterpret_cast<const void*>(&Tsm2MmaKernel<T, NT, Cfg>);
    } else {
      return reinterpret_cast<const void*>(&Tsm2Kernel<T, NT, Cfg>);
    }
  }
  static const char* KernelName() {
    return kKind == RTileKind::kMmaTma ? "Tsm2MmaTmaKernel" : kMma ? "Tsm2MmaKernel" : "Tsm2Kernel";
  }

  static int RowBytes(const DeviceMatmul& p) {
    return RStageRowBytes(Cfg::kSegBytes, Cfg::kVecRows,
                          p.k * static_cast<int64_t>(sizeof(T)) % 16);
  }
  // Shared memory of one stage of A, and what a block needs besides its stages.
  static int AStageBytes(const DeviceMatmul& p) {
    if constexpr (kKind == RTileKind::kMmaTma) {
      return Cfg::kAStageBytes;
    } else {
      return RStageBytes(kRows, RowBytes(p));
    }
  }
  static int FixedBytes() {
    if constexpr (kKind == RTileKind::kMmaTma) {
      return Cfg::kFixedBytes;
    } else {
      return Cfg::kRedBytes;
    }
  }
  static int64_t BBatches(const DeviceMatmul& p) { return p.b_batch_stride == 0 ? 1 : p.batch; }
  // Workspace bytes ahead of the partial sums (a multiple of 256).
  static int64_t PartialsOffset(const DeviceMatmul& p) {
    return kMma ? RMmaBImageBytes(BBatches(p), p.k, p.n, sizeof(T)) : 0;
  }

  static Tsm2Args Args(const DeviceMatmul& p, int64_t blocks_hint, int stages) {
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
    a.stages = stages;
    a.a_row_bytes = RowBytes(p);
    a.a_stage_bytes = RStageBytes(kRows, a.a_row_bytes);
    a.out = MakeOutLayout(p.n, OutSize(p, sizeof(T)), p.c);
    a.out_wide = MakeOutLayout(NT, OutSize(p, sizeof(T)), nullptr);
    a.out_f32 = p.out_f32;
    a.b_trans = p.layout == Layout::kNT;
    return a;
  }

  static Status Plan(const DeviceMatmul& p, MatmulPlan* plan) {
    TSM2_RETURN_IF_ERROR(CheckAligned(p));
    const int64_t offset = PartialsOffset(p);
    if (static_cast<int64_t>(p.workspace_bytes) < offset) {
      return TSM2_FAIL(cudaErrorInvalidValue,
                       "the workspace is smaller than B's images for the tensor-core R tile "
                       "(size it with workspace_bytes)");
    }
    const int per_stage = AStageBytes(p) + Cfg::kBStageBytes;
    const int64_t data =
        kRows * std::min<int64_t>(Cfg::kSegBytes, p.k * static_cast<int64_t>(sizeof(T)));
    StreamDevice dev;
    TSM2_CUDA_RETURN_IF_ERROR(GetStreamDevice(&dev));
    StageChoice s;
    TSM2_RETURN_IF_ERROR(
        PlanStages(Kernel(), Cfg::kThreads, FixedBytes(), per_stage, data, dev, &s));
    if (s.stages == 0) {
      return TSM2_FAIL(cudaErrorInvalidConfiguration, "two stages of the R tile do not fit");
    }
    plan->sm_count = dev.sm_count;
    int64_t blocks = static_cast<int64_t>(s.blocks_per_sm) * dev.sm_count;
    const size_t per_block = static_cast<size_t>(2) * kRows * NT * sizeof(AccType<T>);
    if (Args(p, blocks, s.stages).chunks > 1) {
      // Split tiles need workspace; use no more blocks than it can serve (one
      // block never splits a tile, so this is always correct, only slower).
      const int64_t room = static_cast<int64_t>(p.workspace_bytes) - offset;
      blocks = std::min<int64_t>(blocks, std::max<int64_t>(1, room / per_block));
    }
    const Tsm2Args a = Args(p, blocks, s.stages);
    plan->n_tile = NT;
    plan->blocks = a.blocks;
    plan->units = a.units;
    plan->threads = Cfg::kThreads;
    plan->stages = s.stages;
    plan->smem_bytes = s.smem_bytes;
    plan->workspace_bytes = offset + (a.chunks > 1 && a.blocks > 1 ? a.blocks * per_block : 0);
    plan->launch = &Launch;
    plan->kernel_name = KernelName();
    return Status{};
  }

  // (B's images,) the tile kernel, then the fix-up pass over split tiles.
  static Status Launch(const DeviceMatmul& p, const MatmulPlan& plan, cudaStream_t stream) {
    Tsm2Args a = Args(p, plan.blocks, plan.stages);
    a.b_image = p.workspace;
    a.partials = static_cast<char*>(p.workspace) + PartialsOffset(p);
    if (a.units != plan.units || a.blocks != plan.blocks) {
      return TSM2_FAIL(cudaErrorInvalidValue, "the problem is not the one the plan was made for");
    }
    if constexpr (kMma) {
      const int64_t images = BBatches(p) * a.n_tiles * a.chunks;
      Tsm2MmaImageKernel<T, NT, kKind == RTileKind::kMmaTma>
          <<<static_cast<unsigned>(images), kImageThreads, 0, stream>>>(a);
      TSM2_RETURN_IF_LAUNCH_FAILED("Tsm2MmaImageKernel");
      if constexpr (kKind == RTileKind::kMmaTma) {
        CUtensorMap a_map;
        TSM2_CUDA_RETURN_IF_ERROR(EncodeRowTensorMap(
            &a_map, MapType<T>(), sizeof(T), p.a, p.a_batch_stride ? p.batch : 1, p.m, p.k, kRows));
        Tsm2MmaTmaKernel<T, NT, Cfg>
            <<<a.blocks, Cfg::kThreads, plan.smem_bytes, stream>>>(a, a_map);
        TSM2_RETURN_IF_LAUNCH_FAILED("Tsm2MmaTmaKernel");
      } else {
        Tsm2MmaKernel<T, NT, Cfg><<<a.blocks, Cfg::kThreads, plan.smem_bytes, stream>>>(a);
        TSM2_RETURN_IF_LAUNCH_FAILED("Tsm2MmaKernel");
      }
    } else {
      Tsm2Kernel<T, NT, Cfg><<<a.blocks, Cfg::kThreads, plan.smem_bytes, stream>>>(a);
      TSM2_RETURN_IF_LAUNCH_FAILED("Tsm2Kernel");
    }
    if (a.chunks > 1 && a.blocks > 1) {
      const dim3 grid(static_cast<unsigned>(a.blocks - 1), FixupParts(kRows, NT));
      Tsm2FixupKernel<T, NT, kRows><<<grid, kFixupThreads, 0, stream>>>(a);
      TSM2_RETURN_IF_LAUNCH_FAILED("Tsm2FixupKernel");
    }
    return Status{};
  }
};

// The CUDA-core R tile of tiles.h RTile.
template <typename T, int NT, bool VecRows>
struct CoreRConfig {
  static constexpr TileConfig kT = RTile(sizeof(T), NT);
  using type = Tsm2Config<T, NT, kT.rows, kT.rows_per_thread, kT.k_groups, kT.vec_per_thr, VecRows>;
};
template <typename T, int NT, bool VecRows>
using Tsm2Variant =
    RTileVariant<T, NT, typename CoreRConfig<T, NT, VecRows>::type, RTileKind::kCore>;
template <typename T, int NT, bool VecRows>
using Tsm2MmaVariant = RTileVariant<T, NT, Tsm2MmaConfig<T, NT, VecRows>, RTileKind::kMma>;
template <typename T, int NT>
using Tsm2MmaTmaVariant = RTileVariant<T, NT, Tsm2MmaTmaConfig<T, NT>, RTileKind::kMmaTma>;

// --- TSM2L -------------------------------------------------------------------

// Warps per SM an L tile should keep: two per scheduler, so that one issues
// while the other waits on shared memory.
constexpr int kLWarpsWanted = 8;

template <typename T, int NT, bool VecRows>
struct Tsm2LVariant {
  static constexpr int kRpt = LRowsPerThread(sizeof(T), NT);
  using Cfg = Tsm2LConfig<T, NT, kRpt, VecRows>;
  using Acc = AccType<T>;

  static const void* Kernel() { return reinterpret_cast<const void*>(&Tsm2LKernel<T, NT, Cfg>); }

  // The arguments for tiles of `rows` rows (threads x kRpt).
  static Tsm2LArgs Args(const DeviceMatmul& p, int rows, int64_t blocks_hint, int stages) {
    const int row_bytes = static_cast<int>(p.k) * static_cast<int>(sizeof(T));
    Tsm2LArgs a{};
    a.a = p.a;
    a.b = p.b;
    a.c = p.c;
    a.m = p.m;
    a.k = p.k;
    a.n = p.n;
    a.a_batch_stride = p.a_batch_stride;
    a.b_batch_stride = p.b_batch_stride;
    a.rows = rows;
    a.row_tiles = (p.m + rows - 1) / rows;
    a.n_tiles = (p.n + NT - 1) / NT;
    a.units = p.batch * a.n_tiles * a.row_tiles;
    a.blocks = static_cast<int>(std::min<int64_t>(a.units, blocks_hint));
    a.stages = stages;
    if constexpr (VecRows) {
      a.a_row_vecs = row_bytes / 16;
      a.a_row_units = a.a_row_vecs % 2 ? a.a_row_vecs : a.a_row_vecs + 1;
      a.a_vdiv = MakeDiv32(static_cast<uint32_t>(a.a_row_vecs));
      a.a_stage_bytes = rows * a.a_row_units * 16;
    } else {
      a.a_stage_bytes = (rows * row_bytes + 32 + 15) / 16 * 16;
    }
    a.b_bytes =
        (static_cast<int>(p.k) * Cfg::kBStride * static_cast<int>(sizeof(Acc)) + 15) / 16 * 16;
    const int osize = OutSize(p, sizeof(T));
    a.out_bytes = (OutStageBytes(rows, NT, osize) + 15) / 16 * 16;
    a.out = MakeOutLayout(p.n, osize, p.c);
    a.out_wide = MakeOutLayout(NT, osize, nullptr);
    a.out_f32 = p.out_f32;
    a.b_trans = p.layout == Layout::kNT;
    return a;
  }

  // Threads per block from kLThreadOptions, chosen on this device. First
  // the options that keep kLWarpsWanted warps per SM with at least half the
  // Little's-law target in flight (the FMAs of wide B need the warps, and
  // the ring still runs deep); among them, or among all where none does, the
  // most bytes in flight up to the target, then the most warps per SM.
  static Status Plan(const DeviceMatmul& p, MatmulPlan* plan) {
    TSM2_RETURN_IF_ERROR(CheckAligned(p));
    if (p.k > kLMaxK) return TSM2_FAIL(cudaErrorInvalidValue, "the L tile takes k <= kLMaxK");
    StreamDevice dev;
    TSM2_CUDA_RETURN_IF_ERROR(GetStreamDevice(&dev));
    const int64_t target = InFlightTarget(dev.bytes_per_s, dev.sm_count);
    int best_threads = 0;
    StageChoice best;
    for (int threads : kLThreadOptions) {
      const int rows = threads * kRpt;
      const Tsm2LArgs shape = Args(p, rows, 1, 2);
      const int64_t data = int64_t{rows} * p.k * static_cast<int64_t>(sizeof(T));
      StageChoice s;
      TSM2_RETURN_IF_ERROR(PlanStages(Kernel(), threads, shape.b_bytes + shape.out_bytes,
                                      shape.a_stage_bytes, data, dev, &s));
      if (s.stages == 0) continue;
      const int64_t got = std::min(s.inflight, target), had = std::min(best.inflight, target);
      const int warps = s.blocks_per_sm * threads / 32;
      const int had_warps = best.blocks_per_sm * best_threads / 32;
      const bool fed = warps >= kLWarpsWanted && 2 * s.inflight >= target;
      const bool had_fed = had_warps >= kLWarpsWanted && 2 * best.inflight >= target;
      if (best_threads == 0 || fed > had_fed ||
          (fed == had_fed && (got > had || (got == had && warps > had_warps)))) {
        best = s;
        best_threads = threads;
      }
    }
    if (best_threads == 0) {
      return TSM2_FAIL(cudaErrorInvalidConfiguration, "two stages of the L tile do not fit");
    }
    const Tsm2LArgs a = Args(p, best_threads * kRpt,
                             static_cast<int64_t>(best.blocks_per_sm) * dev.sm_count, best.stages);
    plan->sm_count = dev.sm_count;
    plan->n_tile = NT;
    plan->blocks = a.blocks;
    plan->units = a.units;
    plan->threads = best_threads;
    plan->stages = best.stages;
    plan->smem_bytes = best.smem_bytes;
    plan->workspace_bytes = 0;
    plan->launch = &Launch;
    plan->kernel_name = "Tsm2LKernel";
    return Status{};
  }

  static Status Launch(const DeviceMatmul& p, const MatmulPlan& plan, cudaStream_t stream) {
    const Tsm2LArgs a = Args(p, plan.threads * kRpt, plan.blocks, plan.stages);
    if (a.units != plan.units || a.blocks != plan.blocks) {
      return TSM2_FAIL(cudaErrorInvalidValue, "the problem is not the one the plan was made for");
    }
    Tsm2LKernel<T, NT, Cfg><<<a.blocks, plan.threads, plan.smem_bytes, stream>>>(a);
    TSM2_RETURN_IF_LAUNCH_FAILED("Tsm2LKernel");
    return Status{};
  }
};

// The grid of a row-per-thread kernel: `wanted` blocks, at most what the GPU
// holds at once (the kernels walk the rest in grid-wide steps).
inline Status PlanRowGrid(const void* kernel, int threads, int n_tile, int64_t rows, int64_t wanted,
                          MatmulLaunchFn launch, const char* name, MatmulPlan* plan) {
  int per_sm = 0;
  TSM2_CUDA_RETURN_IF_ERROR(BlocksPerSm(kernel, threads, 0, &per_sm));
  TSM2_CUDA_RETURN_IF_ERROR(SmCount(&plan->sm_count));
  plan->n_tile = n_tile;
  plan->blocks = static_cast<int>(std::min<int64_t>(wanted, int64_t{per_sm} * plan->sm_count));
  plan->units = rows;
  plan->threads = threads;
  plan->workspace_bytes = 0;
  plan->launch = launch;
  plan->kernel_name = name;
  return Status{};
}

// TSM2L's row-per-thread kernel for rows of KV 16-byte vectors. U = 4 rows
// per lane per step at 2 blocks per SM (128 registers) was the best of the
// lab's sweep on an H100 (benchmarks/lab/kernel_lab.cu, "Lrow" cases): 91-93%
// of the read ceiling.
template <typename T, int NT, int KV, int U = 4, int MinBlocks = 2>
struct RowVariant {
  using Cfg = RowConfig<T, KV, NT, U, MinBlocks>;
  static constexpr auto kKernel = &Tsm2LRowKernel<T, KV, NT, U, MinBlocks>;

  // Conditions beyond UsesRowKernel's shape test, checked on the actual buffers.
  // Also for the packed rows' kernel, whose rows have k_row elements.
  static bool Takes(const DeviceMatmul& p, int64_t k_row = Cfg::kK) {
    const bool batch_ok = p.batch == 1 || (p.b_batch_stride == 0 && p.a_batch_stride == p.m * p.k);
    return batch_ok && p.k == k_row && reinterpret_cast<uintptr_t>(p.a) % 16 == 0;
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
    const bool c_aligned = reinterpret_cast<uintptr_t>(p.c) % 16 == 0;
    a.c_vec = p.n == NT && Cfg::kOutPerLane * osize % 16 == 0 && c_aligned;
    // Staging paid on rows of one vector only: 1.2-2.8x faster on the H200
    // where a lane held a row of 3-7 values, while rows of two vectors (two
    // lanes, each storing half the row's values) ran as fast without it
    // (f32 n = 7) or faster (bf16 n = 3: 106 us against 146).
    a.c_warp = KV == 1 && !a.c_vec && c_aligned;
    return a;
  }

  static Status Plan(const DeviceMatmul& p, MatmulPlan* plan) {
    const int64_t rows = p.batch * p.m;
    const int64_t steps = (rows + Cfg::kRowsPerStep - 1) / Cfg::kRowsPerStep;
    return PlanRowGrid(reinterpret_cast<const void*>(kKernel), Cfg::kThreads, NT, rows, steps,
                       &Launch, "Tsm2LRowKernel", plan);
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

// TSM2L's row-per-thread kernel for rows of 2, 4 or 8 bytes, R = 16 / row
// bytes of them to a lane's 16-byte vector (Tsm2LPackedRowKernel).
template <typename T, int NT, int R, int U = 4>
struct PackedRowVariant {
  using Cfg = PackedRowConfig<T, R, NT, U>;
  static constexpr auto kKernel = &Tsm2LPackedRowKernel<T, R, NT, U>;

  static bool Takes(const DeviceMatmul& p) { return RowVariant<T, NT, 1>::Takes(p, Cfg::kK); }

  static Status Plan(const DeviceMatmul& p, MatmulPlan* plan) {
    const int64_t rows = p.batch * p.m;
    const int64_t vecs = (rows + R - 1) / R;
    // A block per kThreads vectors: the kernel deals each step's U groups
    // across the whole grid (Tsm2LPackedRowKernel).
    const int64_t groups = (vecs + Cfg::kThreads - 1) / Cfg::kThreads;
    return PlanRowGrid(reinterpret_cast<const void*>(kKernel), Cfg::kThreads, NT, rows, groups,
                       &Launch, "Tsm2LPackedRowKernel", plan);
  }

  static Status Launch(const DeviceMatmul& p, const MatmulPlan& plan, cudaStream_t stream) {
    const RowArgs a = RowVariant<T, NT, 1>::Args(p);
    if (a.rows != plan.units || plan.blocks < 1) {
      return TSM2_FAIL(cudaErrorInvalidValue, "the problem is not the one the plan was made for");
    }
    kKernel<<<plan.blocks, Cfg::kThreads, 0, stream>>>(a);
    TSM2_RETURN_IF_LAUNCH_FAILED("Tsm2LPackedRowKernel");
    return Status{};
  }
};

}  // namespace tsm2

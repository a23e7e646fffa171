// The planner of tsm2_matmul: where the kernel for a call is chosen, once.
//
// The router (jax_tsm2/routing.py) has already picked the family; from it and
// the problem, PlanMatmulWith resolves one kernel instantiation and stores
// its launch function in the MatmulPlan, which LaunchMatmul (launcher.h) then
// runs as it is. Every branch below names the kernel it picks:
//
//   TSM2R, TSM2L  PlanTiles: the n-tile t2 = NTileFor(n), then
//                   row stream (one product, nn or nt, rows of A of 256+
//                   bytes, n <= 16 f32, n <= 8 f64/bf16/f16; row_stream_plan.h)
//                                          kernels/row_stream.cuh
//                   R tile on tensor cores (bf16/f16 n > 4, f32 n > 8; k > 1;
//                                          sm_80+)
//                                          kernels/tsm2_mma.cuh (Tsm2MmaKernel)
//                   R tile                 kernels/tsm2.cuh (Tsm2Kernel)
//                   L tile (TSM2L, k <= 64) kernels/tsm2l.cuh (Tsm2LKernel)
//                   L row-per-thread (rows of 2, 4, 8, 16 or 32 bytes,
//                                          n <= 8), kernels/row_per_thread.cuh
//                   L tile on tensor cores (rows of whole vectors; bf16/f16
//                   n > 4, f32 n > 8; sm_80+)
//                                          kernels/tsm2l_mma.cuh
//                 each tile in two forms: rows of whole 16-byte vectors,
//                 and rows of any other length; the ring depth and the
//                 grid from the device (launch_tiles.cuh).
//   TSM2S         PlanSplit + PlanS: the split plan (split_plan.h SPlan), then
//                   tensor maps (bf16/f16, >= 64 column tiles; sm_90+ GPUs)
//                                          kernels/small_left_tma.cuh
//                   clusters (f32/bf16/f16, one wave; sm_90+ GPUs)
//                                          kernels/small_left_cluster.cuh
//                   tensor cores (bf16/f16, m >= 8)  kernels/small_left_mma.cuh
//                   CUDA cores             kernels/small_left.cuh
//   TSM2T         PlanSplit + PlanT: the split plan (TPlan), then
//                   tensor cores (tiles of 2048+ outputs; 1024+ for bf16/f16)
//                                          kernels/tn_mma.cuh (f64), tn_tf32.cuh
//                                          (f32), tn_half.cuh (bf16, f16)
//                   CUDA cores             kernels/tn.cuh
//                 and with more than one split, the fixed-order sum of the
//                 partial sums, kernels/split_reduce.cuh.
//
// Tune bundles the families' tuning structs (split_plan.h): production
// instantiates MatmulTuning, the lab programs (benchmarks/lab/) variants.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "ffi/common/device.h"
#include "ffi/common/status.h"
#include "ffi/matmul/launch_l_mma.cuh"
#include "ffi/matmul/launch_row_stream.cuh"
#include "ffi/matmul/launch_split.cuh"
#include "ffi/matmul/launch_tiles.cuh"
#include "ffi/matmul/launcher.h"
#include "ffi/matmul/split_plan.h"
#include "ffi/matmul/tiles.h"

namespace tsm2 {

struct MatmulTuning {
  using S = STuning;
  using T = TTuning;
};

// --- TSM2R and TSM2L --------------------------------------------------------

// The variant for problem p with n-tile NT (t2): for TSM2L with k <= kLMaxK
// the row-per-thread kernel (rows of one or two 16-byte vectors, or several
// rows to a vector, n <= 8, B shared across the batch, A aligned) or the L
// tile, else the R tile; each reading rows 16 bytes at a time where they are
// whole vectors.
template <typename T, int NT>
Status PlanTile(const DeviceMatmul& p, Kernel f, MatmulPlan* plan) {
  const bool vec_rows = VecRowsOf<T>(p);
  if (UsesRowStream(UsesLTile(f == Kernel::kTsm2l, p.k, sizeof(T)), p.batch, p.k, p.n, sizeof(T)) &&
      (p.layout == Layout::kNN || p.layout == Layout::kNT)) {
    const Status s = PlanRowStreamFor<T>(p, plan);
    // Where B's rows or the splits' sums do not fit (a small workspace), a
    // row tile runs instead.
    if (s.ok() || s.error != cudaErrorInvalidConfiguration) return s;
  }
  // Only the n-tiles UsesRMma can take are instantiated on tensor cores.
  if constexpr (sizeof(T) == 2 || (sizeof(T) >= 4 && NT > 8)) {
    int cc = 0;
    TSM2_CUDA_RETURN_IF_ERROR(ComputeCapability(&cc));
    if (UsesRMma(f == Kernel::kTsm2l, p.k, p.n, sizeof(T), cc)) {
      constexpr int kMmaNT = RMmaNTile(NT);
      // sm_90 fills the ring with tensor-map copies (rows of whole vectors).
      if (vec_rows && cc >= 90 &&
          RowTensorMapFits(sizeof(T), p.a_batch_stride ? p.batch : 1, p.m, p.k)) {
        const Status s = Tsm2MmaTmaVariant<T, kMmaNT>::Plan(p, plan);
        if (s.ok() || s.error != cudaErrorInvalidConfiguration) return s;
      }
      // f64 has no cp.async tensor-core tile: the CUDA-core tile takes it.
      if constexpr (sizeof(T) != 8) {
        const Status s = vec_rows ? Tsm2MmaVariant<T, kMmaNT, true>::Plan(p, plan)
                                  : Tsm2MmaVariant<T, kMmaNT, false>::Plan(p, plan);
        // Where two of its stages do not fit the GPU's shared memory (the wide
        // n-tiles on 99 KB parts), the CUDA-core tile runs instead.
        if (s.ok() || s.error != cudaErrorInvalidConfiguration) return s;
      }
    }
  }
  if (!UsesLTile(f == Kernel::kTsm2l, p.k, sizeof(T))) {
    return vec_rows ? Tsm2Variant<T, NT, true>::Plan(p, plan)
                    : Tsm2Variant<T, NT, false>::Plan(p, plan);
  }
  if constexpr (NT <= 8) {
    if (UsesRowKernel(true, p.k, p.n, sizeof(T))) {
      if (p.k * static_cast<int64_t>(sizeof(T)) == 16 && RowVariant<T, NT, 1>::Takes(p)) {
        return RowVariant<T, NT, 1>::Plan(p, plan);
      }
      if (p.k * static_cast<int64_t>(sizeof(T)) == 32 && RowVariant<T, NT, 2>::Takes(p)) {
        return RowVariant<T, NT, 2>::Plan(p, plan);
      }
      // Rows of 2, 4 or 8 bytes, R = 16 / row bytes to a vector.
      const int64_t row_bytes = p.k * static_cast<int64_t>(sizeof(T));
      if constexpr (kVec<T> >= 8) {
        if (row_bytes == 2 && PackedRowVariant<T, NT, 8>::Takes(p)) {
          return PackedRowVariant<T, NT, 8>::Plan(p, plan);
        }
      }
      if constexpr (kVec<T> >= 4) {
        if (row_bytes == 4 && PackedRowVariant<T, NT, 4>::Takes(p)) {
          return PackedRowVariant<T, NT, 4>::Plan(p, plan);
        }
      }
      if (row_bytes == 8 && PackedRowVariant<T, NT, 2>::Takes(p)) {
        return PackedRowVariant<T, NT, 2>::Plan(p, plan);
      }
    }
  }
  // Only the n-tiles UsesLMma can take are instantiated on tensor cores.
  if constexpr (sizeof(T) == 2 ? NT > 4 : NT > 8) {
    int cc = 0;
    TSM2_CUDA_RETURN_IF_ERROR(ComputeCapability(&cc));
    if (UsesLMma(true, p.k, p.n, sizeof(T), cc, p.out_f32)) {
      const Status s = PlanLMma<T, LMmaNTile(sizeof(T), NT) / 8>(p, plan);
      // A batch with B per product, a misaligned A, or no room on this GPU:
      // the L tile runs instead.
      if (s.ok() || s.error != cudaErrorInvalidConfiguration) return s;
    }
  }
  return vec_rows ? Tsm2LVariant<T, NT, true>::Plan(p, plan)
                  : Tsm2LVariant<T, NT, false>::Plan(p, plan);
}

// The n-tile first: t2 = NTileFor(n), one of tiles.h's kNTiles.
template <typename T>
Status PlanTiles(const DeviceMatmul& p, Kernel f, MatmulPlan* plan) {
  switch (NTileFor(p.n)) {
    case 1:
      return PlanTile<T, 1>(p, f, plan);
    case 2:
      return PlanTile<T, 2>(p, f, plan);
    case 4:
      return PlanTile<T, 4>(p, f, plan);
    case 8:
      return PlanTile<T, 8>(p, f, plan);
    case 12:
      return PlanTile<T, 12>(p, f, plan);
    case 16:
      return PlanTile<T, 16>(p, f, plan);
    case 24:
      return PlanTile<T, 24>(p, f, plan);
    case 32:
      return PlanTile<T, 32>(p, f, plan);
    case 40:
      return PlanTile<T, 40>(p, f, plan);
    case 48:
      return PlanTile<T, 48>(p, f, plan);
    case 56:
      return PlanTile<T, 56>(p, f, plan);
    case 64:
      return PlanTile<T, 64>(p, f, plan);
    default:
      return TSM2_FAIL(cudaErrorInvalidValue, "NTileFor gave an n-tile with no kernel");
  }
}

// --- TSM2S ------------------------------------------------------------------

// set(std::integral_constant<int, MT>) for MT = mt, one of the row counts the
// S kernels are compiled for (1, 2, 4, 8, 16).
template <typename Set>
Status WithRowsOfA(int64_t mt, Set&& set) {
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

// Which S kernel runs the split plan: the tensor-map kernel or the cluster
// kernel where the plan says so (no other kernel runs their plans), else the
// tensor-core kernel for 2-byte types from STune::kMmaMinM rows (the plan's
// mma), else the CUDA-core kernel; the last two for m rounded up to a power
// of two rows.
template <typename T, typename STune, typename TTune>
Status PlanS(const DeviceMatmul& p, MatmulPlan* plan) {
  using L = SplitLauncher<T, STune, TTune>;
  const SplitPlan& s = plan->split;
  plan->vec_ok =
      p.n % SCols<T>::kCpt == 0 && reinterpret_cast<uintptr_t>(p.b) % SCols<T>::kBytes == 0;
  // Other bf16/f16 rows are copied in 16-byte windows, which never start
  // before an aligned B (XLA's buffers are). f32 and f64 rows keep their
  // element copies (cp.async of 4 or 8 bytes): read back as each lane's
  // vector of columns, they cost a quarter of the windows' single-element
  // reads (on an H200, f32 2 x 19587 x 10338 ran at 64% of the floor so and
  // at 51% in windows).
  plan->b_window = sizeof(T) == 2 && !plan->vec_ok && reinterpret_cast<uintptr_t>(p.b) % 16 == 0;
  const int64_t mt = Pow2AtLeast(p.m);
  if constexpr (sizeof(T) == 2) {
    if (s.tma) {
      if (!HasClusters()) {
        return TSM2_FAIL(cudaErrorInvalidDeviceFunction, "the tensor-map S plan needs sm_90");
      }
      // The copies need 16-byte aligned operands (n, k % 8 == 0: the plan),
      // and the stores an aligned C; XLA's buffers always are.
      if (reinterpret_cast<uintptr_t>(p.c) % 16 != 0) {
        return TSM2_FAIL(cudaErrorInvalidValue, "the tensor-map S kernel needs C 16-byte aligned");
      }
      plan->b_window = false;
      plan->launch = s.tile_n == 64 ? &L::template LaunchSTma<64> : &L::template LaunchSTma<128>;
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
      plan->b_window = false;
      plan->kernel_name = "Tsm2SClusterKernel";
      if constexpr (sizeof(T) == 2) {  // m16 tiles whatever m
        plan->launch = plan->vec_ok ? &L::template LaunchSCluster<16, true>
                                    : &L::template LaunchSCluster<16, false>;
        return Status{};
      } else {  // f32 multiplies m rounded up to a power of two rows of A
        return WithRowsOfA(mt, [&](auto rows) {
          constexpr int kMt = decltype(rows)::value;
          plan->launch = plan->vec_ok ? &L::template LaunchSCluster<kMt, true>
                                      : &L::template LaunchSCluster<kMt, false>;
        });
      }
    }
  }
  // The plan aimed for STune::kBlocksPerSm blocks per SM; where fewer of the
  // kernel fit (f32 rings, f64 with many rows of A), it is one wave of those.
  int fit = 0;
  if constexpr (sizeof(T) == 2) {
    if (s.mma && HasMmaSync()) {
      plan->launch = &L::LaunchSMma;
      plan->kernel_name = "Tsm2SMmaKernel";
      TSM2_CUDA_RETURN_IF_ERROR(L::SMmaBlocksPerSm(&fit));
    }
  }
  if (fit == 0) {
    plan->kernel_name = "Tsm2SKernel";
    cudaError_t asked = cudaSuccess;
    TSM2_RETURN_IF_ERROR(WithRowsOfA(mt, [&](auto rows) {
      constexpr int kMt = decltype(rows)::value;
      plan->launch = &L::template LaunchSCore<kMt>;
      asked = L::template SCoreBlocksPerSm<kMt>(&fit);
    }));
    TSM2_CUDA_RETURN_IF_ERROR(asked);
  }
  if (fit < STune::kBlocksPerSm) {
    SChooseSplits(sizeof(T), p.batch, p.m, p.k, plan->sm_count, std::max(fit, 1), &plan->split);
  }
  return Status{};
}

// --- TSM2T ------------------------------------------------------------------

// Which T kernel runs the split plan: the tensor-core kernel compiled for the
// plan's output tile where the plan says so and the GPU has mma.sync (sm_80),
// else the CUDA-core kernel with the plan's thread blocks (below sm_80 it
// runs the tensor-core plans too: any step works for it, and the padded ring
// is only larger than it needs).
template <typename T, typename STune, typename TTune>
Status PlanT(const DeviceMatmul& p, MatmulPlan* plan) {
  using L = SplitLauncher<T, STune, TTune>;
  const SplitPlan& s = plan->split;
  constexpr int kV = kVec<T>;
  plan->vec_ok = p.m % kV == 0 && p.n % kV == 0 && s.tile_m % kV == 0 && s.tile_n % kV == 0 &&
                 reinterpret_cast<uintptr_t>(p.a) % 16 == 0 &&
                 reinterpret_cast<uintptr_t>(p.b) % 16 == 0;
  if (TSmemBytes(s, sizeof(T)) > kTMaxSmem) {
    return TSM2_FAIL(cudaErrorInvalidConfiguration, "the T plan's ring exceeds kTMaxSmem");
  }
  if (s.mma && HasMmaSync()) {
    plan->launch = L::TMmaLaunchFor(s);
    plan->kernel_name = std::is_same_v<T, double>  ? "Tsm2TMmaKernel"
                        : std::is_same_v<T, float> ? "Tsm2TTf32Kernel"
                                                   : "Tsm2THalfKernel";
    if (plan->launch == nullptr) {
      return TSM2_FAIL(cudaErrorInvalidValue, "no tensor-core T kernel for the plan's tile");
    }
    return Status{};
  }
  if (s.flat) {
    plan->launch = L::TFlatLaunchFor(s);
    plan->kernel_name = "Tsm2TFlatKernel";
    if (plan->launch == nullptr) {
      return TSM2_FAIL(cudaErrorInvalidValue, "no flat T kernel for the plan's thread blocks");
    }
    return Status{};
  }
  // TPlan never gives f64 8 x 8 blocks (128 accumulator registers would spill).
  constexpr int kWide = sizeof(T) <= 4 ? 8 : 4;
  if (s.thread_edge != 4 && s.thread_edge != kWide) {
    return TSM2_FAIL(cudaErrorInvalidValue, "no CUDA-core T kernel for the plan's thread blocks");
  }
  plan->launch = s.thread_edge == 8 ? &L::template LaunchTCore<kWide> : &L::template LaunchTCore<4>;
  plan->kernel_name = "Tsm2TKernel";
  return Status{};
}

// --- S and T ----------------------------------------------------------------

// The split plan for the device (fewer splits where the workspace is short:
// one split needs none and is always correct), its kernel, and with splits
// their sum.
template <typename T, typename STune, typename TTune>
Status PlanSplit(const DeviceMatmul& p, Kernel f, MatmulPlan* plan) {
  using L = SplitLauncher<T, STune, TTune>;
  if (f == Kernel::kTsm2s && p.m > kSMaxM) {
    return TSM2_FAIL(cudaErrorInvalidValue, "TSM2S takes m <= kSMaxM rows of A");
  }
  TSM2_CUDA_RETURN_IF_ERROR(SmCount(&plan->sm_count));
  int cc = 0, smem = 0;  // S plans take the sm_90 kernels only where the GPU has them
  TSM2_CUDA_RETURN_IF_ERROR(ComputeCapability(&cc));
  TSM2_CUDA_RETURN_IF_ERROR(SmemPerBlockOptin(&smem));
  SplitPlan s = f == Kernel::kTsm2t
                    ? TPlan<TTune>(sizeof(T), p.batch, p.m, p.k, p.n, plan->sm_count,
                                   reinterpret_cast<uintptr_t>(p.a) % 16 == 0 &&
                                       reinterpret_cast<uintptr_t>(p.b) % 16 == 0)
                    : SPlan<STune>(sizeof(T), p.batch, p.m, p.k, p.n, plan->sm_count, cc, smem);
  plan->split = s;
  // The kernel; PlanS may take fewer splits where fewer of its blocks fit an SM.
  TSM2_RETURN_IF_ERROR(
      (f == Kernel::kTsm2t ? PlanT<T, STune, TTune>(p, plan) : PlanS<T, STune, TTune>(p, plan)));
  s = plan->split;
  size_t need = SplitWorkspaceBytes(s, sizeof(T), p.batch, p.m, p.n);
  if (need > p.workspace_bytes) {
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
  if (s.splits > 1) {
    // Many splits (T): a block per 32 outputs, its warps over the splits;
    // else a thread per output.
    plan->finish = s.splits >= 32 ? &L::template AddSplits<true> : &L::template AddSplits<false>;
  }
  return Status{};
}

// --- Every family -----------------------------------------------------------

template <typename T, typename Tune = MatmulTuning>
Status PlanMatmulWith(const DeviceMatmul& p, Kernel family, MatmulPlan* plan) {
  *plan = MatmulPlan{};
  plan->family = family;
  switch (family) {
    case Kernel::kTsm2s:
    case Kernel::kTsm2t:
      return PlanSplit<T, typename Tune::S, typename Tune::T>(p, family, plan);
    case Kernel::kTsm2r:
    case Kernel::kTsm2l:
      return PlanTiles<T>(p, family, plan);
  }
  return TSM2_FAIL(cudaErrorInvalidValue, "unknown kernel family");
}

}  // namespace tsm2

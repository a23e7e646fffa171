// Plans and launches the row stream (kernels/row_stream.cuh): the splits and
// grid from row_stream_plan.h on the current device, then the kernel, then
// with several splits the pass that adds them in split order
// (kernels/split_reduce.cuh).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "ffi/common/device.h"
#include "ffi/common/plan_math.h"
#include "ffi/common/status.h"
#include "ffi/matmul/kernels/row_stream.cuh"
#include "ffi/matmul/kernels/split_reduce.cuh"
#include "ffi/matmul/launcher.h"
#include "ffi/matmul/row_stream_plan.h"

namespace tsm2 {

template <typename T, int N, int R, int U, int D, int S, int M>
struct RowStreamVariant {
  using Acc = AccType<T>;
  static constexpr RowStreamShape kShape{N, R, U, D, S, M};

  static RowStreamArgs Args(const DeviceMatmul& p, const MatmulPlan& plan) {
    RowStreamArgs a{};
    a.a = p.a;
    a.b = p.b;
    a.c = p.c;
    a.partials = p.workspace;
    a.m = p.m;
    a.k = p.k;
    a.n = p.n;
    a.k_chunk = plan.k_chunk;
    a.splits = plan.split.splits;
    a.groups = plan.row_groups;
    a.units = plan.units;
    a.period = plan.row_period;
    a.b_t = p.layout == Layout::kNT;
    a.out_f32 = p.out_f32;
    return a;
  }

  static Status Plan(const DeviceMatmul& p, MatmulPlan* plan) {
    if (p.batch != 1 || (p.layout != Layout::kNN && p.layout != Layout::kNT)) {
      return TSM2_FAIL(cudaErrorInvalidValue, "row stream: one product, layout nn or nt");
    }
    int sms = 0, smem_optin = 0;
    TSM2_CUDA_RETURN_IF_ERROR(SmCount(&sms));
    TSM2_CUDA_RETURN_IF_ERROR(SmemPerBlockOptin(&smem_optin));
    const RowStreamPlan rp = PlanRowStream(kShape, sizeof(T), p.m, p.k, p.n, sms, smem_optin,
                                           static_cast<int64_t>(p.workspace_bytes));
    if (!rp.ok) {
      return TSM2_FAIL(cudaErrorInvalidConfiguration,
                       "row stream: B or the splits' sums do not fit (shared memory, workspace)");
    }
    // The shared-memory opt-in, once per kernel, for the most any plan asks.
    int per_sm = 0;
    TSM2_CUDA_RETURN_IF_ERROR(
        BlocksPerSm(reinterpret_cast<const void*>(&Tsm2RowStreamKernel<T, N, R, U, D, S, M>),
                    kRowStreamThreads, (smem_optin - 64) / M - (M > 1 ? 1024 : 0), &per_sm));
    plan->family = Kernel::kTsm2r;
    plan->kernel_name = "Tsm2RowStreamKernel";
    plan->sm_count = sms;
    plan->blocks = rp.blocks;
    plan->threads = kRowStreamThreads;
    plan->stages = S > 0 ? S : D + 1;
    plan->smem_bytes = rp.smem_bytes;
    plan->n_tile = N;
    plan->units = rp.units;
    plan->k_chunk = rp.k_chunk;
    plan->row_groups = rp.groups;
    plan->row_period = rp.period;
    plan->split = SplitPlan{};
    plan->split.splits = rp.splits;
    plan->workspace_bytes = static_cast<size_t>(rp.workspace_bytes);
    plan->launch = &Launch;
    plan->finish = rp.splits > 1 ? &AddSplits : nullptr;
    return Status{};
  }

  static Status Launch(const DeviceMatmul& p, const MatmulPlan& plan, cudaStream_t stream) {
    Tsm2RowStreamKernel<T, N, R, U, D, S, M>
        <<<plan.blocks, kRowStreamThreads, plan.smem_bytes, stream>>>(Args(p, plan));
    TSM2_RETURN_IF_LAUNCH_FAILED("Tsm2RowStreamKernel");
    return Status{};
  }

  // The splits' sums, added in split order by a thread per output.
  static Status AddSplits(const DeviceMatmul& p, const MatmulPlan& plan, cudaStream_t stream) {
    SplitArgs s{};
    s.c = p.c;
    s.partials = p.workspace;
    s.m = p.m;
    s.k = p.k;
    s.n = p.n;
    s.splits = plan.split.splits;
    s.out_f32 = p.out_f32;
    const int blocks =
        static_cast<int>(std::min<int64_t>(CeilDiv(p.m * p.n, kReduceThreads), 16 * plan.sm_count));
    Tsm2SplitReduceKernel<T, false><<<blocks, kReduceThreads, 0, stream>>>(s, 1, false);
    TSM2_RETURN_IF_LAUNCH_FAILED("Tsm2SplitReduceKernel");
    return Status{};
  }
};

// The row stream for problem p, with the instantiation row_stream_plan.h
// gives its element size and width.
template <typename T, int NB>
Status PlanRowStreamWidth(const DeviceMatmul& p, MatmulPlan* plan) {
  constexpr RowStreamShape s = RowStreamShapeFor(sizeof(T), NB);
  if constexpr (!s.ok()) {
    return TSM2_FAIL(cudaErrorInvalidValue, "row stream: no instantiation for this width");
  } else {
    return RowStreamVariant<T, s.n_b, s.rows, s.vecs, s.depth, s.stages, s.min_blocks>::Plan(p,
                                                                                             plan);
  }
}

template <typename T>
Status PlanRowStreamFor(const DeviceMatmul& p, MatmulPlan* plan) {
  switch (RowStreamShapeFor(sizeof(T), p.n).n_b) {
    case 1:
      return PlanRowStreamWidth<T, 1>(p, plan);
    case 2:
      return PlanRowStreamWidth<T, 2>(p, plan);
    case 4:
      return PlanRowStreamWidth<T, 4>(p, plan);
    case 8:
      return PlanRowStreamWidth<T, 8>(p, plan);
    case 16:
      return PlanRowStreamWidth<T, 16>(p, plan);
    default:
      return TSM2_FAIL(cudaErrorInvalidValue, "row stream: n past the widest instantiation");
  }
}

}  // namespace tsm2

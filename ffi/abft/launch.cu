// Plans and launches the ABFT kernels for element type E and accumulator
// type A: the sums' instantiation for r weight rows and their grid from the
// plans in plan.h, the repair, and the judgement; every launch checked.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "ffi/abft/kernels/colsums.cuh"
#include "ffi/abft/kernels/judge.cuh"
#include "ffi/abft/kernels/repair_column.cuh"
#include "ffi/abft/launcher.h"
#include "ffi/common/cuda_types.cuh"
#include "ffi/common/device.h"
#include "ffi/common/pdl.cuh"
#include "ffi/common/status.h"

namespace tsm2 {
namespace {

template <typename T, typename Acc>
const void* ColsumsKernelFor(int r) {
  switch (r) {
    case 1:
      return reinterpret_cast<const void*>(&AbftColsumsKernel<T, Acc, 1>);
    case 2:
      return reinterpret_cast<const void*>(&AbftColsumsKernel<T, Acc, 2>);
    case 3:
      return reinterpret_cast<const void*>(&AbftColsumsKernel<T, Acc, 3>);
    case 4:
      return reinterpret_cast<const void*>(&AbftColsumsKernel<T, Acc, 4>);
    default:
      return nullptr;
  }
}

template <typename T, typename Acc, int R>
Status LaunchColsumsKernel(const DeviceColsums& p, const ColsumsLaunchPlan& plan,
                           cudaStream_t stream) {
  const ColsumsPlan& s = plan.split;
  ColsumsArgs a{};
  a.m = p.m;
  a.v = p.v;
  a.out = p.out;
  a.partials = p.workspace;
  a.rows = p.rows;
  a.cols = p.cols;
  a.tile_cols = s.tile_cols;
  a.tiles = s.tiles;
  a.splits = s.splits;
  a.split_len = s.split_len;
  a.lanes = s.lanes;
  a.abs_rows = p.abs_rows;
  a.vec_ok = p.cols % kVec<T> == 0 && reinterpret_cast<uintptr_t>(p.m) % 16 == 0;
  AbftColsumsKernel<T, Acc, R>
      <<<static_cast<unsigned>(s.Blocks()), kColsumsThreads, 0, stream>>>(a);
  TSM2_RETURN_IF_LAUNCH_FAILED("AbftColsumsKernel");
  return Status{};
}

// No rows: every sum is +0.0 (all-zero bits in f32 and f64).
template <typename Acc>
Status ZeroColsums(const DeviceColsums& p, const ColsumsLaunchPlan&, cudaStream_t stream) {
  const size_t out_bytes = static_cast<size_t>(p.r) * p.cols * sizeof(Acc);
  TSM2_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(p.out, 0, out_bytes, stream));
  return Status{};
}

// The splits' fixed-order sum: past a few dozen splits one thread per output
// would wait on each load, so a warp per output.
template <typename Acc, bool kWarpEach>
Status AddColsumsSplits(const DeviceColsums& p, const ColsumsLaunchPlan& plan,
                        cudaStream_t stream) {
  const int64_t elems = int64_t{p.r} * p.cols;
  const int64_t threads = elems * (kWarpEach ? 32 : 1);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(CeilDiv(threads, 256), 65535));
  AbftColsumsReduceKernel<Acc, kWarpEach><<<blocks, 256, 0, stream>>>(
      static_cast<const Acc*>(p.workspace), static_cast<Acc*>(p.out), plan.split.splits, elems);
  TSM2_RETURN_IF_LAUNCH_FAILED("AbftColsumsReduceKernel");
  return Status{};
}

template <typename T, typename Acc>
void RepairLaunchArgs(const DeviceRepair& p, RepairArgs* a) {
  a->flag = p.flag;
  a->flag_bool = p.flag_bool;
  a->j = p.j;
  a->a = p.a;
  a->b = p.b;
  a->c = p.c;
  a->c_out = p.c_out;
  a->old_col = p.old_col;
  a->exact = p.exact;
  a->scale = p.scale;
  a->block_ok = p.block_ok;
  a->m = p.m;
  a->k = p.k;
  a->n = p.n;
  a->blocks = static_cast<int>(RepairBlocks(p.m));
}

// The recomputation of column *j, then the write of it where finite.
template <typename T, typename Acc>
Status RunRepair(const DeviceRepair& p, cudaStream_t stream) {
  RepairArgs a{};
  RepairLaunchArgs<T, Acc>(p, &a);
  if (const cudaError_t e =
          LaunchDependent(&AbftRepairRecomputeKernel<T, Acc>, static_cast<unsigned>(a.blocks),
                          kRepairThreads, 0, stream, a);
      e != cudaSuccess) {
    return TSM2_FAIL(e, "launching AbftRepairRecomputeKernel");
  }
  const unsigned write_blocks =
      static_cast<unsigned>(std::clamp<int64_t>(CeilDiv(p.m, kRepairThreads), 1, kRepairMaxBlocks));
  if (const cudaError_t e = LaunchDependent(&AbftRepairWriteKernel<T, Acc>, write_blocks,
                                            kRepairThreads, 0, stream, a);
      e != cudaSuccess) {
    return TSM2_FAIL(e, "launching AbftRepairWriteKernel");
  }
  return Status{};
}

// XLA hands an aliased result the operand's buffer; should it ever not, the
// repaired C must still start as C.
template <typename T>
Status StartFromC(const DeviceRepair& p, cudaStream_t stream) {
  if (p.c_out == p.c) return Status{};
  const size_t bytes = static_cast<size_t>(p.m) * p.n * sizeof(T);
  TSM2_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(p.c_out, p.c, bytes, cudaMemcpyDeviceToDevice, stream));
  return Status{};
}

}  // namespace

template <ElemType E, ElemType A>
Status PlanColsumsLaunch(const DeviceColsums& p, ColsumsLaunchPlan* plan) {
  using T = CudaType<E>;
  using Acc = AccCType<A>;
  *plan = ColsumsLaunchPlan{};
  if (p.r < 1 || p.r > kColsumsMaxR || p.rows < 0 || p.cols < 0) {
    return TSM2_FAIL(cudaErrorInvalidValue, "PlanColsumsLaunch: r must be 1 to 4, sizes >= 0");
  }
  if (p.cols == 0) return Status{};
  if (p.rows == 0) {
    plan->launch = &ZeroColsums<Acc>;
    return Status{};
  }
  const void* kernel = ColsumsKernelFor<T, Acc>(p.r);
  int per_sm = 0, sms = 0;
  TSM2_CUDA_RETURN_IF_ERROR(BlocksPerSm(kernel, kColsumsThreads, 0, &per_sm));
  TSM2_CUDA_RETURN_IF_ERROR(SmCount(&sms));
  const int64_t resident = int64_t{std::min(per_sm, kColsumsMaxBlocksPerSm)} * sms;
  const int64_t per_split = int64_t{p.r} * p.cols * static_cast<int64_t>(sizeof(Acc));
  const int64_t fit = per_split > 0 ? static_cast<int64_t>(p.workspace_bytes) / per_split : 1;
  plan->split = PlanColsums(static_cast<int>(sizeof(T)), static_cast<int>(sizeof(Acc)), p.r, p.rows,
                            p.cols, resident, std::max<int64_t>(fit, 1));
  if (plan->split.Blocks() > (int64_t{1} << 31) - 1) {
    return TSM2_FAIL(cudaErrorInvalidConfiguration, "the column-sum plan has 2^31 blocks or more");
  }
  switch (p.r) {
    case 1:
      plan->launch = &LaunchColsumsKernel<T, Acc, 1>;
      break;
    case 2:
      plan->launch = &LaunchColsumsKernel<T, Acc, 2>;
      break;
    case 3:
      plan->launch = &LaunchColsumsKernel<T, Acc, 3>;
      break;
    default:
      plan->launch = &LaunchColsumsKernel<T, Acc, 4>;
      break;
  }
  if (plan->split.splits > 1) {
    plan->finish =
        plan->split.splits > 32 ? &AddColsumsSplits<Acc, true> : &AddColsumsSplits<Acc, false>;
  }
  return Status{};
}

template <ElemType E, ElemType A>
Status LaunchRepairColumn(const DeviceRepair& p, cudaStream_t stream) {
  using T = CudaType<E>;
  if (p.m < 0 || p.k < 0 || p.n < 0) {
    return TSM2_FAIL(cudaErrorInvalidValue, "LaunchRepairColumn: sizes must be >= 0");
  }
  if (p.m == 0 || p.n == 0) return Status{};
  TSM2_RETURN_IF_ERROR(StartFromC<T>(p, stream));
  return RunRepair<T, AccCType<A>>(p, stream);
}

template <ElemType E, ElemType A>
Status LaunchJudge(const DeviceJudge& p, cudaStream_t stream) {
  using T = CudaType<E>;
  using Acc = AccCType<A>;
  const DeviceRepair& r = p.repair;
  if (r.m < 0 || r.k < 0 || r.n < 0) {
    return TSM2_FAIL(cudaErrorInvalidValue, "LaunchJudge: sizes must be >= 0");
  }
  TSM2_RETURN_IF_ERROR(StartFromC<T>(r, stream));
  if (const cudaError_t e = LaunchDependent(&AbftFlagKernel<Acc>, 1, kJudgeThreads, 0, stream,
                                            static_cast<const Acc*>(p.resid),
                                            static_cast<const Acc*>(p.threshold), r.n, p.state);
      e != cudaSuccess) {
    return TSM2_FAIL(e, "launching AbftFlagKernel");
  }
  if (r.m > 0 && r.n > 0) {
    DeviceRepair repair = r;
    repair.flag = p.state + kJudgeSingle;
    repair.flag_bool = false;
    repair.j = p.state + kJudgeColumn;
    repair.block_ok = p.state + kJudgeStateHeader;
    TSM2_RETURN_IF_ERROR((RunRepair<T, Acc>(repair, stream)));
  }
  VerdictArgs v{};
  v.resid = p.resid;
  v.factor = p.factor;
  v.floor = p.floor;
  v.old_col = r.old_col;
  v.exact = r.exact;
  v.scale = r.scale;
  v.state = p.state;
  v.m = r.m;
  v.n = r.n;
  v.verdict = p.verdict;
  if (const cudaError_t e =
          LaunchDependent(&AbftVerdictKernel<T, Acc>, 1, kJudgeThreads, 0, stream, v);
      e != cudaSuccess) {
    return TSM2_FAIL(e, "launching AbftVerdictKernel");
  }
  return Status{};
}

// Every (element, accumulator) pair the handlers dispatch to.
#define TSM2_ABFT_INSTANTIATE(E, A)                                                                \
  template Status PlanColsumsLaunch<ElemType::E, ElemType::A>(const DeviceColsums&,                \
                                                              ColsumsLaunchPlan*);                 \
  template Status LaunchRepairColumn<ElemType::E, ElemType::A>(const DeviceRepair&, cudaStream_t); \
  template Status LaunchJudge<ElemType::E, ElemType::A>(const DeviceJudge&, cudaStream_t);
TSM2_ABFT_INSTANTIATE(kF32, kF32)
TSM2_ABFT_INSTANTIATE(kF32, kF64)
TSM2_ABFT_INSTANTIATE(kF64, kF32)
TSM2_ABFT_INSTANTIATE(kF64, kF64)
TSM2_ABFT_INSTANTIATE(kBF16, kF32)
TSM2_ABFT_INSTANTIATE(kBF16, kF64)
TSM2_ABFT_INSTANTIATE(kF16, kF32)
TSM2_ABFT_INSTANTIATE(kF16, kF64)
#undef TSM2_ABFT_INSTANTIATE

}  // namespace tsm2

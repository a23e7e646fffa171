// Plans and launches the ABFT kernels: picks the instantiation (element
// type, accumulator type and, for the sums, the number of weight rows), sizes
// the grid from the plans in abft_plans.h and checks every launch.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "ffi/abft/kernels/colsums.cuh"
#include "ffi/abft/kernels/judge.cuh"
#include "ffi/abft/kernels/repair_column.cuh"
#include "ffi/abft/launcher.h"
#include "ffi/common/device.h"

namespace tsm2 {
namespace {

// Calls op.Run<T, Acc>() for the element and accumulator types of a call.
template <typename Op>
cudaError_t WithTypes(ElemType type, bool acc_f64, const Op& op) {
  switch (type) {
    case ElemType::kF32:
      return acc_f64 ? op.template Run<float, double>() : op.template Run<float, float>();
    case ElemType::kF64:
      return acc_f64 ? op.template Run<double, double>() : op.template Run<double, float>();
    case ElemType::kBF16:
      return acc_f64 ? op.template Run<__nv_bfloat16, double>()
                     : op.template Run<__nv_bfloat16, float>();
    case ElemType::kF16:
      return acc_f64 ? op.template Run<__half, double>() : op.template Run<__half, float>();
  }
  return cudaErrorInvalidValue;
}

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

cudaError_t SmCount(int* sms) {
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
  return cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, dev);
}

struct PlanOp {
  const DeviceColsums& p;
  size_t workspace_bytes;
  ColsumsPlan* plan;
  template <typename T, typename Acc>
  cudaError_t Run() const {
    const void* kernel = ColsumsKernelFor<T, Acc>(p.r);
    if (kernel == nullptr) return cudaErrorInvalidValue;
    int per_sm = 0, sms = 0;
    if (cudaError_t e = BlocksPerSm(kernel, kColsumsThreads, 0, &per_sm); e != cudaSuccess) {
      return e;
    }
    if (cudaError_t e = SmCount(&sms); e != cudaSuccess) return e;
    const int64_t resident = int64_t{std::min(per_sm, kColsumsMaxBlocksPerSm)} * sms;
    const int64_t per_split = int64_t{p.r} * p.cols * static_cast<int64_t>(sizeof(Acc));
    const int64_t fit = per_split > 0 ? static_cast<int64_t>(workspace_bytes) / per_split : 1;
    *plan = PlanColsums(static_cast<int>(sizeof(T)), static_cast<int>(sizeof(Acc)), p.r, p.rows,
                        p.cols, resident, std::max<int64_t>(fit, 1));
    return cudaSuccess;
  }
};

struct ColsumsLaunchOp {
  const DeviceColsums& p;
  void* workspace;
  size_t workspace_bytes;
  cudaStream_t stream;

  template <typename T, typename Acc, int R>
  cudaError_t Launch(const ColsumsArgs& a, const ColsumsPlan& s) const {
    AbftColsumsKernel<T, Acc, R>
        <<<static_cast<unsigned>(s.Blocks()), kColsumsThreads, 0, stream>>>(a);
    return cudaGetLastError();
  }

  template <typename T, typename Acc>
  cudaError_t Run() const {
    const size_t out_bytes = static_cast<size_t>(p.r) * p.cols * sizeof(Acc);
    if (p.cols == 0) return cudaSuccess;
    if (p.rows == 0) return cudaMemsetAsync(p.out, 0, out_bytes, stream);  // +0.0 in f32/f64
    ColsumsPlan s;
    if (cudaError_t e = PlanOp{p, workspace_bytes, &s}.Run<T, Acc>(); e != cudaSuccess) return e;
    if (s.Blocks() > (int64_t{1} << 31) - 1) return cudaErrorInvalidConfiguration;
    ColsumsArgs a{};
    a.m = p.m;
    a.v = p.v;
    a.out = p.out;
    a.partials = workspace;
    a.rows = p.rows;
    a.cols = p.cols;
    a.tile_cols = s.tile_cols;
    a.tiles = s.tiles;
    a.splits = s.splits;
    a.split_len = s.split_len;
    a.lanes = s.lanes;
    a.abs_rows = p.abs_rows;
    a.vec_ok = p.cols % kVec<T> == 0 && reinterpret_cast<uintptr_t>(p.m) % 16 == 0;
    cudaError_t e = cudaErrorInvalidValue;
    switch (p.r) {
      case 1:
        e = Launch<T, Acc, 1>(a, s);
        break;
      case 2:
        e = Launch<T, Acc, 2>(a, s);
        break;
      case 3:
        e = Launch<T, Acc, 3>(a, s);
        break;
      case 4:
        e = Launch<T, Acc, 4>(a, s);
        break;
    }
    if (e != cudaSuccess || s.splits <= 1) return e;
    const int64_t elems = int64_t{p.r} * p.cols;
    // Past a few dozen splits one thread per output would wait on each load.
    const bool warp_each = s.splits > 32;
    const int64_t threads = elems * (warp_each ? 32 : 1);
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(CeilDiv(threads, 256), 65535));
    const Acc* part = static_cast<const Acc*>(workspace);
    Acc* out = static_cast<Acc*>(p.out);
    if (warp_each) {
      AbftColsumsReduceKernel<Acc, true><<<blocks, 256, 0, stream>>>(part, out, s.splits, elems);
    } else {
      AbftColsumsReduceKernel<Acc, false><<<blocks, 256, 0, stream>>>(part, out, s.splits, elems);
    }
    return cudaGetLastError();
  }
};

struct RepairLaunchOp {
  const DeviceRepair& p;
  cudaStream_t stream;
  template <typename T, typename Acc>
  cudaError_t Run() const {
    RepairArgs a{};
    a.flag = p.flag;
    a.flag_bool = p.flag_bool;
    a.j = p.j;
    a.a = p.a;
    a.b = p.b;
    a.c = p.c;
    a.c_out = p.c_out;
    a.old_col = p.old_col;
    a.exact = p.exact;
    a.scale = p.scale;
    a.block_ok = p.block_ok;
    a.m = p.m;
    a.k = p.k;
    a.n = p.n;
    a.blocks = static_cast<int>(RepairBlocks(p.m));
    AbftRepairRecomputeKernel<T, Acc><<<a.blocks, kRepairThreads, 0, stream>>>(a);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    const int write_blocks =
        static_cast<int>(std::clamp<int64_t>(CeilDiv(p.m, kRepairThreads), 1, kRepairMaxBlocks));
    AbftRepairWriteKernel<T, Acc><<<write_blocks, kRepairThreads, 0, stream>>>(a);
    return cudaGetLastError();
  }
};

// XLA hands an aliased result the operand's buffer; should it ever not, the
// repaired C must still start as C.
cudaError_t StartFromC(const DeviceRepair& p, cudaStream_t stream) {
  if (p.c_out == p.c) return cudaSuccess;
  const size_t bytes = static_cast<size_t>(p.m) * p.n *
                       (p.type == ElemType::kF64   ? 8
                        : p.type == ElemType::kF32 ? 4
                                                   : 2);
  return cudaMemcpyAsync(p.c_out, p.c, bytes, cudaMemcpyDeviceToDevice, stream);
}

struct JudgeLaunchOp {
  const DeviceJudge& p;
  cudaStream_t stream;
  template <typename T, typename Acc>
  cudaError_t Run() const {
    const DeviceRepair& r = p.repair;
    AbftFlagKernel<Acc><<<1, kJudgeThreads, 0, stream>>>(
        static_cast<const Acc*>(p.resid), static_cast<const Acc*>(p.threshold), r.n, p.state);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    if (r.m > 0 && r.n > 0) {
      DeviceRepair repair = r;
      repair.flag = p.state + kJudgeSingle;
      repair.flag_bool = false;
      repair.j = p.state + kJudgeColumn;
      repair.block_ok = p.state + kJudgeStateHeader;
      if (cudaError_t e = RepairLaunchOp{repair, stream}.Run<T, Acc>(); e != cudaSuccess) {
        return e;
      }
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
    v.errors_detected = p.errors_detected;
    v.corrected = p.corrected;
    v.row = p.row;
    v.col = p.col;
    v.magnitude = p.magnitude;
    v.uncorrectable = p.uncorrectable;
    AbftVerdictKernel<T, Acc><<<1, kJudgeThreads, 0, stream>>>(v);
    return cudaGetLastError();
  }
};

}  // namespace

cudaError_t PlanColsumsLaunch(const DeviceColsums& p, size_t workspace_bytes, ColsumsPlan* plan) {
  return WithTypes(p.type, p.acc_f64, PlanOp{p, workspace_bytes, plan});
}

cudaError_t LaunchColsums(const DeviceColsums& p, void* workspace, size_t workspace_bytes,
                          cudaStream_t stream) {
  if (p.r < 1 || p.r > kColsumsMaxR || p.rows < 0 || p.cols < 0) return cudaErrorInvalidValue;
  return WithTypes(p.type, p.acc_f64, ColsumsLaunchOp{p, workspace, workspace_bytes, stream});
}

cudaError_t LaunchRepairColumn(const DeviceRepair& p, cudaStream_t stream) {
  if (p.m < 0 || p.k < 0 || p.n < 0) return cudaErrorInvalidValue;
  if (p.m == 0 || p.n == 0) return cudaSuccess;
  if (cudaError_t e = StartFromC(p, stream); e != cudaSuccess) return e;
  return WithTypes(p.type, p.acc_f64, RepairLaunchOp{p, stream});
}

cudaError_t LaunchJudge(const DeviceJudge& p, cudaStream_t stream) {
  const DeviceRepair& r = p.repair;
  if (r.m < 0 || r.k < 0 || r.n < 0) return cudaErrorInvalidValue;
  if (cudaError_t e = StartFromC(r, stream); e != cudaSuccess) return e;
  return WithTypes(r.type, r.acc_f64, JudgeLaunchOp{p, stream});
}

}  // namespace tsm2

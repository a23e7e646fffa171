// Plans and launches the checksum passes of tsm2_abft_encode and
// tsm2_abft_verify (kernels/passes.cuh) for element type E and accumulator
// type A: each pass planned for the blocks its kernel keeps resident (with
// its shared-memory stages), its splits added by the finish kernel, every
// launch checked.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "ffi/abft/checksum.h"
#include "ffi/abft/kernels/passes.cuh"
#include "ffi/abft/launcher.h"
#include "ffi/abft/plan.h"
#include "ffi/common/cuda_types.cuh"
#include "ffi/common/device.h"
#include "ffi/common/pdl.cuh"
#include "ffi/common/status.h"

namespace tsm2 {
namespace {

template <typename T, int kPass, bool kInject>
Status PlanPass(int64_t rows, int64_t cols, ColsumsPlan* plan) {
  const void* kernel = reinterpret_cast<const void*>(&AbftPassKernel<T, kPass, kInject>);
  int per_sm = 0, sms = 0;
  // Planned (and the shared-memory opt-in set) for the staged path, the larger.
  TSM2_CUDA_RETURN_IF_ERROR(
      BlocksPerSm(kernel, kColsumsThreads, AbftPassSmemBytes<T, kPass>(true), &per_sm));
  TSM2_CUDA_RETURN_IF_ERROR(SmCount(&sms));
  const int64_t resident = int64_t{std::max(1, std::min(per_sm, kColsumsMaxBlocksPerSm))} * sms;
  *plan = PlanAbftPass(static_cast<int>(sizeof(T)), kAbftSlots<T, kPass>, rows, cols, resident);
  if (plan->Blocks() > (int64_t{1} << 31) - 1) {
    return TSM2_FAIL(cudaErrorInvalidConfiguration, "an ABFT pass plan has 2^31 blocks or more");
  }
  return Status{};
}

// The pass over `a.data` with plan s, then the finish kernel when it split.
template <typename T, int kPass, bool kInject>
Status RunPass(AbftPassArgs a, const ColsumsPlan& s, cudaStream_t stream) {
  a.tile_cols = s.tile_cols;
  a.tiles = s.tiles;
  a.splits = s.splits;
  a.split_len = s.split_len;
  a.lanes = s.lanes;
  a.vec_ok = a.cols % kVec<T> == 0 && reinterpret_cast<uintptr_t>(a.data) % 16 == 0;
  const int smem = AbftPassSmemBytes<T, kPass>(a.vec_ok);
  if (const cudaError_t e =
          LaunchDependent(&AbftPassKernel<T, kPass, kInject>, static_cast<unsigned>(s.Blocks()),
                          kColsumsThreads, smem, stream, a);
      e != cudaSuccess) {
    return TSM2_FAIL(e, "launching AbftPassKernel");
  }
  if (s.splits > 1 && s.splits <= kAbftFinishUnitSplits) {
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(CeilDiv(a.cols, 32), 65535));
    if (const cudaError_t e = LaunchDependent(&AbftPassFinishUnitsKernel<T, kPass>, blocks,
                                              32 * kAbftFinishUnits<kPass>, 0, stream, a);
        e != cudaSuccess) {
      return TSM2_FAIL(e, "launching AbftPassFinishUnitsKernel");
    }
  } else if (s.splits > 1) {
    const unsigned blocks =
        static_cast<unsigned>(std::min<int64_t>(CeilDiv(a.cols * 32, 256), 65535));
    if (const cudaError_t e =
            LaunchDependent(&AbftPassFinishKernel<T, kPass>, blocks, 256, 0, stream, a);
        e != cudaSuccess) {
      return TSM2_FAIL(e, "launching AbftPassFinishKernel");
    }
  }
  return Status{};
}

}  // namespace

template <ElemType E, ElemType A>
Status LaunchAbftEncode(const DeviceAbftEncode& p, cudaStream_t stream) {
  using T = CudaType<E>;
  if (p.m < 1 || p.k < 1 || p.n < 1) {
    return TSM2_FAIL(cudaErrorInvalidValue, "LaunchAbftEncode: m, k and n must be >= 1");
  }
  ColsumsPlan a_plan, b_plan;
  TSM2_RETURN_IF_ERROR((PlanPass<T, kAbftPassA, false>(p.m, p.k, &a_plan)));
  TSM2_RETURN_IF_ERROR((PlanPass<T, kAbftPassB, false>(p.k, p.n, &b_plan)));
  const AbftEncodeLayout layout = AbftEncodeLayoutOf(a_plan, b_plan, kAbftDD<T>, p.k, p.n);
  if (static_cast<size_t>(layout.bytes) > p.workspace_bytes) {
    return TSM2_FAIL(cudaErrorInvalidValue, "LaunchAbftEncode: the workspace is too small");
  }
  char* ws = static_cast<char*>(p.workspace);
  AbftPassArgs a{};
  a.data = p.a;
  a.partials = reinterpret_cast<double*>(ws + layout.a_partials);
  a.a_out = reinterpret_cast<double*>(ws + layout.a_stats);
  a.rows = p.m;
  a.cols = p.k;
  a.inv_m = 1.0 / static_cast<double>(p.m);
  a.scale = ChecksumScale(p.m);
  a.acc_f64 = A == ElemType::kF64;
  TSM2_RETURN_IF_ERROR((RunPass<T, kAbftPassA, false>(a, a_plan, stream)));
  AbftPassArgs b{};
  b.data = p.b;
  b.a_values = reinterpret_cast<const double*>(ws + layout.a_stats);
  b.partials = reinterpret_cast<double*>(ws + layout.b_partials);
  b.stats = p.stats;
  b.rows = p.k;
  b.cols = p.n;
  b.scale = ChecksumScale(p.m);
  b.acc_f64 = A == ElemType::kF64;
  return RunPass<T, kAbftPassB, false>(b, b_plan, stream);
}

template <ElemType E, ElemType A>
Status LaunchAbftVerify(const DeviceAbftVerify& p, cudaStream_t stream) {
  using T = CudaType<E>;
  if (p.m < 1 || p.n < 1) {
    return TSM2_FAIL(cudaErrorInvalidValue, "LaunchAbftVerify: m and n must be >= 1");
  }
  ColsumsPlan plan;
  if (p.inject) {
    TSM2_RETURN_IF_ERROR((PlanPass<T, kAbftPassC, true>(p.m, p.n, &plan)));
  } else {
    TSM2_RETURN_IF_ERROR((PlanPass<T, kAbftPassC, false>(p.m, p.n, &plan)));
  }
  const int64_t need = AbftPartialBytes(plan, kAbftSlots<T, kAbftPassC>, p.n);
  if (static_cast<size_t>(need) > p.workspace_bytes) {
    return TSM2_FAIL(cudaErrorInvalidValue, "LaunchAbftVerify: the workspace is too small");
  }
  AbftPassArgs a{};
  a.data = p.c;
  a.partials = static_cast<double*>(p.workspace);
  a.stats = const_cast<void*>(p.stats);
  a.model = p.model;
  a.resid = p.resid;
  a.threshold = p.threshold;
  a.acc_f64 = A == ElemType::kF64;
  a.rows = p.m;
  a.cols = p.n;
  a.inv_m = 1.0 / static_cast<double>(p.m);
  a.scale = ChecksumScale(p.m);
  if (!p.inject) return RunPass<T, kAbftPassC, false>(a, plan, stream);
  // The fault goes into c_out, which must start as C (XLA aliases them).
  if (p.c_out != p.c) {
    const size_t bytes = static_cast<size_t>(p.m) * p.n * sizeof(T);
    TSM2_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(p.c_out, p.c, bytes, cudaMemcpyDeviceToDevice, stream));
  }
  a.data = p.c_out;
  a.data_out = p.c_out;
  a.inject_row = p.inject_row;
  a.inject_col = p.inject_col;
  a.inject_bit = p.inject_bit;
  return RunPass<T, kAbftPassC, true>(a, plan, stream);
}

#define TSM2_ABFT_PASSES_INSTANTIATE(E, A)                                            \
  template Status LaunchAbftEncode<ElemType::E, ElemType::A>(const DeviceAbftEncode&, \
                                                             cudaStream_t);           \
  template Status LaunchAbftVerify<ElemType::E, ElemType::A>(const DeviceAbftVerify&, cudaStream_t);
TSM2_ABFT_PASSES_INSTANTIATE(kF32, kF32)
TSM2_ABFT_PASSES_INSTANTIATE(kF32, kF64)
TSM2_ABFT_PASSES_INSTANTIATE(kF64, kF32)
TSM2_ABFT_PASSES_INSTANTIATE(kF64, kF64)
TSM2_ABFT_PASSES_INSTANTIATE(kBF16, kF32)
TSM2_ABFT_PASSES_INSTANTIATE(kBF16, kF64)
TSM2_ABFT_PASSES_INSTANTIATE(kF16, kF32)
TSM2_ABFT_PASSES_INSTANTIATE(kF16, kF64)
#undef TSM2_ABFT_PASSES_INSTANTIATE

}  // namespace tsm2

// Plans and launches the fused row check (tsm2_abft_rows; row_check.h): the
// row stream with row statistics (the checksum among them), then
// the check (which also adds the splits and stores C) and the repair, each a
// programmatic dependent of the kernel before it.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "ffi/abft/kernels/row_check.cuh"
#include "ffi/abft/launcher.h"
#include "ffi/abft/row_check.h"
#include "ffi/abft/row_check_plan.h"
#include "ffi/common/cuda_types.cuh"
#include "ffi/common/device.h"
#include "ffi/common/pdl.cuh"
#include "ffi/common/plan_math.h"
#include "ffi/common/status.h"
#include "ffi/matmul/kernels/row_stream.cuh"
#include "ffi/matmul/row_stream_plan.h"

namespace tsm2 {
namespace {

template <typename T, int N, int R, int U, int D, int S, int M>
Status RunRows(const DeviceRowCheck& p, cudaStream_t stream) {
  using Acc = AccType<T>;
  int sms = 0, smem_optin = 0;
  TSM2_CUDA_RETURN_IF_ERROR(SmCount(&sms));
  TSM2_CUDA_RETURN_IF_ERROR(SmemPerBlockOptin(&smem_optin));
  const RowStreamPlan rp = PlanRowCheck(sizeof(T), p.m, p.k, p.n, sms, smem_optin);
  if (!rp.ok) {
    return TSM2_FAIL(cudaErrorInvalidConfiguration, "abft rows: B's rows do not fit shared memory");
  }
  if (static_cast<size_t>(RowCheckStateOffset(rp)) + sizeof(RowCheckState) > p.workspace_bytes) {
    return TSM2_FAIL(cudaErrorInvalidValue, "abft rows: the workspace is smaller than planned");
  }
  auto* ws = static_cast<char*>(p.workspace);
  auto* state = reinterpret_cast<RowCheckState*>(ws + RowCheckStateOffset(rp));
  const int64_t sums_bytes = rp.splits * p.m * p.n * static_cast<int64_t>(sizeof(Acc));

  const auto stream_kernel = &Tsm2RowStreamKernel<T, N, R, U, D, S, M, true>;
  int per_sm = 0;
  TSM2_CUDA_RETURN_IF_ERROR(BlocksPerSm(reinterpret_cast<const void*>(stream_kernel),
                                        kRowStreamThreads,
                                        (smem_optin - 64) / M - (M > 1 ? 1024 : 0), &per_sm));
  RowStreamArgs a{};
  a.a = p.a;
  a.b = p.b;
  a.partials = ws;
  a.stats = ws + sums_bytes;
  a.col_weights = p.col_weights;
  a.zero_words = &state->flagged;
  a.m = p.m;
  a.k = p.k;
  a.n = p.n;
  a.k_chunk = rp.k_chunk;
  a.splits = rp.splits;
  a.groups = rp.groups;
  a.units = rp.units;
  a.period = rp.period;
  a.b_t = p.b_t;
  stream_kernel<<<rp.blocks, kRowStreamThreads, rp.smem_bytes, stream>>>(a);
  TSM2_RETURN_IF_LAUNCH_FAILED("Tsm2RowStreamKernel (row statistics)");

  RowCheckArgs c{};
  c.partials = ws;
  c.stats = ws + sums_bytes;
  c.col_weights = p.col_weights;
  c.c = p.c;
  for (int q = 0; q < kRowModelLen; ++q) c.model[q] = p.model[q];
  c.state = state;
  c.m = p.m;
  c.n = p.n;
  c.splits = rp.splits;
  c.inject_row = p.inject_row;
  c.inject_col = p.inject_col;
  c.inject_bit = p.inject_bit;
  const auto check_blocks =
      static_cast<unsigned>(std::min<int64_t>(CeilDiv(p.m, kRowCheckThreads), 8 * sms));
  // The production launch runs the instantiation without the injection.
  TSM2_CUDA_RETURN_IF_ERROR(p.inject_row >= 0
                                ? LaunchDependent(&AbftRowCheckKernel<Acc, N, true>, check_blocks,
                                                  kRowCheckThreads, 0, stream, c)
                                : LaunchDependent(&AbftRowCheckKernel<Acc, N, false>, check_blocks,
                                                  kRowCheckThreads, 0, stream, c));

  RowRepairArgs r{};
  r.a = p.a;
  r.b = p.b;
  r.c = p.c;
  for (int q = 0; q < kRowModelLen; ++q) r.model[q] = p.model[q];
  r.state = state;
  r.m = p.m;
  r.k = p.k;
  r.n = p.n;
  r.b_t = p.b_t;
  r.verdict = p.verdict;
  TSM2_CUDA_RETURN_IF_ERROR(LaunchDependent(&AbftRowRepairKernel<T, N>, kRowCheckMaxRows,
                                            kRowRepairThreads, 0, stream, r));
  return Status{};
}

template <typename T, int NB>
Status RunRowsWidth(const DeviceRowCheck& p, cudaStream_t stream) {
  constexpr RowStreamShape s = RowCheckShapeFor(sizeof(T), NB);
  if constexpr (!s.ok()) {
    return TSM2_FAIL(cudaErrorInvalidValue, "abft rows: no row stream for this width");
  } else {
    return RunRows<T, s.n_b, s.rows, s.vecs, s.depth, s.stages, s.min_blocks>(p, stream);
  }
}

}  // namespace

template <ElemType E>
Status LaunchRowCheck(const DeviceRowCheck& p, cudaStream_t stream) {
  using T = CudaType<E>;
  switch (RowCheckShapeFor(sizeof(T), p.n).n_b) {
    case 1:
      return RunRowsWidth<T, 1>(p, stream);
    case 2:
      return RunRowsWidth<T, 2>(p, stream);
    case 4:
      return RunRowsWidth<T, 4>(p, stream);
    case 8:
      return RunRowsWidth<T, 8>(p, stream);
    case 16:
      return RunRowsWidth<T, 16>(p, stream);
    default:
      return TSM2_FAIL(cudaErrorInvalidValue, "abft rows: n past the widest row stream");
  }
}

template Status LaunchRowCheck<ElemType::kF32>(const DeviceRowCheck&, cudaStream_t);
template Status LaunchRowCheck<ElemType::kF64>(const DeviceRowCheck&, cudaStream_t);
template Status LaunchRowCheck<ElemType::kBF16>(const DeviceRowCheck&, cudaStream_t);
template Status LaunchRowCheck<ElemType::kF16>(const DeviceRowCheck&, cudaStream_t);

}  // namespace tsm2

// Launches the sorted path of the k-means sums (kernels/kmeans_sums_sorted.cuh)
// for a plan with piece > 0 (tiled_plan.h), in the workspace it sizes. Only
// launch_tiled.cu includes this.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ffi/common/status.h"
#include "ffi/kmeans/kernels/kmeans_sums_sorted.cuh"
#include "ffi/kmeans/tiled_launcher.h"
#include "ffi/kmeans/tiled_plan.h"

namespace tsm2 {

template <typename T>
Status LaunchSumsSorted(const DeviceKmeansSums& p, const KmeansSumsPlan& plan,
                        cudaStream_t stream) {
  using Acc = AccType<T>;
  constexpr int kV = 16 / static_cast<int>(sizeof(Acc));
  TSM2_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(p.sums, 0, static_cast<size_t>(p.k * p.d) * sizeof(Acc), stream));
  TSM2_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(p.counts, 0, static_cast<size_t>(p.k) * sizeof(Acc), stream));
  if (p.n == 0) {
    TSM2_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(p.inertia, 0, sizeof(Acc), stream));
    return Status{};
  }
  char* ws = static_cast<char*>(p.workspace);
  int32_t* keys[2] = {reinterpret_cast<int32_t*>(ws + plan.off_keys),
                      reinterpret_cast<int32_t*>(ws + plan.off_keys + Align16(p.n * 4))};
  int32_t* rows[2] = {reinterpret_cast<int32_t*>(ws + plan.off_rows),
                      reinterpret_cast<int32_t*>(ws + plan.off_rows + Align16(p.n * 4))};
  int32_t* count = reinterpret_cast<int32_t*>(ws + plan.off_count);
  Acc* inertia_part = reinterpret_cast<Acc*>(ws + plan.off_inertia);
  const unsigned chunk_blocks = static_cast<unsigned>(CeilDiv(plan.chunks, kSortWarps));
  const unsigned tiles = static_cast<unsigned>(plan.scan_tiles);

  KmeansSortPass s{};
  s.hist = reinterpret_cast<int32_t*>(ws + plan.off_hist);
  s.tiles = reinterpret_cast<int32_t*>(ws + plan.off_tiles);
  s.count = count;
  s.n = p.n;
  s.chunks = plan.chunks;
  s.k = static_cast<int32_t>(p.k);
  for (int pass = 0; pass < plan.passes; ++pass) {
    s.keys_in = pass == 0 ? p.labels : keys[(pass - 1) % 2];
    s.rows_in = pass == 0 ? nullptr : rows[(pass - 1) % 2];
    s.keys_out = keys[pass % 2];
    s.rows_out = rows[pass % 2];
    s.shift = pass * kSortBits;
    KmeansSortHistKernel<Acc><<<chunk_blocks, kSortWarps * 32, 0, stream>>>(
        s, static_cast<const Acc*>(p.w), static_cast<const Acc*>(p.mind),
        pass == 0 ? inertia_part : nullptr);
    TSM2_RETURN_IF_LAUNCH_FAILED("KmeansSortHistKernel");
    KmeansSortScanTilesKernel<<<tiles, 256, 0, stream>>>(s.hist, plan.hist_elems, s.tiles);
    TSM2_RETURN_IF_LAUNCH_FAILED("KmeansSortScanTilesKernel");
    KmeansSortScanDownKernel<<<tiles, 256, 0, stream>>>(s.hist, plan.hist_elems, s.tiles,
                                                        pass == 0 ? count : nullptr);
    TSM2_RETURN_IF_LAUNCH_FAILED("KmeansSortScanDownKernel");
    KmeansSortScatterKernel<<<chunk_blocks, kSortWarps * 32, 0, stream>>>(s);
    TSM2_RETURN_IF_LAUNCH_FAILED("KmeansSortScatterKernel");
  }
  KmeansSortedInertiaKernel<Acc>
      <<<1, 256, 0, stream>>>(inertia_part, plan.chunks, static_cast<Acc*>(p.inertia));
  TSM2_RETURN_IF_LAUNCH_FAILED("KmeansSortedInertiaKernel");

  // A unit's lane group: the 16-byte column chunks of a row, up to a warp.
  const int q = static_cast<int>(KmeansSumsChunks(sizeof(Acc), p.d));
  const int qb = static_cast<int>(Pow2AtLeast(q < 32 ? q : 32));
  KmeansSortedArgs a{};
  a.x = p.x;
  a.w = p.w;
  a.keys = keys[(plan.passes - 1) % 2];
  a.rows = rows[(plan.passes - 1) % 2];
  a.count = count;
  a.sums = p.sums;
  a.counts = p.counts;
  a.d = static_cast<int>(p.d);
  a.q = q;
  a.qb = qb;
  a.colblocks = CeilDiv(q, qb);
  a.x_vec = p.d % kV == 0 && reinterpret_cast<uintptr_t>(p.x) % (kV * sizeof(T)) == 0;
  void* part[2] = {ws + plan.off_part0, ws + plan.off_part1};
  auto blocks_for = [&](int64_t units, unsigned* out) -> Status {
    const int64_t warps = CeilDiv(units, 32 / qb) * a.colblocks;
    const int64_t blocks = CeilDiv(warps, kSumsSortedThreads / 32);
    if (blocks > 0x7fffffff) return TSM2_FAIL(cudaErrorInvalidConfiguration, "too many pieces");
    *out = static_cast<unsigned>(blocks);
    return Status{};
  };
  unsigned blocks = 0;
  a.unit = plan.piece;
  a.out = part[0];
  a.out_units = plan.pieces;
  TSM2_RETURN_IF_ERROR(blocks_for(plan.pieces, &blocks));
  if (a.x_vec) {
    KmeansPieceKernel<T, Acc, true><<<blocks, kSumsSortedThreads, 0, stream>>>(a);
  } else {
    KmeansPieceKernel<T, Acc, false><<<blocks, kSumsSortedThreads, 0, stream>>>(a);
  }
  TSM2_RETURN_IF_LAUNCH_FAILED("KmeansPieceKernel");
  for (int level = 1; level <= plan.levels; ++level) {
    a.sub = a.unit;
    a.unit *= kSumsMergeFan;
    a.in = a.out;
    a.in_units = a.out_units;
    a.out = part[level % 2];
    a.out_units = CeilDiv(p.n, a.unit);
    TSM2_RETURN_IF_ERROR(blocks_for(a.out_units, &blocks));
    KmeansMergeKernel<Acc><<<blocks, kSumsSortedThreads, 0, stream>>>(a);
    TSM2_RETURN_IF_LAUNCH_FAILED("KmeansMergeKernel");
  }
  return Status{};
}

}  // namespace tsm2

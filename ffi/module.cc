// The nanobind module `jax_tsm2._tsm2_ext`: hands the FFI handlers to Python
// (which registers them with XLA), reports what this build contains, and
// exports the C++ definitions Python builds its tables from (kernel and
// layout ids, limits) and the planners' answers (workspace sizes, tiles,
// split and k-means plans), so that Python never restates them.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#ifdef TSM2_WITH_CUDA
#include <cuda_runtime_api.h>

#include "ffi/hostmem/pinning.h"
#include "ffi/hostmem/staging.h"
#endif

#include "ffi/abft/handlers.h"
#include "ffi/abft/plan.h"
#include "ffi/abft/row_check_plan.h"
#include "ffi/common/elem_type.h"
#include "ffi/common/plan_math.h"
#include "ffi/harness/handlers.h"
#include "ffi/hostmem/handlers.h"
#include "ffi/kmeans/handlers.h"
#include "ffi/kmeans/plan.h"
#include "ffi/kmeans/tiled_plan.h"
#include "ffi/matmul/handlers.h"
#include "ffi/matmul/kinds.h"
#include "ffi/matmul/row_stream_plan.h"
#include "ffi/matmul/split_plan.h"
#include "ffi/matmul/tiles.h"
#include "xla/ffi/api/c_api.h"

namespace nb = nanobind;

namespace {

template <typename Fn>
nb::capsule EncapsulateHandler(Fn* fn) {
  return nb::capsule(reinterpret_cast<void*>(fn));
}

// {platform: {target name: capsule}}, the product's targets; platforms are
// the names that jax.ffi.register_ffi_target takes.
nb::dict Registrations() {
  nb::dict cpu;
  cpu["tsm2_matmul"] = EncapsulateHandler(Tsm2MatmulCpu);
  cpu["tsm2_kmeans_step"] = EncapsulateHandler(Tsm2KmeansStepCpu);
  cpu["tsm2_kmeans_step_checked"] = EncapsulateHandler(Tsm2KmeansStepCheckedCpu);
  cpu["tsm2_kmeans_step_checked_inject"] = EncapsulateHandler(Tsm2KmeansStepInjectCpu);
  cpu["tsm2_kmeans_assign"] = EncapsulateHandler(Tsm2KmeansAssignCpu);
  cpu["tsm2_kmeans_sums"] = EncapsulateHandler(Tsm2KmeansSumsCpu);
  cpu["tsm2_colsums"] = EncapsulateHandler(Tsm2ColsumsCpu);
  cpu["tsm2_repair_column"] = EncapsulateHandler(Tsm2RepairColumnCpu);
  cpu["tsm2_abft_judge"] = EncapsulateHandler(Tsm2AbftJudgeCpu);
  cpu["tsm2_abft_encode"] = EncapsulateHandler(Tsm2AbftEncodeCpu);
  cpu["tsm2_abft_verify"] = EncapsulateHandler(Tsm2AbftVerifyCpu);
  cpu["tsm2_abft_verify_inject"] = EncapsulateHandler(Tsm2AbftVerifyInjectCpu);
  cpu["tsm2_abft_rows"] = EncapsulateHandler(Tsm2AbftRowsCpu);
  nb::dict out;
  out["cpu"] = cpu;
#ifdef TSM2_WITH_CUDA
  nb::dict cuda;
  cuda["tsm2_matmul"] = EncapsulateHandler(Tsm2MatmulCuda);
  cuda["tsm2_kmeans_step"] = EncapsulateHandler(Tsm2KmeansStepCuda);
  cuda["tsm2_kmeans_step_checked"] = EncapsulateHandler(Tsm2KmeansStepCheckedCuda);
  cuda["tsm2_kmeans_step_checked_inject"] = EncapsulateHandler(Tsm2KmeansStepInjectCuda);
  cuda["tsm2_kmeans_update"] = EncapsulateHandler(Tsm2KmeansUpdateCuda);
  cuda["tsm2_kmeans_assign"] = EncapsulateHandler(Tsm2KmeansAssignCuda);
  cuda["tsm2_kmeans_sums"] = EncapsulateHandler(Tsm2KmeansSumsCuda);
  cuda["tsm2_colsums"] = EncapsulateHandler(Tsm2ColsumsCuda);
  cuda["tsm2_repair_column"] = EncapsulateHandler(Tsm2RepairColumnCuda);
  cuda["tsm2_abft_judge"] = EncapsulateHandler(Tsm2AbftJudgeCuda);
  cuda["tsm2_abft_encode"] = EncapsulateHandler(Tsm2AbftEncodeCuda);
  cuda["tsm2_abft_verify"] = EncapsulateHandler(Tsm2AbftVerifyCuda);
  cuda["tsm2_abft_verify_inject"] = EncapsulateHandler(Tsm2AbftVerifyInjectCuda);
  cuda["tsm2_abft_rows"] = EncapsulateHandler(Tsm2AbftRowsCuda);
  cuda["tsm2_host_rows"] = EncapsulateHandler(Tsm2HostRowsCuda);
  out["CUDA"] = cuda;
#endif
  return out;
}

// The benchmark harness's own targets (ffi/harness/): its read ceiling and
// its device clock. Not part of the product API: no jax_tsm2 function
// lowers to them, only jax_tsm2.bench and the benchmark scripts call them.
nb::dict HarnessRegistrations() {
  nb::dict out;
#ifdef TSM2_WITH_CUDA
  nb::dict cuda;
  cuda["tsm2_stream_read"] = EncapsulateHandler(Tsm2StreamReadCuda);
  cuda["tsm2_device_clock"] = EncapsulateHandler(Tsm2DeviceClockCuda);
  out["CUDA"] = cuda;
#endif
  return out;
}

// "80,86,90" as [80, 86, 90].
nb::list ArchList(const std::string& csv) {
  nb::list out;
  size_t at = 0;
  while (at < csv.size()) {
    size_t end = csv.find(',', at);
    if (end == std::string::npos) end = csv.size();
    if (end > at) out.append(std::stoi(csv.substr(at, end - at)));
    at = end + 1;
  }
  return out;
}

nb::dict BuildInfo() {
  nb::dict info;
#ifdef TSM2_WITH_CUDA
  info["cuda"] = true;
  info["cuda_version"] = std::string(TSM2_CUDA_VERSION);
  info["cuda_architectures"] = std::string(TSM2_CUDA_ARCHITECTURES);
  // What the library carries, as 10 * major + minor: machine code (runs on
  // GPUs of the same major version and at least this minor) and PTX (which
  // the driver compiles for any GPU of at least this compute capability).
  info["cuda_sass"] = ArchList(TSM2_CUDA_SASS);
  info["cuda_ptx"] = ArchList(TSM2_CUDA_PTX);
#else
  info["cuda"] = false;
  info["cuda_version"] = nb::none();
  info["cuda_architectures"] = nb::none();
  info["cuda_sass"] = nb::list();
  info["cuda_ptx"] = nb::list();
#endif
  info["xla_ffi_api_version"] =
      std::to_string(XLA_FFI_API_MAJOR) + "." + std::to_string(XLA_FFI_API_MINOR);
  info["jax_version"] = std::string(TSM2_JAX_VERSION);
  // Of the kernels' sources (CMakeLists.txt): a calibration records it.
  info["kernels_digest"] = std::string(TSM2_KERNELS_DIGEST);
#if defined(__clang__)
  info["compiler"] = std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  info["compiler"] = std::string("gcc ") + __VERSION__;
#else
  info["compiler"] = std::string("unknown");
#endif
  return info;
}

// The element type Python names `dtype` (numpy's name), or ValueError.
tsm2::ElemType ElemTypeOf(const std::string& dtype) {
  tsm2::ElemType t;
  if (!tsm2::ElemTypeFromName(dtype, &t)) {
    throw nb::value_error(("unsupported dtype " + dtype).c_str());
  }
  return t;
}
int ItemsizeOf(const std::string& dtype) { return tsm2::ItemSize(ElemTypeOf(dtype)); }

tsm2::Kernel KernelOf(int32_t id) {
  tsm2::Kernel k;
  if (!tsm2::KernelFromId(id, &k)) {
    throw nb::value_error(("unknown kernel id " + std::to_string(id)).c_str());
  }
  return k;
}

// Bytes of the `workspace` result a tsm2_matmul call needs on a GPU with
// `sm_count` SMs, compute capability `cc` (10 * major + minor) and
// `smem_optin` bytes of opt-in shared memory per block. R and L
// size it for kMaxRLBlocksPerSm blocks per SM (their planner uses no more
// blocks than it can serve); S and T for their split plan.
constexpr int kMaxRLBlocksPerSm = 4;
int64_t WorkspaceBytes(const std::string& dtype, int32_t kernel, int64_t batch, int64_t m,
                       int64_t k, int64_t n, int sm_count, int cc, int smem_optin) {
  const int itemsize = ItemsizeOf(dtype);
  if (batch < 0 || m < 0 || k < 0 || n < 0) throw nb::value_error("sizes must be >= 0");
  if (sm_count < 1) throw nb::value_error("sm_count must be >= 1");
  const tsm2::Kernel family = KernelOf(kernel);
  switch (family) {
    case tsm2::Kernel::kTsm2r:
    case tsm2::Kernel::kTsm2l: {
      const bool family_l = family == tsm2::Kernel::kTsm2l;
      int64_t partials =
          tsm2::PartialBytesPerBlock(itemsize, k, n, family_l, cc) * kMaxRLBlocksPerSm * sm_count;
      // The row stream's splits, where it runs (nn and nt; R's layouts).
      if (tsm2::UsesRowStream(tsm2::UsesLTile(family_l, k, itemsize), batch, k, n, itemsize)) {
        const tsm2::RowStreamPlan rs = tsm2::PlanRowStream(tsm2::RowStreamShapeFor(itemsize, n),
                                                           itemsize, m, k, n, sm_count, smem_optin);
        if (rs.ok) partials = std::max(partials, rs.workspace_bytes);
      }
      // The tensor-core R tile reads B rearranged, one image per batch entry.
      return partials + (tsm2::UsesRMma(family_l, k, n, itemsize, cc)
                             ? tsm2::RMmaBImageBytes(batch, k, n, itemsize)
                             : 0);
    }
    case tsm2::Kernel::kTsm2s:
      return tsm2::SplitWorkspaceBytes(
          tsm2::SPlan(itemsize, batch, m, k, n, sm_count, cc, smem_optin), itemsize, batch, m, n);
    case tsm2::Kernel::kTsm2t:
      return tsm2::SplitWorkspaceBytes(tsm2::TPlan(itemsize, batch, m, k, n, sm_count), itemsize,
                                       batch, m, n);
  }
  throw nb::value_error(("unknown kernel id " + std::to_string(kernel)).c_str());
}

nb::dict TileDict(const tsm2::TileConfig& t, int itemsize, int nt, bool l_tile) {
  const tsm2::TileFootprint f = tsm2::Footprint(t, itemsize, nt);
  nb::dict d;
  d["l_tile"] = l_tile;
  d["n_tile"] = nt;
  d["rows"] = t.rows;
  d["rows_per_thread"] = t.rows_per_thread;
  d["k_groups"] = t.k_groups;
  d["vec_per_thr"] = t.vec_per_thr;
  d["stages"] = t.stages;
  d["threads"] = f.threads;
  d["chunk_k"] = f.chunk_k;
  d["a_stage_bytes"] = f.a_stage_bytes;
  d["b_stage_bytes"] = f.b_stage_bytes;
  d["red_bytes"] = f.red_bytes;
  d["smem_bytes"] = f.smem_bytes;
  d["min_blocks"] = f.min_blocks;
  return d;
}

// The tile (t1 = chunk_k, t2 = n_tile, t3 = vec_per_thr, ...) that a TSM2R
// or TSM2L call of this shape runs, with its on-chip
// footprint: what the launcher instantiates, read from matmul/tiles.h.
nb::dict TileConfigFor(const std::string& dtype, int32_t kernel, int64_t k, int64_t n) {
  const int itemsize = ItemsizeOf(dtype);
  const tsm2::Kernel family = KernelOf(kernel);
  if (family != tsm2::Kernel::kTsm2r && family != tsm2::Kernel::kTsm2l) {
    throw nb::value_error("tile_config: kernel must be TSM2R or TSM2L");
  }
  const bool family_l = family == tsm2::Kernel::kTsm2l;
  if (k < 1 || n < 1) throw nb::value_error("tile_config: k and n must be >= 1");
  const bool l_tile = tsm2::UsesLTile(family_l, k, itemsize);
  nb::dict d =
      TileDict(tsm2::TileFor(family_l, k, n, itemsize), itemsize, tsm2::NTileFor(n), l_tile);
  // Shapes the row-per-thread kernel takes (when B is shared across a batch).
  const bool row_kernel = tsm2::UsesRowKernel(family_l, k, n, itemsize);
  d["row_kernel"] = row_kernel;
  // Shapes TSM2L's tensor-core tile takes on GPUs with mma.sync (one product,
  // or B shared across the batch; C in the operands' type), where the row
  // kernel does not: its k and n padded to the MMA's.
  const bool l_mma = !row_kernel && tsm2::UsesLMma(family_l, k, n, itemsize, 80, false);
  d["l_mma"] = l_mma;
  if (l_mma) {
    const int kp = tsm2::LMmaKPad(k, itemsize), nt = tsm2::LMmaNTile(itemsize, tsm2::NTileFor(n));
    d["l_mma_k"] = kp;
    d["l_mma_n"] = nt;
    // Its footprint at two stages (the plan deepens the ring on the device).
    nb::dict t;
    t["threads"] = tsm2::kLMmaWarps * 32;
    t["smem_bytes"] = tsm2::LMmaBBytes(itemsize, kp, nt) +
                      2 * tsm2::kLMmaWarps * tsm2::LMmaStageBytes(itemsize, kp);
    t["min_blocks"] = tsm2::LMmaMinBlocks(itemsize, kp, nt);
    d["l_mma_tile"] = t;
  }
  // Shapes the row stream takes (one product, layout nn or nt): its
  // instantiation (row_stream_plan.h).
  if (tsm2::UsesRowStream(l_tile, 1, k, n, itemsize)) {
    const tsm2::RowStreamShape s = tsm2::RowStreamShapeFor(itemsize, n);
    nb::dict rs;
    rs["n_b"] = s.n_b;
    rs["rows"] = s.rows;
    rs["vecs"] = s.vecs;
    rs["depth"] = s.depth;
    rs["stages"] = s.stages;
    rs["min_blocks"] = s.min_blocks;
    rs["threads"] = tsm2::kRowStreamThreads;
    rs["ring_bytes"] = tsm2::RowStreamRingBytes(s);
    d["row_stream"] = rs;
  } else {
    d["row_stream"] = nb::none();
  }
  // Shapes the tensor-core R tile takes on GPUs with mma.sync (sm_80 and
  // later): its n-tile, k per stage and on-chip footprint at two stages.
  const bool mma = tsm2::UsesRMma(family_l, k, n, itemsize, 80);
  d["mma"] = mma;
  if (mma) {
    const int nt = tsm2::RMmaNTile(tsm2::NTileFor(n));
    const int a_stage =
        tsm2::RStageBytes(tsm2::kRMmaRows, tsm2::RStageRowBytes(tsm2::kRMmaSegBytes, true, 0));
    const int b_stage = tsm2::RMmaBStageBytes(itemsize, nt);
    const int red = tsm2::RReduceBytes(tsm2::kRMmaRows, nt, itemsize);
    nb::dict t;
    t["n_tile"] = nt;
    t["rows"] = tsm2::kRMmaRows;
    t["threads"] = tsm2::kRMmaRows / 16 * 32;
    t["chunk_k"] = tsm2::RMmaChunkK(itemsize);
    t["a_stage_bytes"] = a_stage;
    t["b_stage_bytes"] = b_stage;
    t["red_bytes"] = red;
    t["smem_bytes"] = 2 * (a_stage + b_stage) + red;
    t["min_blocks"] = tsm2::RMmaMinBlocks(itemsize, nt);
    d["mma_tile"] = t;
  }
  return d;
}

// The row stream's splits and grid for A[m, k] @ B[k, n] (one product,
// layout nn or nt) on a GPU of sm_count SMs and smem_optin bytes of shared
// memory per block, as its launcher plans them; None where it does not run.
nb::object RowStreamPlanFor(const std::string& dtype, int64_t m, int64_t k, int64_t n, int sm_count,
                            int smem_optin) {
  const int itemsize = ItemsizeOf(dtype);
  if (m < 1 || k < 1 || n < 1) throw nb::value_error("row_stream_plan: sizes must be >= 1");
  if (sm_count < 1) throw nb::value_error("row_stream_plan: sm_count must be >= 1");
  if (!tsm2::UsesRowStream(tsm2::UsesLTile(false, k, itemsize), 1, k, n, itemsize)) {
    return nb::none();
  }
  const tsm2::RowStreamPlan p = tsm2::PlanRowStream(tsm2::RowStreamShapeFor(itemsize, n), itemsize,
                                                    m, k, n, sm_count, smem_optin);
  if (!p.ok) return nb::none();
  nb::dict d;
  d["period"] = p.period;
  d["groups"] = p.groups;
  d["splits"] = p.splits;
  d["k_chunk"] = p.k_chunk;
  d["units"] = p.units;
  d["blocks"] = p.blocks;
  d["smem_bytes"] = p.smem_bytes;
  d["workspace_bytes"] = p.workspace_bytes;
  return d;
}

// Every R and L tile the launcher can instantiate for one dtype, keyed
// "R/nt" and "L/nt/vpt".
nb::dict TileConfigs(const std::string& dtype) {
  const int itemsize = ItemsizeOf(dtype);
  nb::dict out;
  for (int nt = 1; nt <= 64; nt *= 2) {
    out[("R/" + std::to_string(nt)).c_str()] =
        TileDict(tsm2::RTile(itemsize, nt), itemsize, nt, false);
    for (int vpt = 1; vpt <= 8; vpt *= 2) {
      if (vpt * 16 > tsm2::kLMaxRowBytes) break;
      out[("L/" + std::to_string(nt) + "/" + std::to_string(vpt)).c_str()] =
          TileDict(tsm2::LTile(itemsize, nt, vpt), itemsize, nt, true);
    }
  }
  return out;
}

// How the S or T kernel cuts a problem (matmul/split_plan.h).
nb::dict SplitPlanFor(const std::string& dtype, int32_t kernel, int64_t batch, int64_t m, int64_t k,
                      int64_t n, int sm_count, int cc, int smem_optin) {
  const int itemsize = ItemsizeOf(dtype);
  if (sm_count < 1) throw nb::value_error("sm_count must be >= 1");
  if (batch < 1 || m < 1 || k < 1 || n < 1) throw nb::value_error("sizes must be >= 1");
  tsm2::SplitPlan s;
  int threads = 0;
  const tsm2::Kernel family = KernelOf(kernel);
  if (family == tsm2::Kernel::kTsm2s) {
    s = tsm2::SPlan(itemsize, batch, m, k, n, sm_count, cc, smem_optin);
    threads = tsm2::kSThreads;
  } else if (family == tsm2::Kernel::kTsm2t) {
    s = tsm2::TPlan(itemsize, batch, m, k, n, sm_count);
    threads = tsm2::kTThreads;
  } else {
    throw nb::value_error("split_plan: kernel must be 2 (S) or 3 (T)");
  }
  nb::dict d;
  d["tile_m"] = s.tile_m;
  d["tile_n"] = s.tile_n;
  d["tiles_m"] = s.tiles_m;
  d["tiles_n"] = s.tiles_n;
  d["step"] = s.step;
  d["mma"] = s.mma;
  d["cluster"] = s.cluster;
  d["cluster_blocks"] = s.cluster ? tsm2::kSClusterBlocks : 0;
  d["tma"] = s.tma;
  d["flat"] = s.flat;
  d["flat_a"] = s.flat_a;
  d["flat_b"] = s.flat_b;
  d["edge_m"] = s.edge_m;
  d["edge_n"] = s.edge_n;
  d["early_dependents"] = s.early_dependents;
  d["splits"] = s.splits;
  d["split_len"] = s.split_len;
  d["blocks"] = s.Blocks(batch);
  d["threads"] = threads;
  d["workspace_bytes"] = tsm2::SplitWorkspaceBytes(s, itemsize, batch, m, n);
  return d;
}

// How the fused Lloyd step (tsm2_kmeans_step) runs a problem: whether the
// CUDA kernel takes it, its plan and on-chip footprint, and the bytes of the
// `workspace` result on a GPU with sm_count SMs, compute capability cc and
// smem_optin bytes of opt-in shared memory per block (kmeans/plan.h).
nb::dict KmeansPlanFor(const std::string& dtype, int64_t n, int64_t d, int64_t k, int sm_count,
                       int cc, int smem_optin) {
  const int itemsize = ItemsizeOf(dtype);
  if (n < 0 || d < 1 || k < 1) throw nb::value_error("kmeans_plan: need n >= 0, d >= 1, k >= 1");
  if (sm_count < 1) throw nb::value_error("sm_count must be >= 1");
  nb::dict out;
  const bool ok = tsm2::KmeansRunsOn(itemsize, d, k, cc, smem_optin);
  out["supported"] = ok;
  out["max_k"] = tsm2::kKmeansMaxK;
  out["max_d"] = tsm2::kKmeansMaxD;
  // tsm2_kmeans_update takes every shape.
  out["update_workspace_bytes"] = tsm2::KmeansUpdateWorkspaceBytes(k);
  if (!ok) {
    out["workspace_bytes"] = 0;
    return out;
  }
  const tsm2::KmeansPlan p = tsm2::KmeansPlanOf(itemsize, d, k);
  // The kernel the launcher runs for a 16-byte aligned x (XLA's buffers are);
  // the fields below describe the CUDA-core plan, which also sizes the workspace.
  const tsm2::KmeansStep step = tsm2::KmeansStepFor(itemsize, d, k, cc, smem_optin);
  out["step"] = tsm2::KmeansStepName(step);
  if (step == tsm2::KmeansStep::kTensorCoresCluster) {
    out["wide_cluster"] = tsm2::KmeansWideCluster(d);
  }
  out["k_pad"] = p.kp;
  out["vec_class"] = p.cls;  // rows of up to 32 << vec_class vectors
  out["cluster"] = p.cluster;
  out["warps_per_row"] = p.nwc;
  out["vecs_per_lane"] = p.j;
  out["row_groups"] = p.groups;
  out["rows"] = p.tile_rows;  // rows per tile (one warp's or one cluster's)
  out["threads"] = tsm2::kKmeansThreads;
  out["smem_bytes"] = p.smem_bytes;
  out["tiles"] = tsm2::KmeansTiles(p, n);
  out["owners"] = tsm2::KmeansMaxOwners(p, n, sm_count);  // partials in the workspace
  out["workspace_bytes"] = tsm2::KmeansWorkspaceBytes(itemsize, n, d, k, sm_count);
  return out;
}

// The keys of a k-means sums plan both plan bindings report.
void PutSumsPlan(const tsm2::KmeansSumsPlan& s, nb::dict& out) {
  out["piece"] = s.piece;  // 0: one bucket of all k clusters; > 0: the sorted path
  out["bucket"] = s.bucket;
  out["buckets"] = s.buckets;
  out["chunks"] = s.chunks;
  out["sort_passes"] = s.passes;
  out["merge_levels"] = s.levels;
}

// How the k-means step for any k runs (n, d, k) on a GPU with sm_count SMs
// and smem_optin bytes of shared memory per block (kmeans/tiled_plan.h):
// the assignment's plan and workspace (tsm2_kmeans_assign; f32, bf16, f16)
// and the sums' path (piece 0: one bucket of clusters; else sorted rows),
// bucket, chunks and workspace (tsm2_kmeans_sums; any float dtype), which
// Python passes as the sums' attributes.
nb::dict KmeansTiledPlanFor(const std::string& dtype, int64_t n, int64_t d, int64_t k, int sm_count,
                            int64_t smem_optin) {
  const int itemsize = ItemsizeOf(dtype);
  if (n < 0 || d < 1 || k < 1) {
    throw nb::value_error("kmeans_tiled_plan: need n >= 0, d >= 1, k >= 1");
  }
  if (sm_count < 1 || smem_optin < 1) {
    throw nb::value_error("kmeans_tiled_plan: need sm_count >= 1 and smem_optin >= 1");
  }
  nb::dict out;
  const tsm2::KmeansAssignPlan a =
      tsm2::KmeansAssignPlanOf(itemsize, n, d, k, sm_count, smem_optin);
  out["assign_supported"] = a.ok;
  if (a.ok) {
    out["assign_workspace_bytes"] = a.workspace_bytes;
    if (itemsize == 4) {
      out["assign_tf32_copy_bytes"] = tsm2::KmeansAssignTf32CopyBytes(k, d);
      out["assign_refine_bytes"] = tsm2::KmeansAssignRefineBytes(n, k, d);
    }
    out["row_tiles"] = a.row_tiles;
    out["centroid_tiles"] = a.ctiles;
    out["splits"] = a.splits;
    out["resident"] = a.resident;
    out["stages"] = a.stages;
    out["assign_smem_bytes"] = a.smem_bytes;
  }
  const tsm2::KmeansSumsPlan s =
      tsm2::KmeansSumsPlanOf(tsm2::AccSize(itemsize), n, d, k, sm_count, smem_optin);
  out["sums_supported"] = s.ok && (s.piece > 0 || s.buckets <= 65535);
  if (s.ok) {
    PutSumsPlan(s, out);
    out["groups"] = s.groups;
    out["sums_smem_bytes"] = s.smem_bytes;
    out["sums_workspace_bytes"] = s.workspace_bytes;
  }
  return out;
}

// The tsm2_kmeans_sums plan of explicit attributes (bucket, chunks, piece),
// as the targets validate and follow it: its path and workspace bytes.
nb::dict KmeansSumsPlanFor(const std::string& dtype, int64_t n, int64_t d, int64_t k,
                           int64_t bucket, int64_t chunks, int64_t piece) {
  const tsm2::KmeansSumsPlan s =
      tsm2::KmeansSumsPlanWith(tsm2::AccSize(ItemsizeOf(dtype)), n, d, k, bucket, chunks, piece);
  if (!s.ok) {
    throw nb::value_error(
        "kmeans_sums_plan: need n >= 0, d >= 1, k >= 1, bucket >= 1, chunks >= 1, piece >= 0");
  }
  nb::dict out;
  PutSumsPlan(s, out);
  out["workspace_bytes"] = s.workspace_bytes;
  return out;
}

// How tsm2_colsums cuts a problem on a GPU with sm_count SMs, and the bytes
// of its `workspace` result (abft/plan.h). The handler plans for the blocks
// its device actually holds at once, never more splits than this.
nb::dict ColsumsPlanFor(const std::string& dtype, const std::string& acc, int r, int64_t rows,
                        int64_t cols, int sm_count) {
  const int itemsize = ItemsizeOf(dtype);
  const int acc_size = ItemsizeOf(acc);
  if (acc_size < 4) throw nb::value_error("colsums_plan: acc must be float32 or float64");
  if (r < 1 || r > tsm2::kColsumsMaxR) throw nb::value_error("colsums_plan: r must be 1 to 4");
  if (rows < 0 || cols < 0) throw nb::value_error("colsums_plan: sizes must be >= 0");
  if (sm_count < 1) throw nb::value_error("sm_count must be >= 1");
  const tsm2::ColsumsPlan s = tsm2::UpperColsumsPlan(itemsize, acc_size, r, rows, cols, sm_count);
  nb::dict d;
  d["lanes"] = s.lanes;
  d["tile_cols"] = s.tile_cols;
  d["tiles"] = s.tiles;
  d["step"] = s.step;
  d["splits"] = s.splits;
  d["split_len"] = s.split_len;
  d["blocks"] = s.Blocks();
  d["threads"] = tsm2::kColsumsThreads;
  d["workspace_bytes"] = tsm2::ColsumsWorkspaceBytes(s, r, cols, acc_size);
  return d;
}

// What the CUDA driver reports about one device, for the performance model
// (jax_tsm2/model/device.py). Clocks in kHz, as the driver gives them.
nb::dict DeviceProperties(int device) {
#ifdef TSM2_WITH_CUDA
  cudaDeviceProp prop;
  if (cudaError_t e = cudaGetDeviceProperties(&prop, device); e != cudaSuccess) {
    throw std::runtime_error(std::string("cudaGetDeviceProperties: ") + cudaGetErrorString(e));
  }
  auto attr = [device](cudaDeviceAttr a) {
    int v = 0;
    if (cudaError_t e = cudaDeviceGetAttribute(&v, a, device); e != cudaSuccess) {
      throw std::runtime_error(std::string("cudaDeviceGetAttribute: ") + cudaGetErrorString(e));
    }
    return v;
  };
  nb::dict d;
  d["name"] = std::string(prop.name);
  d["cc_major"] = prop.major;
  d["cc_minor"] = prop.minor;
  d["sm_count"] = prop.multiProcessorCount;
  d["regs_per_sm"] = prop.regsPerMultiprocessor;
  d["smem_per_sm"] = static_cast<int64_t>(prop.sharedMemPerMultiprocessor);
  d["smem_per_block_optin"] = static_cast<int64_t>(prop.sharedMemPerBlockOptin);
  d["smem_reserved_per_block"] = static_cast<int64_t>(prop.reservedSharedMemPerBlock);
  d["max_threads_per_sm"] = prop.maxThreadsPerMultiProcessor;
  d["max_blocks_per_sm"] = prop.maxBlocksPerMultiProcessor;
  d["l2_bytes"] = prop.l2CacheSize;
  d["total_memory_bytes"] = static_cast<int64_t>(prop.totalGlobalMem);
  // clockRate and memoryClockRate left cudaDeviceProp in CUDA 13; the
  // attributes remain.
  d["clock_khz"] = attr(cudaDevAttrClockRate);
  d["memory_clock_khz"] = attr(cudaDevAttrMemoryClockRate);
  d["memory_bus_width_bits"] = attr(cudaDevAttrGlobalMemoryBusWidth);
  return d;
#else
  (void)device;
  throw std::runtime_error("device_properties: this build of jax_tsm2 has no CUDA (TSM2_CUDA=OFF)");
#endif
}

#ifdef TSM2_WITH_CUDA
// Pins [address, address + nbytes) of host memory in place (hostmem/pinning.h):
// {"device_ptr": the address the device reads it at, "registered": False when
// an earlier registration covers it (then the caller must not unregister it),
// "read_only": whether the read-only flag took}. RuntimeError with the CUDA
// error when the driver refuses.
nb::dict HostRegister(uintptr_t address, size_t nbytes, int device) {
  const tsm2::HostRegistration r =
      tsm2::RegisterHost(reinterpret_cast<void*>(address), nbytes, device);
  if (r.error != cudaSuccess) {
    throw std::runtime_error(std::string(r.what) + " of " + std::to_string(nbytes) +
                             " bytes failed: " + cudaGetErrorName(r.error) + " (" +
                             cudaGetErrorString(r.error) + ")");
  }
  nb::dict d;
  d["device_ptr"] = r.device_ptr;
  d["registered"] = r.registered_here;
  d["read_only"] = r.read_only;
  return d;
}

// Waits for `device`'s queued work, then releases a registration that
// host_register made.
void HostUnregister(uintptr_t address, int device) {
  const char* what = "";
  if (cudaError_t e = tsm2::UnregisterHost(reinterpret_cast<void*>(address), device, &what);
      e != cudaSuccess) {
    throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorName(e) + " (" +
                             cudaGetErrorString(e) + ")");
  }
}

// Waits for `device`'s queued work, then frees the chunks tsm2_host_rows
// staged from the pinned memory at `device_ptr` (hostmem/staging.h).
void HostRowsRelease(uintptr_t device_ptr, int device) {
  if (cudaError_t e = tsm2::ReleaseStaging(device_ptr, device); e != cudaSuccess) {
    throw std::runtime_error(std::string("releasing the staged chunks failed: ") +
                             cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
  }
}

// (hits, misses) of the staged chunks of `device_ptr`'s readers, or None.
nb::object HostRowsStagingCounts(uintptr_t device_ptr, int device) {
  int64_t hits = 0, misses = 0;
  if (!tsm2::StagingCounts(device_ptr, device, &hits, &misses)) return nb::none();
  return nb::make_tuple(hits, misses);
}
#endif

// The definitions Python builds its tables from (jax_tsm2/_ffi.py): kernel
// and layout ids (matmul/kinds.h), which layouts each kernel reads, and the
// limits the router and the model must respect.
void ExportDefinitions(nb::module_& m) {
  nb::dict kernels, layouts, kernel_layouts, limits, itemsizes;
  for (tsm2::Kernel k : tsm2::kKernels) {
    kernels[tsm2::KernelName(k)] = static_cast<int32_t>(k);
    nb::list takes;
    for (tsm2::Layout l : tsm2::kLayouts) {
      if (tsm2::KernelTakesLayout(k, l)) takes.append(tsm2::LayoutName(l));
    }
    kernel_layouts[tsm2::KernelName(k)] = nb::tuple(takes);
  }
  for (tsm2::Layout l : tsm2::kLayouts) layouts[tsm2::LayoutName(l)] = static_cast<int32_t>(l);
  for (tsm2::ElemType t : tsm2::kElemTypes) itemsizes[tsm2::ElemTypeName(t)] = tsm2::ItemSize(t);
  limits["s_max_m"] = tsm2::kSMaxM;
  limits["l_max_row_bytes"] = tsm2::kLMaxRowBytes;
  limits["default_sm_count"] = tsm2::kDefaultSmCount;
  limits["kmeans_max_k"] = tsm2::kKmeansMaxK;
  limits["kmeans_max_d"] = tsm2::kKmeansMaxD;
  limits["kmeans_default_smem_optin"] = tsm2::kKmeansDefaultSmemOptin;
  limits["colsums_max_r"] = tsm2::kColsumsMaxR;
  m.attr("KERNELS") = kernels;
  m.attr("LAYOUTS") = layouts;
  m.attr("KERNEL_LAYOUTS") = kernel_layouts;
  m.attr("ITEMSIZES") = itemsizes;
  m.attr("LIMITS") = limits;
}

}  // namespace

NB_MODULE(_tsm2_ext, m) {
  m.doc() = "XLA FFI handlers of jax_tsm2 (tall-and-skinny matrix products).";
  ExportDefinitions(m);
  m.def("registrations", &Registrations,
        "Returns {platform: {target_name: PyCapsule}} for jax.ffi.register_ffi_target.");
  m.def("harness_registrations", &HarnessRegistrations,
        "The benchmark harness's private targets (read ceiling, device clock), as registrations.");
  m.def("build_info", &BuildInfo, "What this build of the extension contains.");
#ifdef TSM2_WITH_CUDA
  // Absent from CPU-only builds: Python then streams with device_put.
  m.def("host_register", &HostRegister, nb::arg("address"), nb::arg("nbytes"), nb::arg("device"),
        "Pins host memory in place for tsm2_host_rows: {device_ptr, registered, read_only}.");
  m.def("host_unregister", &HostUnregister, nb::arg("address"), nb::arg("device"),
        "Waits for the device's work, then releases a registration host_register made.");
  m.def("host_rows_release", &HostRowsRelease, nb::arg("device_ptr"), nb::arg("device"),
        "Waits for the device's work, then frees the chunks tsm2_host_rows staged from the "
        "pinned memory at device_ptr.");
  m.def("host_rows_staging_counts", &HostRowsStagingCounts, nb::arg("device_ptr"),
        nb::arg("device"),
        "(hits, misses): reads of device_ptr's chunks served from a copy made ahead, and not; "
        "None where no reader has staging. Synchronizes the device.");
#endif
  m.def("workspace_bytes", &WorkspaceBytes, nb::arg("dtype"), nb::arg("kernel"), nb::arg("batch"),
        nb::arg("m"), nb::arg("k"), nb::arg("n"), nb::arg("sm_count"),
        nb::arg("cc") = tsm2::kDefaultCc, nb::arg("smem_optin") = tsm2::kDefaultSmemOptin,
        "Bytes of the `workspace` result of a tsm2_matmul call on a GPU with sm_count SMs, "
        "compute capability cc (10 * major + minor) and smem_optin bytes of shared memory.");
  m.def("tile_config", &TileConfigFor, nb::arg("dtype"), nb::arg("kernel"), nb::arg("k"),
        nb::arg("n"), "The R or L tile (and its on-chip footprint) a call of this shape runs.");
  m.def("row_stream_plan", &RowStreamPlanFor, nb::arg("dtype"), nb::arg("m"), nb::arg("k"),
        nb::arg("n"), nb::arg("sm_count") = tsm2::kDefaultSmCount,
        nb::arg("smem_optin") = tsm2::kDefaultSmemOptin,
        "The row stream's splits and grid for one product of this shape, or None where it "
        "does not run.");
  m.def("tile_configs", &TileConfigs, nb::arg("dtype"),
        "Every R and L tile the launcher instantiates for dtype, keyed 'R/nt' and 'L/nt/vpt'.");
  m.def("split_plan", &SplitPlanFor, nb::arg("dtype"), nb::arg("kernel"), nb::arg("batch"),
        nb::arg("m"), nb::arg("k"), nb::arg("n"), nb::arg("sm_count"),
        nb::arg("cc") = tsm2::kDefaultCc, nb::arg("smem_optin") = tsm2::kDefaultSmemOptin,
        "How the S (2) or T (3) kernel splits a problem into blocks (matmul/split_plan.h).");
  m.def("kmeans_plan", &KmeansPlanFor, nb::arg("dtype"), nb::arg("n"), nb::arg("d"), nb::arg("k"),
        nb::arg("sm_count"), nb::arg("cc") = tsm2::kDefaultCc,
        nb::arg("smem_optin") = tsm2::kDefaultSmemOptin,
        "Whether the fused k-means step takes (d, k) on a GPU (cc, smem_optin), its variant, "
        "and its workspace bytes.");
  m.def("kmeans_tiled_plan", &KmeansTiledPlanFor, nb::arg("dtype"), nb::arg("n"), nb::arg("d"),
        nb::arg("k"), nb::arg("sm_count"), nb::arg("smem_optin"),
        "How the k-means step for any k (tsm2_kmeans_assign, tsm2_kmeans_sums) runs a shape.");
  m.def("kmeans_sums_plan", &KmeansSumsPlanFor, nb::arg("dtype"), nb::arg("n"), nb::arg("d"),
        nb::arg("k"), nb::arg("bucket"), nb::arg("chunks"), nb::arg("piece"),
        "The tsm2_kmeans_sums plan of explicit attributes and its workspace bytes.");
  m.def("colsums_plan", &ColsumsPlanFor, nb::arg("dtype"), nb::arg("acc"), nb::arg("r"),
        nb::arg("rows"), nb::arg("cols"), nb::arg("sm_count"),
        "How tsm2_colsums splits a problem, and its workspace bytes (abft/plan.h).");
  m.def(
      "abft_encode_workspace",
      [](const std::string& dtype, int64_t m, int64_t k, int64_t n, int sm_count) {
        if (m < 0 || k < 0 || n < 0 || sm_count < 1) throw nb::value_error("bad sizes");
        return tsm2::AbftEncodeWorkspaceBytes(ItemsizeOf(dtype), m, k, n, sm_count);
      },
      nb::arg("dtype"), nb::arg("m"), nb::arg("k"), nb::arg("n"), nb::arg("sm_count"),
      "Bytes of tsm2_abft_encode's workspace (abft/plan.h).");
  m.def(
      "abft_verify_workspace",
      [](const std::string& dtype, int64_t m, int64_t n, int sm_count) {
        if (m < 0 || n < 0 || sm_count < 1) throw nb::value_error("bad sizes");
        return tsm2::AbftVerifyWorkspaceBytes(ItemsizeOf(dtype), m, n, sm_count);
      },
      nb::arg("dtype"), nb::arg("m"), nb::arg("n"), nb::arg("sm_count"),
      "Bytes of tsm2_abft_verify's workspace (abft/plan.h).");
  m.def(
      "abft_rows_workspace",
      [](const std::string& dtype, int64_t m, int64_t k, int64_t n, int sm_count,
         int smem_optin) -> nb::object {
        if (m < 0 || k < 0 || n < 0 || sm_count < 1) throw nb::value_error("bad sizes");
        int64_t bytes = 0;
        if (!tsm2::RowCheckWorkspaceBytes(ItemsizeOf(dtype), m, k, n, sm_count, smem_optin,
                                          &bytes)) {
          return nb::none();
        }
        return nb::int_(bytes);
      },
      nb::arg("dtype"), nb::arg("m"), nb::arg("k"), nb::arg("n"), nb::arg("sm_count"),
      nb::arg("smem_optin"),
      "Bytes of tsm2_abft_rows's workspace (abft/row_check_plan.h); None where the fused row "
      "check does not take the product.");
  m.def(
      "repair_blocks", [](int64_t m) { return tsm2::RepairBlocks(m); }, nb::arg("m"),
      "Blocks of tsm2_repair_column for m rows: the length of its s32 workspace.");
  m.def(
      "judge_state_size", [](int64_t m) { return tsm2::JudgeStateSize(m); }, nb::arg("m"),
      "Length of tsm2_abft_judge's s32 state for m rows.");
  m.def("device_properties", &DeviceProperties, nb::arg("device") = 0,
        "What the CUDA driver reports about a device (RuntimeError without CUDA).");
}

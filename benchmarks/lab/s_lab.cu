// S lab: the production TSM2S kernels (C[m, n] = A[m, k] @ B[k, n], bf16, m <=
// 16, a large row-major B) under tuning variants, timed beside a plain read
// of B, so that one build compares the library's S plan with what it would
// be with other choices: the cluster kernel's ring, PDL, the tensor-map
// kernel's early dependents, and each kernel on its own (tensor maps off,
// clusters off). Every variant is the production planner and launcher
// (ffi/matmul/plan.cuh) instantiated with a tuning struct derived from
// STuning (ffi/matmul/split_plan.h).
//
// Each launch reads its own copy of B (the copies total >= 4x the L2, so B
// comes from DRAM), timed back to back on a stream and as a replayed CUDA
// graph (kernels follow each other with no host in between, as XLA's do); the
// graph's time is the one to compare with the harness.
//
// Built with TSM2_TRACE (cmake -DTSM2_TRACE=ON) and run with SC_TRACE=1, it
// also prints a per-block timeline of one launch of each cluster-kernel plan
// (the kernel's TSM2_TRACE_STAMP marks: entry, first stage landed, main loop
// done, partial sums shared, outputs written, exit). A filter containing
// "probe" adds the copy-only tensor-map probes (RunProbes). SC_A_ROTATE=1,
// SC_C_ROTATE=1 give each launch its own A or C too (SC_A_COPIES,
// SC_C_COPIES, SC_AC_COPIES: how many), and SC_CHILD=1 records each launch
// as a child graph, as XLA's command buffers record a custom call.
//
// Build (benchmarks/lab/README.md): cmake -DTSM2_BUILD_LAB=ON, or nvcc alone:
//   nvcc -O3 -std=c++17 -arch=sm_90 --expt-relaxed-constexpr -I. \
//     benchmarks/lab/s_lab.cu ffi/harness/launch.cu -o build/labs/s_lab
//   build/labs/s_lab [filter] [k] [n]    # filter: comma-separated substrings
#include <cuda.h>  // CUtensorMap and its enums (types only: nothing links libcuda)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "benchmarks/lab/lab_common.cuh"
#include "ffi/common/cluster_pipe.cuh"
#include "ffi/common/trace.h"
#include "ffi/matmul/plan.cuh"

namespace {

using bf16 = __nv_bfloat16;

constexpr double kPeakGbs = 3080.0;  // H100 80GB HBM3, our read ceiling

// The S tuning variants (ffi/matmul/split_plan.h STuning).
struct ClusterStages6 : tsm2::STuning {
  static constexpr int kClusterStages = 6;
};
struct ClusterRows64x8 : tsm2::STuning {
  static constexpr int kClusterRows = 64;
  static constexpr int kClusterStages = 8;
};
struct NoPdl : tsm2::STuning {
  static constexpr bool kPdl = false;
};
struct NoTmaEarly : tsm2::STuning {
  static constexpr bool kTmaEarly = false;
};
struct NoTma : tsm2::STuning {
  static constexpr bool kTma = false;
};
struct NoTmaNoCluster : NoTma {
  static constexpr bool kCluster = false;
};
struct CudaCoresOnly : NoTmaNoCluster {
  static constexpr int kMmaMinM = 17;  // no m reaches it
};
template <typename S_>
struct WithS : tsm2::MatmulTuning {
  using S = S_;
};

// cuTensorMapEncodeTiled through the runtime's driver entry point.
using EncodeFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                              const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                              const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                              CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
EncodeFn Encoder() {
  static EncodeFn fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found;
    CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                           &found));
    return reinterpret_cast<EncodeFn>(f);
  }();
  return fn;
}
// A bf16 row-major [rows][cols] matrix as a tensor map of box_rows x 64
// boxes with the 128-byte swizzle.
CUtensorMap EncodeBf16(const void* ptr, int64_t rows, int64_t cols, int box_rows) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t stride[1] = {static_cast<cuuint64_t>(cols) * 2};
  const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(box_rows)}, unit[2] = {1, 1};
  const CUresult r =
      Encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(ptr), dims, stride,
                box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::printf("cuTensorMapEncodeTiled failed: %d\n", static_cast<int>(r));
    std::exit(1);
  }
  return map;
}

// ref[i, j] = sum_kk A[i, kk] B[kk, j], accumulated in double.
__global__ void ReferenceKernel(const bf16* a, const bf16* b, float* ref, int m, int k, int n) {
  const int64_t o = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (o >= int64_t{m} * n) return;
  const int64_t i = o / n, j = o % n;
  double s = 0;
  for (int64_t kk = 0; kk < k; ++kk) {
    s += static_cast<double>(__bfloat162float(a[i * k + kk])) *
         static_cast<double>(__bfloat162float(b[kk * n + j]));
  }
  ref[o] = static_cast<float>(s);
}

// Largest |c - ref| / max(|ref|, 1) over the m x n outputs (NaN: 1e30).
__global__ void ErrorKernel(const bf16* c, const float* ref, int64_t count, unsigned* worst) {
  const int64_t o = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (o >= count) return;
  float err = fabsf(__bfloat162float(c[o]) - ref[o]) / fmaxf(fabsf(ref[o]), 1.0f);
  if (!(err == err)) err = 1e30f;
  atomicMax(worst, __float_as_uint(err));  // non-negative floats order as their bits
}

struct Lab {
  int k = 4096, n = 4096;
  int64_t b_elems = 0, b_stride = 0, copies = 1;
  // Copies of A and of C: SC_A_COPIES / SC_C_COPIES, else SC_AC_COPIES, else
  // `copies` (the harness gives each of its up to 256 products its own).
  int64_t a_copies = 1, c_copies = 1;
  bf16* a = nullptr;     // [16][k]: the problem with m rows uses the first m
  bf16* b = nullptr;     // `copies` copies of [k][n]
  bf16* c = nullptr;     // [16][n]
  float* ref = nullptr;  // [16][n], for A's 16 rows (a prefix serves every m)
  unsigned* worst = nullptr;
  uint32_t* sink = nullptr;
  uint64_t* trace = nullptr;      // kTraceWords per block of a traced launch (TSM2_TRACE)
  cudaStream_t stream = nullptr;  // every timed launch (blocking: it orders with the legacy stream)
  bool tracing = false;           // built with TSM2_TRACE and SC_TRACE=1 in the environment
  void* ws = nullptr;
  size_t ws_bytes = size_t{64} << 20;
  int sms = 0;
  const char* filter = nullptr;

  const bf16* B(int64_t copy) const { return b + (copy % copies) * b_stride; }
  // SC_A_ROTATE=1: A too is a different copy each launch, as in the harness
  // (on an H100 it changed nothing for the tensor-map kernel).
  bool rotate_a = false;
  const bf16* A(int64_t copy) const { return a + (rotate_a ? copy % a_copies : 0) * 16 * k; }
  // SC_C_ROTATE=1: each launch writes its own C, as each product in the
  // harness does (C(0) is `c`, which the error check reads).
  bool rotate_c = false;
  bf16* C(int64_t copy) const { return c + (rotate_c ? copy % c_copies : 0) * 16 * n; }
  // SC_CHILD=1: the timed graph holds each launch as a child graph of its
  // own, as XLA's command buffers record a custom call.
  bool child_graphs = false;
};

// Per-launch seconds over 200 launches (after 20), launch i on copy i of B
// (the copies total >= 4x the L2, so B comes from DRAM), timed twice: back to
// back on lab.stream (the host's launch cost can show between kernels), and
// the same launches captured in a CUDA graph and replayed (kernels follow
// each other with no host in between, as XLA's do: its kernel timelines show
// ~0.03 us gaps). The graph's time is the one to compare with the harness.
struct Timing {
  double graph = 0, stream = 0;  // seconds per launch
};
template <typename F>
Timing TimeRotating(const Lab& lab, const F& launch) {
  constexpr int kWarm = 20, kTimed = 200;
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  auto elapsed = [&] {
    CHECK(cudaEventSynchronize(e1));
    CHECK(cudaGetLastError());
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    return ms * 1e-3 / kTimed;
  };
  Timing t;
  int64_t turn = 0;
  for (int i = 0; i < kWarm; ++i) launch(turn++);
  CHECK(cudaEventRecord(e0, lab.stream));
  for (int i = 0; i < kTimed; ++i) launch(turn++);
  CHECK(cudaEventRecord(e1, lab.stream));
  t.stream = elapsed();

  cudaGraph_t graph;
  cudaGraphExec_t exec;
  if (lab.child_graphs) {
    CHECK(cudaGraphCreate(&graph, 0));
    cudaGraphNode_t prev = nullptr;
    for (int i = 0; i < kTimed; ++i) {
      cudaGraph_t one;
      CHECK(cudaStreamBeginCapture(lab.stream, cudaStreamCaptureModeThreadLocal));
      launch(turn++);
      CHECK(cudaStreamEndCapture(lab.stream, &one));
      cudaGraphNode_t node;
      CHECK(cudaGraphAddChildGraphNode(&node, graph, prev ? &prev : nullptr, prev ? 1 : 0, one));
      CHECK(cudaGraphDestroy(one));  // the node holds its own copy
      prev = node;
    }
  } else {
    CHECK(cudaStreamBeginCapture(lab.stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < kTimed; ++i) launch(turn++);
    CHECK(cudaStreamEndCapture(lab.stream, &graph));
  }
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphLaunch(exec, lab.stream));  // warm-up replay
  CHECK(cudaEventRecord(e0, lab.stream));
  CHECK(cudaGraphLaunch(exec, lab.stream));
  CHECK(cudaEventRecord(e1, lab.stream));
  t.graph = elapsed();
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaEventDestroy(e0));
  CHECK(cudaEventDestroy(e1));
  return t;
}

// Fills C with garbage, runs one launch (on copy 0) and returns the worst error.
template <typename F>
double WorstError(const Lab& lab, int m, const F& launch) {
  CHECK(cudaMemset(lab.c, 0xff, size_t{16} * lab.n * sizeof(bf16)));
  launch(int64_t{0});
  CHECK(cudaMemset(lab.worst, 0, sizeof(unsigned)));
  const int64_t outs = int64_t{m} * lab.n;
  ErrorKernel<<<static_cast<unsigned>((outs + 255) / 256), 256>>>(lab.c, lab.ref, outs, lab.worst);
  unsigned bits = 0;
  CHECK(cudaMemcpy(&bits, lab.worst, sizeof bits, cudaMemcpyDeviceToHost));
  float err;
  std::memcpy(&err, &bits, sizeof err);
  return err;
}

void Report(const Lab& lab, const char* name, int m, const Timing& t, double bytes, double err) {
  const double gbs = bytes / t.graph * 1e-9;
  std::printf("%-30s %3d %6d %6d %8.2f us %7.0f GB/s %6.1f %%  err %.2e  (stream %.2f us)%s\n",
              name, m, lab.k, lab.n, t.graph * 1e6, gbs, 100.0 * gbs / kPeakGbs, err,
              t.stream * 1e6, err > 1e-2 ? "  FAIL" : "");
  std::fflush(stdout);
}

double ProductBytes(const Lab& lab, int m) {
  return 2.0 * (static_cast<double>(m) * lab.k + static_cast<double>(lab.k) * lab.n +
                static_cast<double>(m) * lab.n);
}

void TryRead(const Lab& lab) {
  const char* name = "read B";
  if (!lab::Wanted(name, lab.filter)) return;
  auto launch = [&](int64_t turn) {
    CHECK_STATUS(
        tsm2::LaunchStreamRead(lab.B(turn), lab.b_elems * 2, lab.sink, lab.sms * 8, lab.stream));
  };
  const Timing sec = TimeRotating(lab, launch);
  Report(lab, name, 0, sec, 2.0 * lab.b_elems, 0.0);
}

#ifdef TSM2_TRACE
using tsm2::trace::kTraceWords;
constexpr int kMarks = 6;  // TSM2_TRACE_STAMP(0..5) in kernels/small_left_cluster.cuh

// Runs one launch with the block stamps on (ffi/common/trace.h; after
// warm-up launches, on a copy of B not in the L2) and prints where the time
// went: the kernel's span, how late blocks started, how long their first
// stage took to land, their main loops and their reduction tails, and
// whether blocks that shared an SM ran longer than blocks alone on theirs.
template <typename F>
void TraceLaunch(const Lab& lab, const char* name, int m, int blocks, int cluster,
                 const F& launch) {
  for (int64_t turn = 1; turn <= 20; ++turn) launch(turn);
  CHECK(tsm2::trace::SetStampBuffer(lab.trace));
  launch(int64_t{21});
  CHECK(cudaDeviceSynchronize());
  CHECK(tsm2::trace::SetStampBuffer(nullptr));
  std::vector<uint64_t> t(static_cast<size_t>(blocks) * kTraceWords);
  CHECK(cudaMemcpy(t.data(), lab.trace, t.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost));
  auto at = [&](int b, int w) { return t[static_cast<size_t>(b) * kTraceWords + w]; };
  uint64_t t0 = ~uint64_t{0}, t1 = 0;
  std::vector<int> per_sm(1024, 0);
  for (int b = 0; b < blocks; ++b) {
    t0 = std::min(t0, at(b, 1));
    t1 = std::max(t1, at(b, kMarks));
    ++per_sm[at(b, 0) % 1024];
  }
  // Phases between consecutive marks (us), per block.
  const char* kPhase[kMarks - 1] = {"first stage", "loop", "share", "reduce", "exit"};
  std::vector<double> enter, phase[kMarks - 1], loop_shared, loop_alone;
  for (int b = 0; b < blocks; ++b) {
    enter.push_back((at(b, 1) - t0) * 1e-3);
    for (int q = 0; q < kMarks - 1; ++q) phase[q].push_back((at(b, 2 + q) - at(b, 1 + q)) * 1e-3);
    (per_sm[at(b, 0) % 1024] > 1 ? loop_shared : loop_alone).push_back(phase[1].back());
  }
  auto med = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  auto mx = [](const std::vector<double>& v) {
    return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end());
  };
  int shared_sms = 0, used_sms = 0;
  for (int c : per_sm) {
    used_sms += c > 0;
    shared_sms += c > 1;
  }
  std::printf("trace %-28s m=%2d span %5.2f us | enter max %4.2f", name, m, (t1 - t0) * 1e-3,
              mx(enter));
  for (int q = 0; q < kMarks - 1; ++q) {
    std::printf(" | %s %4.2f (max %4.2f)", kPhase[q], med(phase[q]), mx(phase[q]));
  }
  std::printf(" | %d SMs, %d with 2+ blocks: loop %4.2f shared, %4.2f alone\n", used_sms,
              shared_sms, med(loop_shared), med(loop_alone));
  if (m == 1) {  // one line per cluster: SMs, and start / loop end / exit offsets in us
    for (int c0 = 0; c0 < blocks; c0 += cluster) {
      std::printf("#   cluster %3d:", c0 / cluster);
      for (int b = c0; b < c0 + cluster; ++b) {
        std::printf(" sm%3llu%s %4.1f/%4.1f/%4.1f", static_cast<unsigned long long>(at(b, 0)),
                    per_sm[at(b, 0) % 1024] > 1 ? "*" : " ", (at(b, 1) - t0) * 1e-3,
                    (at(b, 3) - t0) * 1e-3, (at(b, kMarks) - t0) * 1e-3);
      }
      std::printf("\n");
    }
  }
  std::fflush(stdout);
}
#endif

// Copy-only probe: blocks stream column strips of B, NCB boxes
// of 64 columns side by side (runs of 128 * NCB bytes of each row) and ROWS
// rows a stage, over one KC-th of the rows (blockIdx.y), through a producer
// warp and an mbarrier ring as in small_left_tma.cuh, with consumers that
// only release the stages. It asks what the access pattern alone costs against a plain read.
template <int NCB, int ROWS, int S>
__global__ void __launch_bounds__(288, 1)
    ScTmaProbeKernel(const __grid_constant__ CUtensorMap b_map, int k, int kc) {
  constexpr int kStage = NCB * ROWS * 128;
  extern __shared__ __align__(16) char smem_raw[];
  const uint32_t raw = tsm2::SmemAddr(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  const uint32_t full = base + S * kStage, empty = full + 8 * S;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int rows = k / kc, steps = rows / ROWS, r_begin = blockIdx.y * rows;
  const int col0 = blockIdx.x * NCB * 64;
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      tsm2::MbarInit(full + 8 * s, 1);
      tsm2::MbarInit(empty + 8 * s, 8);
    }
    tsm2::MbarInitFence();
  }
  __syncthreads();
  if (warp == 8) {
    if (lane == 0) {
      for (int it = 0; it < steps; ++it) {
        const int s = it % S;
        if (it >= S) tsm2::MbarWait(empty + 8 * s, (it / S - 1) & 1);
        tsm2::MbarArriveExpectTx(full + 8 * s, kStage);
#pragma unroll
        for (int b = 0; b < NCB; ++b) {
          tsm2::TmaLoad2d(base + s * kStage + b * ROWS * 128, &b_map, col0 + 64 * b,
                          r_begin + it * ROWS, full + 8 * s);
        }
      }
    }
  } else {
    for (int it = 0; it < steps; ++it) {
      const int s = it % S;
      tsm2::MbarWait(full + 8 * s, (it / S) & 1);
      __syncwarp();
      if (lane == 0) tsm2::MbarArrive(empty + 8 * s);
    }
  }
}

template <int NCB, int ROWS, int S>
void TryProbe(const Lab& lab, int kc) {
  char name[96];
  std::snprintf(name, sizeof name, "probe runs%d r%d s%d kc%d", NCB * 128, ROWS, S, kc);
  if (!lab.filter || !std::strstr(lab.filter, "probe")) return;  // only when asked for
  if (!lab::Wanted(name, lab.filter)) return;
  if (lab.n % (64 * NCB) != 0 || lab.k % (kc * ROWS) != 0) return;
  std::vector<CUtensorMap> b_maps;
  for (int64_t i = 0; i < lab.copies; ++i)
    b_maps.push_back(EncodeBf16(lab.B(i), lab.k, lab.n, ROWS));
  const int smem = 1024 + S * NCB * ROWS * 128 + 16 * S;
  auto kernel = ScTmaProbeKernel<NCB, ROWS, S>;
  CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                             cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  cudaLaunchConfig_t cfg{};
  cudaLaunchAttribute attr[2];
  cfg.gridDim = dim3(lab.n / (64 * NCB), kc, 1);
  cfg.blockDim = dim3(288, 1, 1);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = lab.stream;
  tsm2::SetClusterLaunch(&cfg, attr, 1, /*pdl=*/false);
  int per_sm = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 288, smem));
  auto launch = [&](int64_t turn) {
    CHECK(cudaLaunchKernelEx(&cfg, kernel, b_maps[turn % lab.copies], lab.k, kc));
  };
  const Timing sec = TimeRotating(lab, launch);
  char label[128];
  std::snprintf(label, sizeof label, "%s (%d blocks, %d/SM)", name, (lab.n / (64 * NCB)) * kc,
                per_sm);
  Report(lab, label, 0, sec, 2.0 * lab.b_elems, 0.0);
}

void RunProbes(const Lab& lab) {
  TryProbe<1, 128, 4>(lab, 1);
  TryProbe<1, 128, 4>(lab, 2);
  TryProbe<1, 128, 8>(lab, 1);
  TryProbe<1, 128, 8>(lab, 2);
  TryProbe<2, 64, 8>(lab, 1);
  TryProbe<2, 64, 8>(lab, 2);
  TryProbe<4, 32, 8>(lab, 2);
  TryProbe<4, 32, 8>(lab, 4);
  TryProbe<8, 16, 8>(lab, 4);
  TryProbe<8, 16, 8>(lab, 8);
  TryProbe<1, 256, 4>(lab, 2);
  TryProbe<1, 128, 6>(lab, 1);
  TryProbe<1, 128, 6>(lab, 2);
}

// The production S plan with tuning STune, launched as the FFI handler does
// (PlanMatmulWith, then LaunchMatmul), on a rotating copy of B.
template <typename STune>
void TryLib(Lab& lab, int m, const char* variant) {
  char name[96];
  std::snprintf(name, sizeof name, "lib S %s", variant);
  if (!lab::Wanted(name, lab.filter)) return;
  tsm2::DeviceMatmul p;
  p.a = lab.a;
  p.b = lab.b;
  p.c = lab.c;
  p.m = m;
  p.k = lab.k;
  p.n = lab.n;
  p.layout = tsm2::Layout::kNN;
  p.workspace = lab.ws;
  p.workspace_bytes = lab.ws_bytes;
  tsm2::MatmulPlan plan;
  CHECK_STATUS((tsm2::PlanMatmulWith<bf16, WithS<STune>>(p, tsm2::Kernel::kTsm2s, &plan)));
  auto launch = [&](int64_t turn) {
    tsm2::DeviceMatmul q = p;
    q.b = lab.B(turn);
    q.a = lab.A(turn);
    q.c = lab.C(turn);
    CHECK_STATUS(tsm2::LaunchMatmul(q, plan, lab.stream));
  };
  const double err = WorstError(lab, m, launch);
  const Timing sec = TimeRotating(lab, launch);
#ifdef TSM2_TRACE
  if (lab.tracing && plan.split.cluster) {
    TraceLaunch(lab, name, m, plan.blocks, tsm2::kSClusterBlocks, launch);
  }
#endif
  if (m == 1) {
    std::printf("# %s: %s, blocks %d, splits %lld, tile_n %lld\n", name, plan.kernel_name,
                plan.blocks, static_cast<long long>(plan.split.splits),
                static_cast<long long>(plan.split.tile_n));
  }
  Report(lab, name, m, sec, ProductBytes(lab, m), err);
}

void RunM(Lab& lab, int m) {
  TryLib<tsm2::STuning>(lab, m, "production");
  TryLib<ClusterStages6>(lab, m, "cluster 6 stages");
  TryLib<ClusterRows64x8>(lab, m, "cluster 64 rows x 8");
  TryLib<NoPdl>(lab, m, "no pdl");
  TryLib<NoTmaEarly>(lab, m, "tma no early");
  TryLib<NoTma>(lab, m, "tma off");
  TryLib<NoTmaNoCluster>(lab, m, "tma and cluster off");
  TryLib<CudaCoresOnly>(lab, m, "cuda cores");
}

}  // namespace

int main(int argc, char** argv) {
  Lab lab;
  lab.filter = argc > 1 && argv[1][0] != '\0' ? argv[1] : nullptr;
  if (argc > 2) lab.k = std::atoi(argv[2]);
  if (argc > 3) lab.n = std::atoi(argv[3]);
  if (lab.k < 1 || lab.n < 1 || argc > 4) {
    std::fprintf(stderr, "usage: %s [filter] [k] [n]\n", argv[0]);
    return 2;
  }
  int l2 = 0;
  CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  CHECK(cudaDeviceGetAttribute(&lab.sms, cudaDevAttrMultiProcessorCount, 0));
  lab.b_elems = int64_t{lab.k} * lab.n;
  lab.b_stride = (lab.b_elems + 127) / 128 * 128;  // 256-byte aligned copies
  const int64_t b_bytes = lab.b_elems * 2;
  lab.copies = std::max<int64_t>(2, (4 * int64_t{l2} + b_bytes - 1) / b_bytes);
  auto copies_from = [&](const char* var) {
    const char* v = std::getenv(var);
    if (!v) v = std::getenv("SC_AC_COPIES");
    return v ? std::max<int64_t>(1, std::atoll(v)) : lab.copies;
  };
  lab.a_copies = copies_from("SC_A_COPIES");
  lab.c_copies = copies_from("SC_C_COPIES");
  CHECK(cudaMalloc(&lab.a, static_cast<size_t>(lab.a_copies) * 16 * lab.k * sizeof(bf16)));
  CHECK(cudaMalloc(&lab.b, static_cast<size_t>(lab.copies * lab.b_stride) * sizeof(bf16)));
  CHECK(cudaMalloc(&lab.c, static_cast<size_t>(lab.c_copies) * 16 * lab.n * sizeof(bf16)));
  CHECK(cudaMalloc(&lab.ref, size_t{16} * lab.n * sizeof(float)));
  CHECK(cudaMalloc(&lab.worst, sizeof(unsigned)));
  CHECK(cudaMalloc(&lab.sink, static_cast<size_t>(lab.sms) * 8 * sizeof(uint32_t)));
  CHECK(cudaMalloc(&lab.ws, lab.ws_bytes));
  CHECK(cudaStreamCreate(&lab.stream));
#ifdef TSM2_TRACE
  CHECK(cudaMalloc(&lab.trace, size_t{4096} * kTraceWords * sizeof(uint64_t)));
  lab.tracing = std::getenv("SC_TRACE") && std::getenv("SC_TRACE")[0] == '1';
#endif
  lab::FillKernel<<<1024, 256>>>(lab.a, int64_t{16} * lab.k, 1234u);
  lab::FillKernel<<<4096, 256>>>(lab.b, lab.b_elems, 99u);
  lab.rotate_a = std::getenv("SC_A_ROTATE") && std::getenv("SC_A_ROTATE")[0] == '1';
  lab.rotate_c = std::getenv("SC_C_ROTATE") && std::getenv("SC_C_ROTATE")[0] == '1';
  lab.child_graphs = std::getenv("SC_CHILD") && std::getenv("SC_CHILD")[0] == '1';
  for (int64_t i = 1; i < lab.a_copies; ++i) {
    CHECK(cudaMemcpy(lab.a + i * 16 * lab.k, lab.a, size_t{16} * lab.k * sizeof(bf16),
                     cudaMemcpyDeviceToDevice));
  }
  for (int64_t i = 1; i < lab.copies; ++i) {
    CHECK(cudaMemcpy(lab.b + i * lab.b_stride, lab.b, b_bytes, cudaMemcpyDeviceToDevice));
  }
  const int64_t outs = int64_t{16} * lab.n;
  ReferenceKernel<<<static_cast<unsigned>((outs + 255) / 256), 256>>>(lab.a, lab.b, lab.ref, 16,
                                                                      lab.k, lab.n);
  CHECK(cudaDeviceSynchronize());
  std::printf("# %d SMs, L2 %d MB, B %.1f MB x %lld copies; %% of %.0f GB/s\n", lab.sms, l2 >> 20,
              b_bytes * 1e-6, static_cast<long long>(lab.copies), kPeakGbs);
  std::printf("# %-28s %3s %6s %6s %11s %12s %8s  %s\n", "name", "m", "k", "n", "time", "bandwidth",
              "of peak", "err");
  TryRead(lab);
  RunProbes(lab);
  for (int m : {1, 2, 4, 8, 16}) RunM(lab, m);
  return 0;
}

// Kernel lab: times variants of the production matmul kernels on the
// headline cases, outside JAX, so one build compares many of them: tile
// shapes of Tsm2Kernel (a config template of the lab's own), TSM2L's
// row-per-thread kernel at several rows per thread, the library's own plan
// for every layout, and the S and T plans under tuning structs other than
// the defaults (split_plan.h STuning, TTuning). Each is checked against a
// float64 reference first. The figures are cudaEvent times over back-to-back
// launches (A is far larger than the L2; S's B rotates through copies of 4x
// the L2 where it is not), reported against a streaming-read ceiling
// measured in the same process. The harness (python -m jax_tsm2.bench)
// remains the reference for published numbers.
//
// Build (benchmarks/lab/README.md): cmake -DTSM2_BUILD_LAB=ON, or nvcc alone:
//   nvcc -O3 -std=c++17 -arch=sm_90 --expt-relaxed-constexpr -I. \
//     benchmarks/lab/kernel_lab.cu ffi/harness/launch.cu -o build/labs/kernel_lab
//   build/labs/kernel_lab [filter]     # filter: comma-separated substrings of case names
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "benchmarks/lab/lab_common.cuh"
#include "ffi/matmul/launch_row_stream.cuh"
#include "ffi/matmul/plan.cuh"

namespace {

using tsm2::DeviceMatmul;
using tsm2::MatmulPlan;

// ref[r, j] = sum_k op(A)[r, k] op(B)[k, j] in float64, and the sum of
// |products|; op() transposes A for layout TN and B for NT.
template <typename T>
__global__ void ReferenceKernel(const T* a, const T* b, double* ref, double* mag, int64_t m,
                                int64_t k, int64_t n, tsm2::Layout layout) {
  const int64_t o = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (o >= m * n) return;
  const int64_t r = o / n, j = o % n;
  const bool a_t = layout == tsm2::Layout::kTN, b_t = layout == tsm2::Layout::kNT;
  double s = 0, s_abs = 0;
  for (int64_t kk = 0; kk < k; ++kk) {
    const double prod = lab::AsDouble(a[a_t ? kk * m + r : r * k + kk]) *
                        lab::AsDouble(b[b_t ? j * k + kk : kk * n + j]);
    s += prod;
    s_abs += std::fabs(prod);
  }
  ref[o] = s;
  mag[o] = s_abs;
}

// Largest |c - ref| / (sum of |products|) over the output.
template <typename T>
__global__ void ErrorKernel(const T* c, const double* ref, const double* mag, int64_t count,
                            unsigned long long* worst_bits) {
  const int64_t o = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (o >= count) return;
  double err = std::fabs(lab::AsDouble(c[o]) - ref[o]) / (mag[o] > 0 ? mag[o] : 1.0);
  if (!(err == err)) err = 1e300;  // NaN counts as the worst
  atomicMax(worst_bits, static_cast<unsigned long long>(__double_as_longlong(err)));
}

// Tuning variants (ffi/matmul/split_plan.h): a struct derived from the
// production one with a member overridden, and a MatmulTuning that uses it.
struct NoTmaS : tsm2::STuning {
  static constexpr bool kTma = false;
};
struct NoTmaNoClusterS : NoTmaS {
  static constexpr bool kCluster = false;
};
struct CoreS : NoTmaNoClusterS {
  static constexpr int kMmaMinM = 17;  // no m reaches it: the CUDA-core kernel
};
struct Stages6S : NoTmaNoClusterS {
  static constexpr int kStages = 6;
};
struct TwoPerSmS : NoTmaNoClusterS {
  static constexpr int kBlocksPerSm = 2;
};
struct FourPerSmT : tsm2::TTuning {
  static constexpr int kBlocksPerSm = 4;
};
struct TiledT : tsm2::TTuning {
  static constexpr bool kFlat = false;
};
struct FlatRows4T : tsm2::TTuning {
  static constexpr int kFlatRowsPerThread = 4;
};
struct FlatRows16T : tsm2::TTuning {
  static constexpr int kFlatRowsPerThread = 16;
};
template <typename S_>
struct WithS : tsm2::MatmulTuning {
  using S = S_;
};
template <typename T_>
struct WithT : tsm2::MatmulTuning {
  using T = T_;
};

struct Buffers {
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  double* ref = nullptr;
  double* mag = nullptr;
  void* ws = nullptr;
  size_t ws_bytes = size_t{256} << 20;
  unsigned long long* worst = nullptr;
};

struct Case {
  const char* name;
  bool family_l;
  int64_t m, k, n;
  tsm2::Kernel kernel = tsm2::Kernel::kTsm2r;  // TryLib only (Try takes family_l)
  tsm2::Layout layout = tsm2::Layout::kNN;
};

double ceiling_gbs = 0;

template <typename T>
void Prepare(const Case& cs, Buffers& buf) {
  lab::FillKernel<T><<<2048, 256>>>(static_cast<T*>(buf.a), cs.m * cs.k, 1234u);
  lab::FillKernel<T><<<256, 256>>>(static_cast<T*>(buf.b), cs.k * cs.n, 99u);
  const int64_t outs = cs.m * cs.n;
  ReferenceKernel<T><<<static_cast<unsigned>((outs + 255) / 256), 256>>>(
      static_cast<const T*>(buf.a), static_cast<const T*>(buf.b), buf.ref, buf.mag, cs.m, cs.k,
      cs.n, cs.layout);
  CHECK(cudaDeviceSynchronize());
}

// The case as the launchers take it.
template <typename T>
DeviceMatmul ProblemOf(const Case& cs, const Buffers& buf) {
  DeviceMatmul p;
  p.a = buf.a;
  p.b = buf.b;
  p.c = buf.c;
  p.m = cs.m;
  p.k = cs.k;
  p.n = cs.n;
  p.layout = cs.layout;
  p.workspace = buf.ws;
  p.workspace_bytes = buf.ws_bytes;
  return p;
}

// Fills C with garbage, runs one launch and returns the largest relative
// error against the float64 reference of Prepare.
template <typename T, typename F>
double WorstError(const Case& cs, Buffers& buf, const F& launch) {
  CHECK(cudaMemset(buf.c, 0xff, cs.m * cs.n * sizeof(T)));  // NaN-ish garbage
  launch();
  CHECK(cudaMemset(buf.worst, 0, sizeof(unsigned long long)));
  const int64_t outs = cs.m * cs.n;
  ErrorKernel<T><<<static_cast<unsigned>((outs + 255) / 256), 256>>>(
      static_cast<const T*>(buf.c), buf.ref, buf.mag, outs, buf.worst);
  unsigned long long bits = 0;
  CHECK(cudaMemcpy(&bits, buf.worst, sizeof bits, cudaMemcpyDeviceToHost));
  double err;
  std::memcpy(&err, &bits, sizeof err);
  return err;
}

// GB/s over the minimal bytes (every operand read once, C written once).
template <typename T>
double GbPerS(const Case& cs, double sec) {
  return static_cast<double>(cs.m * cs.k + cs.k * cs.n + cs.m * cs.n) * sizeof(T) / sec * 1e-9;
}

// Times one streaming tile of the library (tiles.h's shape for n-tile NT;
// VecRows: the form for rows of whole 16-byte vectors) with the plan it
// makes on this GPU: threads, ring depth, shared memory, blocks.
template <typename T, int NT, bool VecRows>
void Try(const Case& cs, Buffers& buf) {
  const DeviceMatmul p = ProblemOf<T>(cs, buf);
  MatmulPlan plan;
  plan.family = cs.family_l ? tsm2::Kernel::kTsm2l : tsm2::Kernel::kTsm2r;
  if (tsm2::UsesLTile(cs.family_l, cs.k, sizeof(T))) {
    CHECK_STATUS((tsm2::Tsm2LVariant<T, NT, VecRows>::Plan(p, &plan)));
  } else {
    CHECK_STATUS((tsm2::Tsm2Variant<T, NT, VecRows>::Plan(p, &plan)));
  }
  auto launch = [&] { CHECK_STATUS(tsm2::LaunchMatmul(p, plan, nullptr)); };
  const double err = WorstError<T>(cs, buf, launch);
  const double sec = lab::TimeLaunches(launch);
  const double gbs = GbPerS<T>(cs, sec);
  std::printf(
      "%-22s %s vec_rows=%d thr=%4d stages=%d smem=%6d blocks=%6d  %8.1f us %7.0f GB/s %5.1f%%  "
      "err=%.1e\n",
      cs.name, plan.kernel_name, VecRows ? 1 : 0, plan.threads, plan.stages, plan.smem_bytes,
      plan.blocks, sec * 1e6, gbs, 100 * gbs / ceiling_gbs, err);
  std::fflush(stdout);
}

// Times the library's own plan for a case (any kernel and layout), as the
// FFI handler would run it: the planner (ffi/matmul/plan.cuh) picks the
// kernel, with the tuning structs Tune (production's by default). `tag`
// names a non-default tuning in the output.
template <typename T, typename Tune = tsm2::MatmulTuning>
void TryLib(const Case& cs, Buffers& buf, const char* tag = "") {
  const DeviceMatmul p = ProblemOf<T>(cs, buf);
  MatmulPlan plan;
  CHECK_STATUS((tsm2::PlanMatmulWith<T, Tune>(p, cs.kernel, &plan)));
  auto launch = [&] { CHECK_STATUS(tsm2::LaunchMatmul(p, plan, nullptr)); };
  const double err = WorstError<T>(cs, buf, launch);
  // S's B (k x n) can fit in the L2 (50 MB on an H100): back-to-back launches
  // would then read it from there (S bf16 1 x 4096 x 4096: 12.4 us here
  // against 15.5 in the harness). Time it over copies of 4x the L2, as the
  // harness does.
  const int64_t b_bytes = cs.k * cs.n * static_cast<int64_t>(sizeof(T));
  int l2 = 0;
  CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  const int64_t stride = (b_bytes + 255) / 256 * 256;
  const int64_t copies =
      cs.kernel == tsm2::Kernel::kTsm2s
          ? std::clamp<int64_t>(4 * int64_t{l2} / b_bytes + 1, 1, (int64_t{1} << 30) / stride)
          : 1;
  for (int64_t i = 1; i < copies; ++i) {
    CHECK(cudaMemcpy(static_cast<char*>(buf.b) + i * stride, buf.b, b_bytes,
                     cudaMemcpyDeviceToDevice));
  }
  int64_t turn = 0;
  auto rotated = [&] {
    DeviceMatmul q = p;
    q.b = static_cast<const char*>(p.b) + (turn++ % copies) * stride;
    CHECK_STATUS(tsm2::LaunchMatmul(q, plan, nullptr));
  };
  const double sec = lab::TimeLaunches(rotated);
  const double gbs = GbPerS<T>(cs, sec);
  std::printf(
      "%-26s %s %-18s blocks=%6d splits=%4lld ws=%8zu  %8.1f us %7.0f GB/s %5.1f%%  err=%.1e\n",
      cs.name, *tag ? tag : "*", plan.kernel_name, plan.blocks,
      static_cast<long long>(plan.split.splits), plan.workspace_bytes, sec * 1e6, gbs,
      100 * gbs / ceiling_gbs, err);
  std::fflush(stdout);
}

// Times TSM2L's row-per-thread kernel with U rows per thread per step.
template <typename T, int NT, int KV, int U, int MinBlocks>
void TryRow(const Case& cs, Buffers& buf) {
  using V = tsm2::RowVariant<T, NT, KV, U, MinBlocks>;
  const DeviceMatmul p = ProblemOf<T>(cs, buf);
  MatmulPlan plan;
  CHECK_STATUS(V::Plan(p, &plan));
  auto launch = [&] { CHECK_STATUS(tsm2::LaunchMatmul(p, plan, nullptr)); };
  const double err = WorstError<T>(cs, buf, launch);
  const double sec = lab::TimeLaunches(launch);
  const double gbs = GbPerS<T>(cs, sec);
  std::printf("%-26s row U=%d minblk=%d blocks=%6d  %8.1f us %7.0f GB/s %5.1f%%  err=%.1e\n",
              cs.name, U, MinBlocks, plan.blocks, sec * 1e6, gbs, 100 * gbs / ceiling_gbs, err);
  std::fflush(stdout);
}

// Times the row stream (kernels/row_stream.cuh) in one instantiation
// (row_stream_plan.h RowStreamShape): B's width N, R rows per warp, U vectors
// per row and lane, D steps in flight in registers or S stages of a
// shared-memory ring, M blocks per SM.
template <typename T, int N, int R, int U, int D, int S, int M>
void TryStream(const Case& cs, Buffers& buf) {
  const DeviceMatmul p = ProblemOf<T>(cs, buf);
  MatmulPlan plan;
  CHECK_STATUS((tsm2::RowStreamVariant<T, N, R, U, D, S, M>::Plan(p, &plan)));
  auto launch = [&] { CHECK_STATUS(tsm2::LaunchMatmul(p, plan, nullptr)); };
  const double err = WorstError<T>(cs, buf, launch);
  const double sec = lab::TimeLaunches(launch);
  const double gbs = GbPerS<T>(cs, sec);
  std::printf(
      "%-26s stream N=%2d R=%d U=%d D=%d S=%d M=%d period=%d splits=%3lld blocks=%4d  %8.1f us "
      "%7.0f GB/s %5.1f%%  err=%.1e\n",
      cs.name, N, R, U, D, S, M, plan.row_period, static_cast<long long>(plan.split.splits),
      plan.blocks, sec * 1e6, gbs, 100 * gbs / ceiling_gbs, err);
  std::fflush(stdout);
}

// Each case and what is tried on it.
template <typename T>
bool Start(const Case& cs, Buffers& buf, const char* filter) {
  if (!lab::Wanted(cs.name, filter)) return false;
  Prepare<T>(cs, buf);
  return true;
}

void RunAll(Buffers& buf, const char* f) {
  using bf16 = __nv_bfloat16;
  // The streaming tiles, rows of whole vectors and rows of any length.
  if (Case cs{"R f32 20480^2 n=1", false, 20480, 20480, 1}; Start<float>(cs, buf, f)) {
    Try<float, 1, true>(cs, buf);
  }
  if (Case cs{"R f32 20480^2 n=8", false, 20480, 20480, 8}; Start<float>(cs, buf, f)) {
    Try<float, 8, true>(cs, buf);
  }
  if (Case cs{"R f32 20480^2 n=16", false, 20480, 20480, 16}; Start<float>(cs, buf, f)) {
    Try<float, 16, true>(cs, buf);
  }
  if (Case cs{"R f32 7460x24553x51", false, 7460, 24553, 51}; Start<float>(cs, buf, f)) {
    Try<float, 56, false>(cs, buf);
  }
  if (Case cs{"R f32 7492x1893x33", false, 7492, 1893, 33}; Start<float>(cs, buf, f)) {
    Try<float, 40, false>(cs, buf);
  }
  if (Case cs{"R f64 20480^2 n=8", false, 20480, 20480, 8}; Start<double>(cs, buf, f)) {
    Try<double, 8, true>(cs, buf);
  }
  if (Case cs{"R bf16 20480^2 n=8", false, 20480, 20480, 8}; Start<bf16>(cs, buf, f)) {
    Try<bf16, 8, true>(cs, buf);
  }
  if (Case cs{"R bf16 14615x1504x56", false, 14615, 1504, 56}; Start<bf16>(cs, buf, f)) {
    Try<bf16, 56, true>(cs, buf);
  }
  if (Case cs{"L f32 1e7 16x16", true, 10000000, 16, 16}; Start<float>(cs, buf, f)) {
    Try<float, 16, true>(cs, buf);
  }
  if (Case cs{"L f32 6875800x9x5", true, 6875800, 9, 5}; Start<float>(cs, buf, f)) {
    Try<float, 8, false>(cs, buf);
  }
  if (Case cs{"L bf16 2e6x10x42", true, 2000000, 10, 42}; Start<bf16>(cs, buf, f)) {
    Try<bf16, 48, false>(cs, buf);
  }
  if (Case cs{"L f64 1e7 16x16", true, 10000000, 16, 16}; Start<double>(cs, buf, f)) {
    Try<double, 16, true>(cs, buf);
  }
  // The library's plan (the row stream where row_stream_plan.h takes the
  // shape) beside the row tile forced and other row-stream instantiations,
  // on odd shapes of the R and NT regions and the programs' products.
  {
    using tsm2::Kernel, tsm2::Layout;
    auto rs = [&](auto tag, Case cs, auto... tries) {
      using T = decltype(tag);
      if (!Start<T>(cs, buf, f)) return;
      TryLib<T>(cs, buf);
      (tries(cs), ...);
    };
#define TILE(T, NT, VEC) [&](const Case& c) { Try<T, NT, VEC>(c, buf); }
#define RS(T, N, R, U, D, S) [&](const Case& c) { TryStream<T, N, R, U, D, S, 1>(c, buf); }
    const Layout nt = Layout::kNT;
    rs(float{}, Case{"stream R f32 20000x20000x8", false, 20000, 20000, 8}, TILE(float, 8, true),
       RS(float, 8, 2, 2, 1, 0), RS(float, 8, 4, 1, 0, 4));
    rs(float{}, Case{"stream R f32 20480x20480x1", false, 20480, 20480, 1}, TILE(float, 1, true),
       RS(float, 1, 4, 1, 1, 0));
    rs(float{}, Case{"stream R f32 4420x8424x1", false, 4420, 8424, 1}, TILE(float, 1, true),
       RS(float, 1, 4, 1, 2, 0));
    rs(float{}, Case{"stream R f32 21281x10979x5", false, 21281, 10979, 5}, TILE(float, 8, false),
       RS(float, 8, 4, 1, 0, 4));
    rs(float{}, Case{"stream R f32 2888x8582x2", false, 2888, 8582, 2}, TILE(float, 2, false),
       RS(float, 2, 4, 1, 1, 0));
    rs(float{}, Case{"stream R f32 8177x20882x13", false, 8177, 20882, 13},
       RS(float, 16, 2, 2, 1, 0));
    rs(float{}, Case{"stream R f32 32768x4096x16", false, 32768, 4096, 16}, TILE(float, 16, true),
       RS(float, 16, 2, 2, 1, 0));
    rs(float{}, Case{"stream R f32 1000003x256x4", false, 1000003, 256, 4}, TILE(float, 4, true),
       RS(float, 4, 4, 1, 1, 0), RS(float, 4, 4, 1, 0, 4));
    rs(double{}, Case{"stream R f64 20000x20000x8", false, 20000, 20000, 8}, TILE(double, 8, true),
       RS(double, 8, 4, 1, 0, 3));
    rs(double{}, Case{"stream R f64 1539x6229x5", false, 1539, 6229, 5}, TILE(double, 8, false));
    rs(__nv_bfloat16{}, Case{"stream R bf16 14221x6491x3", false, 14221, 6491, 3},
       TILE(__nv_bfloat16, 4, false));
    rs(__nv_bfloat16{}, Case{"stream R bf16 20000x20000x8", false, 20000, 20000, 8},
       RS(__nv_bfloat16, 8, 4, 1, 1, 0));
    rs(__half{}, Case{"stream R f16 10006x17397x1", false, 10006, 17397, 1},
       TILE(__half, 1, false));
    rs(float{}, Case{"stream NT f32 14338x2361x2", false, 14338, 2361, 2, Kernel::kTsm2r, nt});
    rs(float{}, Case{"stream NT f32 195839x664x3", false, 195839, 664, 3, Kernel::kTsm2r, nt});
#undef TILE
#undef RS
  }
  // TSM2L's row-per-thread kernel: U sweep on the rows it takes.
  using tsm2::Kernel, tsm2::Layout;
  if (Case cs{"Lrow bf16 1e7 8x8", true, 10000000, 8, 8, Kernel::kTsm2l}; Start<bf16>(cs, buf, f)) {
    TryRow<bf16, 8, 1, 1, 8>(cs, buf);
    TryRow<bf16, 8, 1, 1, 4>(cs, buf);
    TryRow<bf16, 8, 1, 2, 4>(cs, buf);
    TryRow<bf16, 8, 1, 4, 2>(cs, buf);
    TryRow<bf16, 8, 1, 4, 3>(cs, buf);
    TryRow<bf16, 8, 1, 8, 2>(cs, buf);
    TryRow<bf16, 8, 1, 8, 1>(cs, buf);
  }
  if (Case cs{"Lrow f32 1e7 8x8", true, 10000000, 8, 8, Kernel::kTsm2l}; Start<float>(cs, buf, f)) {
    TryRow<float, 8, 2, 1, 8>(cs, buf);
    TryRow<float, 8, 2, 1, 4>(cs, buf);
    TryRow<float, 8, 2, 2, 4>(cs, buf);
    TryRow<float, 8, 2, 4, 2>(cs, buf);
    TryRow<float, 8, 2, 4, 3>(cs, buf);
    TryRow<float, 8, 2, 8, 2>(cs, buf);
  }
  if (Case cs{"Lrow f32 1e7 4x4", true, 10000000, 4, 4, Kernel::kTsm2l}; Start<float>(cs, buf, f)) {
    TryRow<float, 4, 1, 1, 8>(cs, buf);
    TryRow<float, 4, 1, 2, 4>(cs, buf);
  }
  if (Case cs{"Lrow f64 1e7 4x4", true, 10000000, 4, 4, Kernel::kTsm2l};
      Start<double>(cs, buf, f)) {
    TryRow<double, 4, 2, 1, 8>(cs, buf);
    TryRow<double, 4, 2, 2, 4>(cs, buf);
    TryRow<double, 4, 2, 4, 2>(cs, buf);
  }
  // Layouts, through the library's plan (names as BENCH.md's cases: m x k x n
  // of the stored operands; for TN the result is k x n, here m x n).
  const struct {
    const char* name;
    int dtype;  // 0 f32, 1 f64, 2 bf16
    int64_t m, k, n;
    Kernel kernel;
    Layout layout;
  } lib_cases[] = {
      {"NT f32 1e6x256x16", 0, 1000000, 256, 16, Kernel::kTsm2r, Layout::kNT},
      {"NT f32 1e6x256x64", 0, 1000000, 256, 64, Kernel::kTsm2r, Layout::kNT},
      {"NT f32 1e5x4096x16", 0, 100000, 4096, 16, Kernel::kTsm2r, Layout::kNT},
      {"NT bf16 1e6x256x16", 2, 1000000, 256, 16, Kernel::kTsm2r, Layout::kNT},
      {"NN f32 1e6x256x16", 0, 1000000, 256, 16, Kernel::kTsm2r, Layout::kNN},
      {"S f32 1x8192x14336", 0, 1, 8192, 14336, Kernel::kTsm2s, Layout::kNN},
      {"S f32 4x8192x14336", 0, 4, 8192, 14336, Kernel::kTsm2s, Layout::kNN},
      {"S f32 8x8192x14336", 0, 8, 8192, 14336, Kernel::kTsm2s, Layout::kNN},
      {"S f32 16x8192x14336", 0, 16, 8192, 14336, Kernel::kTsm2s, Layout::kNN},
      {"S f32 8x4096x4096", 0, 8, 4096, 4096, Kernel::kTsm2s, Layout::kNN},
      {"S bf16 8x8192x14336", 2, 8, 8192, 14336, Kernel::kTsm2s, Layout::kNN},
      {"S f64 7x1001x3001", 1, 7, 1001, 3001, Kernel::kTsm2s, Layout::kNN},
      {"S f32 1x10821x17697", 0, 1, 10821, 17697, Kernel::kTsm2s, Layout::kNN},
      {"S bf16 3x6774x7418", 2, 3, 6774, 7418, Kernel::kTsm2s, Layout::kNN},
      {"S bf16 15x10567x10659", 2, 15, 10567, 10659, Kernel::kTsm2s, Layout::kNN},
      {"L bf16 1e7x8x8", 2, 10000000, 8, 8, Kernel::kTsm2l, Layout::kNN},
      {"L bf16 1e6x8x8", 2, 1000000, 8, 8, Kernel::kTsm2l, Layout::kNN},
      {"L bf16 1e7x8x8 nt", 2, 10000000, 8, 8, Kernel::kTsm2l, Layout::kNT},
      {"L bf16 1e7x16x16", 2, 10000000, 16, 16, Kernel::kTsm2l, Layout::kNN},
      {"L bf16 1e7x8x5", 2, 10000000, 8, 5, Kernel::kTsm2l, Layout::kNN},
      {"L f32 1e7x8x8", 0, 10000000, 8, 8, Kernel::kTsm2l, Layout::kNN},
      {"L f32 1e7x4x4", 0, 10000000, 4, 4, Kernel::kTsm2l, Layout::kNN},
      {"L f32 1e7x8x16", 0, 10000000, 8, 16, Kernel::kTsm2l, Layout::kNN},
      {"L f64 1e7x4x4", 1, 10000000, 4, 4, Kernel::kTsm2l, Layout::kNN},
      {"L f64 1e7x2x2", 1, 10000000, 2, 2, Kernel::kTsm2l, Layout::kNN},
      {"L f32 1e7x16x16", 0, 10000000, 16, 16, Kernel::kTsm2l, Layout::kNN},
      {"TN f32 1e7x16x16", 0, 16, 10000000, 16, Kernel::kTsm2t, Layout::kTN},
      {"TN f32 1e6x16x256", 0, 16, 1000000, 256, Kernel::kTsm2t, Layout::kTN},
      {"TN f32 1e6x64x64", 0, 64, 1000000, 64, Kernel::kTsm2t, Layout::kTN},
      {"TN f32 1e6x512x8", 0, 512, 1000000, 8, Kernel::kTsm2t, Layout::kTN},
      {"TN f64 1e7x16x16", 1, 16, 10000000, 16, Kernel::kTsm2t, Layout::kTN},
      {"TN f64 1e6x64x64", 1, 64, 1000000, 64, Kernel::kTsm2t, Layout::kTN},
      {"TN f64 1e6x16x256", 1, 16, 1000000, 256, Kernel::kTsm2t, Layout::kTN},
      {"TN f64 1e6x16x128", 1, 16, 1000000, 128, Kernel::kTsm2t, Layout::kTN},
      {"TN f64 1e6x128x16", 1, 128, 1000000, 16, Kernel::kTsm2t, Layout::kTN},
      {"TN f64 1e6x256x16", 1, 256, 1000000, 16, Kernel::kTsm2t, Layout::kTN},
      {"TN f64 1e6x32x64", 1, 32, 1000000, 64, Kernel::kTsm2t, Layout::kTN},
      {"TN f64 1e6x128x32", 1, 128, 1000000, 32, Kernel::kTsm2t, Layout::kTN},
      {"TN f64 99991x61x59", 1, 61, 99991, 59, Kernel::kTsm2t, Layout::kTN},
      {"TN bf16 99991x13x7", 2, 13, 99991, 7, Kernel::kTsm2t, Layout::kTN},
      {"TN f32 2885541x11x67", 0, 11, 2885541, 67, Kernel::kTsm2t, Layout::kTN},
      {"TN f32 1e6x13x7", 0, 13, 1000000, 7, Kernel::kTsm2t, Layout::kTN},
      {"TN f64 202954x23x5", 1, 23, 202954, 5, Kernel::kTsm2t, Layout::kTN},
      {"TN bf16 1e6x512x8", 2, 512, 1000000, 8, Kernel::kTsm2t, Layout::kTN},
      {"TN bf16 1e6x64x64", 2, 64, 1000000, 64, Kernel::kTsm2t, Layout::kTN},
      {"TN bf16 1e6x16x256", 2, 16, 1000000, 256, Kernel::kTsm2t, Layout::kTN},
      {"TN bf16 539940x148x194", 2, 148, 539940, 194, Kernel::kTsm2t, Layout::kTN},
      {"TN bf16 1e6x30x20", 2, 30, 1000000, 20, Kernel::kTsm2t, Layout::kTN},
      {"TN bf16 1e6x6x10", 2, 6, 1000000, 10, Kernel::kTsm2t, Layout::kTN},
      // Odd widths from the random grids: rows of A or B that are not whole
      // 16-byte vectors.
      {"TN f64 2384164x6x3", 1, 6, 2384164, 3, Kernel::kTsm2t, Layout::kTN},
      {"TN f64 387258x112x2", 1, 112, 387258, 2, Kernel::kTsm2t, Layout::kTN},
      {"TN f32 1065666x11x3", 0, 11, 1065666, 3, Kernel::kTsm2t, Layout::kTN},
      {"TN f32 659629x20x29", 0, 20, 659629, 29, Kernel::kTsm2t, Layout::kTN},
      {"TN bf16 1228678x30x28", 2, 30, 1228678, 28, Kernel::kTsm2t, Layout::kTN},
      {"TN bf16 7637232x2x2", 2, 2, 7637232, 2, Kernel::kTsm2t, Layout::kTN},
      {"TN bf16 5341359x2x21", 2, 2, 5341359, 21, Kernel::kTsm2t, Layout::kTN},
      {"TN f32 239600x1x2", 0, 1, 239600, 2, Kernel::kTsm2t, Layout::kTN},
      {"S bf16 1x4096x4096", 2, 1, 4096, 4096, Kernel::kTsm2s, Layout::kNN},
      {"S bf16 2x4096x4096", 2, 2, 4096, 4096, Kernel::kTsm2s, Layout::kNN},
      {"S bf16 4x4096x4096", 2, 4, 4096, 4096, Kernel::kTsm2s, Layout::kNN},
      {"S bf16 8x4096x4096", 2, 8, 4096, 4096, Kernel::kTsm2s, Layout::kNN},
      {"S bf16 16x4096x4096", 2, 16, 4096, 4096, Kernel::kTsm2s, Layout::kNN},
      {"NN bf16 1e6x512x8", 2, 1000000, 512, 8, Kernel::kTsm2r, Layout::kNN},
  };
  // TN beside the tiled stages where the plan stages rows flat.
  auto lib = [&](auto tag, const Case& cs) {
    using T = decltype(tag);
    if (!Start<T>(cs, buf, f)) return;
    TryLib<T>(cs, buf);
    const tsm2::SplitPlan s = tsm2::TPlan(sizeof(T), 1, cs.m, cs.k, cs.n, 132);
    if (cs.kernel == Kernel::kTsm2t && s.flat) {
      TryLib<T, WithT<TiledT>>(cs, buf, "tiled");
      TryLib<T, WithT<FlatRows4T>>(cs, buf, "4 rows");
      TryLib<T, WithT<FlatRows16T>>(cs, buf, "16 rows");
    }
  };
  for (const auto& lc : lib_cases) {
    Case cs{lc.name, false, lc.m, lc.k, lc.n, lc.kernel, lc.layout};
    if (lc.dtype == 0) lib(float{}, cs);
    if (lc.dtype == 1) lib(double{}, cs);
    if (lc.dtype == 2) lib(bf16{}, cs);
  }
  // The S and T plans under other tuning structs ("tune" cases), each beside
  // the production plan (marked *).
  if (Case cs{"tune S bf16 8x4096x4096", false, 8, 4096, 4096, Kernel::kTsm2s};
      Start<bf16>(cs, buf, f)) {
    TryLib<bf16>(cs, buf);
    TryLib<bf16, WithS<NoTmaS>>(cs, buf, "tma off");
    TryLib<bf16, WithS<NoTmaNoClusterS>>(cs, buf, "cluster off");
    TryLib<bf16, WithS<CoreS>>(cs, buf, "mma off");
  }
  if (Case cs{"tune S f32 8x8192x14336", false, 8, 8192, 14336, Kernel::kTsm2s};
      Start<float>(cs, buf, f)) {
    TryLib<float>(cs, buf);
    TryLib<float, WithS<Stages6S>>(cs, buf, "6 stages");
    TryLib<float, WithS<TwoPerSmS>>(cs, buf, "2 blocks/SM");
  }
  if (Case cs{"tune TN f32 1e6x64x64", false, 64, 1000000, 64, Kernel::kTsm2t, Layout::kTN};
      Start<float>(cs, buf, f)) {
    TryLib<float>(cs, buf);
    TryLib<float, WithT<FourPerSmT>>(cs, buf, "4 blocks/SM");
  }
}

}  // namespace

int main(int argc, char** argv) {
  const char* filter = argc > 1 ? argv[1] : nullptr;
  Buffers buf;
  const size_t a_bytes = size_t{7} << 29;  // 3.5 GiB: R f64 20480^2 is 3.36 GB
  CHECK(cudaMalloc(&buf.a, a_bytes));
  CHECK(cudaMalloc(&buf.b, size_t{1} << 30));  // S's B is the large operand
  CHECK(cudaMalloc(&buf.c, size_t{1400} << 20));
  CHECK(cudaMalloc(&buf.ref, size_t{1400} << 20));
  CHECK(cudaMalloc(&buf.mag, size_t{1400} << 20));
  CHECK(cudaMalloc(&buf.ws, buf.ws_bytes));
  CHECK(cudaMalloc(&buf.worst, sizeof(unsigned long long)));
  lab::FillKernel<float><<<2048, 256>>>(static_cast<float*>(buf.a), a_bytes / 4, 7u);

  ceiling_gbs = lab::ReadCeilingGbs(buf.a, int64_t{2} << 30);
  RunAll(buf, filter);
  return 0;
}

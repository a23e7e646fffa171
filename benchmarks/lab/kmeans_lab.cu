// k-means lab: runs the fused Lloyd step (ffi/kmeans/launch_step.cuh, planned
// and launched as the FFI handler does it) on a few shapes outside JAX,
// checks each against a float64 reference, and times back-to-back launches
// with cudaEvents against our streaming-read kernel over the same X. The
// step's tuning struct (ffi/kmeans/plan.h KmeansTuning) can be varied per
// run: production's ("default"), without the wide-row step ("no_wide"),
// with 64-row tiles for the one-tile tensor-core step of rows of 129..256
// elements ("tile64"), or without the narrow row class (rows of up to 64
// elements on the CUDA-core step or the 128 class, "no_narrow"); "checked"
// runs production's row-checked step (fault tolerance, CHECK 1) instead,
// which must report no failed row.
//
// Checks: every label is a closest centroid of the exact (float64, direct
// form) distances up to a rounding bound (and the exact one where the two
// closest are further apart), mind is that distance up to the bound, and
// sums, counts and inertia are the float64 sums over the step's own labels up
// to a summation bound (on the host). "reads" is the step's time over one read
// of X at the measured ceiling (1.0: as fast as reading X once).
//
// Built with TSM2_TRACE (cmake -DTSM2_TRACE=ON), it also prints the wide-row
// step's cycles per phase (ffi/common/trace.h, kernels/kmeans_wide.cuh).
//
// Build (benchmarks/lab/README.md): cmake -DTSM2_BUILD_LAB=ON, or nvcc alone:
//   nvcc -O3 -std=c++17 -arch=sm_90 --expt-relaxed-constexpr -I. \
//     benchmarks/lab/kmeans_lab.cu ffi/harness/launch.cu -o build/labs/kmeans_lab
//   build/labs/kmeans_lab [filter] [tunings]
//     filter: comma-separated substrings of case names; tunings: comma-separated
//     of default, no_wide, tile64, no_narrow, checked (default: default)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "benchmarks/lab/lab_common.cuh"
#include "ffi/common/trace.h"
#include "ffi/kmeans/launch_step.cuh"
#include "ffi/kmeans/plan.h"

namespace {

__device__ __host__ inline uint32_t Hash(uint64_t i, uint32_t seed) {
  uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ static_cast<uint32_t>(i >> 32) ^ seed;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  return h;
}

__device__ inline float Unit(uint64_t i, uint32_t seed) {  // in [-1, 1)
  return static_cast<float>(Hash(i, seed) & 0xffffff) / 8388608.0f - 1.0f;
}

// Points around k centres (centre of row i: i * 7919 % k), spread 0.25.
template <typename T>
__global__ void FillX(T* x, int64_t n, int64_t d, int64_t k, uint32_t seed) {
  for (int64_t o = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; o < n * d;
       o += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = o / d, e = o % d;
    const int64_t centre = i * 7919 % k;
    x[o] = T(Unit(centre * d + e, seed) + 0.25f * Unit(o, seed ^ 0x5bd1e995u));
  }
}

// Centroids: row j of X moved a little (so no point sits exactly on one).
template <typename T>
__global__ void FillC(const T* x, T* c, int64_t d, int64_t k, uint32_t seed) {
  for (int64_t o = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; o < k * d;
       o += int64_t{gridDim.x} * blockDim.x) {
    c[o] = T(static_cast<float>(x[o]) + 0.05f * Unit(o, seed));
  }
}

template <typename A>
__global__ void FillW(A* w, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    w[i] = A(1.0f + Unit(i, seed));  // in [0, 2)
  }
}

struct RowErrors {
  unsigned long long bad_label;    // not a closest centroid within the bound
  unsigned long long wrong_clear;  // not THE closest although the gap exceeds twice the bound
  unsigned long long bad_mind;     // distance off by more than the bound
};

// One thread per row: exact distances in float64 (direct form).
template <typename T, typename A>
__global__ void CheckRows(const T* x, const T* c, const int32_t* labels, const A* mind, int64_t n,
                          int64_t d, int64_t k, double eps, RowErrors* out) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  double best = INFINITY, second = INFINITY, x_sq = 0, max_c_sq = 0, chosen = NAN;
  int best_j = 0;
  const int lab = labels[i];
  for (int64_t j = 0; j < k; ++j) {
    double s = 0, c_sq = 0;
    for (int64_t e = 0; e < d; ++e) {
      const double xv = lab::AsDouble(x[i * d + e]), cv = lab::AsDouble(c[j * d + e]);
      s += (xv - cv) * (xv - cv);
      c_sq += cv * cv;
      if (j == 0) x_sq += xv * xv;
    }
    max_c_sq = fmax(max_c_sq, c_sq);
    if (j == lab) chosen = s;
    if (s < best) {
      second = best;
      best = s;
      best_j = static_cast<int>(j);
    } else if (s < second) {
      second = s;
    }
  }
  const double bound = 8.0 * (d + 4) * eps * (x_sq + max_c_sq) + 1e-300;
  if (lab < 0 || lab >= k || !(chosen <= best + bound)) atomicAdd(&out->bad_label, 1ull);
  if (k > 1 && second - best > 2 * bound && lab != best_j) atomicAdd(&out->wrong_clear, 1ull);
  if (!(fabs(static_cast<double>(mind[i]) - chosen) <= bound)) atomicAdd(&out->bad_mind, 1ull);
}

double ceiling_gbs = 0;

template <typename T>
double HostValue(T v) {
  if constexpr (std::is_same_v<T, double> || std::is_same_v<T, float>) {
    return static_cast<double>(v);
  } else {
    return static_cast<double>(static_cast<float>(v));
  }
}

struct Case {
  const char* name;
  int64_t n, d, k;
  int dtype;  // 0 f32, 1 f64, 2 bf16, 3 f16
};

// The step's tuning variants (ffi/kmeans/plan.h).
struct NoWideTuning : tsm2::KmeansTuning {
  static constexpr bool kWide = false;
};
struct Tile64Tuning : tsm2::KmeansTuning {
  static constexpr int kOneTileRows = 64;
};
struct NoNarrowTuning : tsm2::KmeansTuning {
  static constexpr bool kNarrow = false;
};
// CHECK 1: the row-checked step (its faults and worst margin printed too).
template <typename T, typename Tune, int CHECK = 0>
void Run(const Case& cs, const char* tuning) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const int itemsize = static_cast<int>(sizeof(T));
  if (!tsm2::KmeansSupported(itemsize, cs.d, cs.k)) {
    std::printf("%-28s not supported by the fused kernel\n", cs.name);
    return;
  }
  const int64_t n = cs.n, d = cs.d, k = cs.k;
  T *x, *c;
  A *w, *mind, *sums, *counts, *inertia;
  int32_t *labels, *row_faults;
  float* row_margin;
  RowErrors* errs;
  // Lab knobs for the timing, read from the environment: TSM2_LAB_X_OFFSET
  // (bytes, a multiple of 16) moves X within its allocation, and
  // TSM2_LAB_COPIES (default 1) times launches over that many distinct
  // copies of X in turn, as benchmarks/kmeans_iter.py does.
  const int64_t x_off =
      std::getenv("TSM2_LAB_X_OFFSET") ? std::atoll(std::getenv("TSM2_LAB_X_OFFSET")) : 0;
  const int copies =
      std::getenv("TSM2_LAB_COPIES") ? std::max(1, std::atoi(std::getenv("TSM2_LAB_COPIES"))) : 1;
  std::vector<char*> x_alloc(copies);
  for (char*& a : x_alloc) CHECK(cudaMalloc(&a, n * d * sizeof(T) + x_off));
  x = reinterpret_cast<T*>(x_alloc[0] + x_off);
  CHECK(cudaMalloc(&c, k * d * sizeof(T)));
  CHECK(cudaMalloc(&w, n * sizeof(A)));
  CHECK(cudaMalloc(&row_faults, sizeof(int32_t)));
  CHECK(cudaMalloc(&row_margin, sizeof(float)));
  CHECK(cudaMalloc(&mind, n * sizeof(A)));
  CHECK(cudaMalloc(&labels, n * sizeof(int32_t)));
  CHECK(cudaMalloc(&sums, k * d * sizeof(A)));
  CHECK(cudaMalloc(&counts, k * sizeof(A)));
  CHECK(cudaMalloc(&inertia, sizeof(A)));
  CHECK(cudaMalloc(&errs, sizeof(RowErrors)));
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t ws_bytes = static_cast<size_t>(tsm2::KmeansWorkspaceBytes(itemsize, n, d, k, sms));
  // KmeansWorkspaceBytes sizes for the production plan; a variant may want
  // more partials (it then uses fewer).
  void* ws = nullptr;
  CHECK(cudaMalloc(&ws, std::max<size_t>(ws_bytes, 16)));
  FillX<T><<<2048, 256>>>(x, n, d, k, 1234u);
  FillC<T><<<64, 256>>>(x, c, d, k, 77u);
  FillW<A><<<1024, 256>>>(w, n, 99u);

  tsm2::DeviceKmeans p;
  p.x = x;
  p.c = c;
  p.w = w;
  p.row_faults = row_faults;
  p.row_margin = row_margin;
  p.labels = labels;
  p.mind = mind;
  p.sums = sums;
  p.counts = counts;
  p.inertia = inertia;
  p.n = n;
  p.d = d;
  p.k = k;
  p.workspace = ws;
  p.workspace_bytes = ws_bytes;
  tsm2::KmeansStepPlan plan;
  CHECK_STATUS((tsm2::PlanKmeansStepWith<T, Tune, CHECK>(p, &plan)));
  auto launch = [&] { CHECK_STATUS(tsm2::LaunchKmeansStep(p, plan, nullptr)); };
  CHECK(cudaMemset(labels, 0xff, n * sizeof(int32_t)));
  CHECK(cudaMemset(mind, 0xff, n * sizeof(A)));
  launch();
  CHECK(cudaDeviceSynchronize());

  // Rows on the GPU.
  const double eps = std::is_same_v<A, double> ? 2.220446049250313e-16 : 1.1920929e-07;
  CHECK(cudaMemset(errs, 0, sizeof(RowErrors)));
  CheckRows<T, A>
      <<<static_cast<unsigned>((n + 127) / 128), 128>>>(x, c, labels, mind, n, d, k, eps, errs);
  RowErrors re;
  CHECK(cudaMemcpy(&re, errs, sizeof re, cudaMemcpyDeviceToHost));

  // Sums, counts and inertia on the host, with the step's labels.
  std::vector<T> hx(n * d);
  std::vector<int32_t> hl(n);
  std::vector<A> hw(n), hm(n), hs(k * d), hc(k);
  A hi;
  CHECK(cudaMemcpy(hx.data(), x, n * d * sizeof(T), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(hl.data(), labels, n * sizeof(int32_t), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(hw.data(), w, n * sizeof(A), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(hm.data(), mind, n * sizeof(A), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(hs.data(), sums, k * d * sizeof(A), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(hc.data(), counts, k * sizeof(A), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&hi, inertia, sizeof(A), cudaMemcpyDeviceToHost));
  std::vector<double> rs(k * d, 0.0), rabs(k * d, 0.0), rc(k, 0.0);
  double ri = 0, riabs = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int l = hl[i] >= 0 && hl[i] < k ? hl[i] : 0;
    const double wi = HostValue(hw[i]);
    for (int64_t e = 0; e < d; ++e) {
      const double v = wi * HostValue(hx[i * d + e]);
      rs[l * d + e] += v;
      rabs[l * d + e] += std::fabs(v);
    }
    rc[l] += wi;
    ri += wi * HostValue(hm[i]);
    riabs += std::fabs(wi * HostValue(hm[i]));
  }
  const double sum_tol = 2.0 * (n + 2) * eps;
  double worst = 0;  // largest |error| / bound over sums, counts, inertia (<= 1 passes)
  for (int64_t o = 0; o < k * d; ++o) {
    worst = std::max(worst, std::fabs(HostValue(hs[o]) - rs[o]) / (sum_tol * rabs[o] + 1e-300));
  }
  for (int64_t j = 0; j < k; ++j) {
    worst = std::max(worst, std::fabs(HostValue(hc[j]) - rc[j]) / (sum_tol * rc[j] + 1e-300));
  }
  worst = std::max(worst, std::fabs(HostValue(hi) - ri) / (sum_tol * riabs + 1e-300));
  int32_t faults = 0;
  float margin = 0;
  if (CHECK > 0) {
    CHECK(cudaMemcpy(&faults, row_faults, sizeof faults, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&margin, row_margin, sizeof margin, cudaMemcpyDeviceToHost));
  }
  const bool ok =
      re.bad_label == 0 && re.wrong_clear == 0 && re.bad_mind == 0 && worst <= 1.0 && faults == 0;

#ifdef TSM2_TRACE
  unsigned long long tr[tsm2::trace::kPhaseSlots];
  CHECK(tsm2::trace::TakePhases(tr));  // zeroes the counters
  launch();
  CHECK(cudaDeviceSynchronize());
  CHECK(tsm2::trace::TakePhases(tr));
  if (tr[15] > 0) {
    // Slots as in ffi/kmeans/kernels/kmeans_wide.cuh (KMW_MARK*).
    const char* names[15] = {"land", "dist",           "red",          "ready",
                             "sums", "| ctrl: labels", "consume",      "| owner: records",
                             "own",  "red wait",       "| prod: wait", "issue",
                             "push", "lab empty",      "rec read"};
    std::printf("  trace, cycles per tile (math thread 0, control warp 0, owner, producer):");
    for (int q : {0, 1, 2, 3, 4, 5, 6, 9, 12, 7, 14, 13, 8, 10, 11}) {
      std::printf(" %s %.0f", names[q], double(tr[q]) / tr[15]);
    }
    std::printf("\n");
  }
#endif
  for (int i = 1; i < copies; ++i) {
    CHECK(cudaMemcpy(x_alloc[i] + x_off, x, n * d * sizeof(T), cudaMemcpyDeviceToDevice));
  }
  int turn = 0;
  const double sec = lab::TimeLaunches([&] {
    p.x = x_alloc[turn++ % copies] + x_off;
    launch();
  });
  const double x_bytes = static_cast<double>(n) * d * sizeof(T);
  const double gbs = x_bytes / sec * 1e-9;
  const tsm2::KmeansPlan l = tsm2::KmeansPlanOf(itemsize, d, k);
  std::printf(
      "%-28s %-8s %-20s kp=%2d cls=%d cl=%d nwc=%d J=%d G=%d R=%d smem=%6d owners=%4d  %9.1f us "
      "%6.0f GB/s %5.1f%%  reads=%.3f  %s (labels %llu/%llu, mind %llu, sums/bound %.2g, row "
      "faults %d, margin %.2g)\n",
      cs.name, tuning, plan.kernel_name, l.kp, l.cls, l.cluster, l.nwc, l.j, l.groups, l.rows,
      l.smem_bytes, plan.owners, sec * 1e6, gbs, 100 * gbs / ceiling_gbs, ceiling_gbs / gbs,
      ok ? "ok" : "FAIL", re.bad_label, re.wrong_clear, re.bad_mind, worst, faults, margin);
  std::fflush(stdout);
  for (void* ptr :
       {static_cast<void*>(c), static_cast<void*>(w), static_cast<void*>(row_faults),
        static_cast<void*>(row_margin), static_cast<void*>(mind), static_cast<void*>(labels),
        static_cast<void*>(sums), static_cast<void*>(counts), static_cast<void*>(inertia), ws,
        static_cast<void*>(errs)}) {
    CHECK(cudaFree(ptr));
  }
  for (char* a : x_alloc) CHECK(cudaFree(a));
}

}  // namespace

template <typename Tune, int CHECK = 0>
void RunCase(const Case& cs, const char* tuning) {
  switch (cs.dtype) {
    case 0:
      Run<float, Tune, CHECK>(cs, tuning);
      break;
    case 1:
      Run<double, Tune, CHECK>(cs, tuning);
      break;
    case 2:
      Run<__nv_bfloat16, Tune, CHECK>(cs, tuning);
      break;
    default:
      Run<__half, Tune, CHECK>(cs, tuning);
      break;
  }
}

int main(int argc, char** argv) {
  const char* filter = argc > 1 && argv[1][0] != '\0' ? argv[1] : nullptr;
  const std::vector<std::string> tunings = lab::Items(argc > 2 ? argv[2] : "default");
  const std::vector<std::string> known = {"default", "no_wide", "tile64", "no_narrow", "checked"};
  const auto has = [](const std::vector<std::string>& list, const std::string& item) {
    return std::find(list.begin(), list.end(), item) != list.end();
  };
  for (const std::string& t : tunings) {
    if (!has(known, t)) {
      std::fprintf(stderr, "usage: %s [filter] [default,no_wide,tile64,no_narrow,checked]\n",
                   argv[0]);
      return 2;
    }
  }
  // Read ceiling: the harness's streaming-read kernel over 2 GiB.
  void* buf = nullptr;
  const int64_t bytes = int64_t{2} << 30;
  CHECK(cudaMalloc(&buf, bytes));
  CHECK(cudaMemset(buf, 1, bytes));
  ceiling_gbs = lab::ReadCeilingGbs(buf, bytes);
  CHECK(cudaFree(buf));

  const Case cases[] = {
      {"f32 1e6x256 k=16", 1000000, 256, 16, 0},
      {"f32 2.5e5x4096 k=16", 250000, 4096, 16, 0},
      {"f32 1e6x256 k=32", 1000000, 256, 32, 0},
      {"f32 1e6x256 k=8", 1000000, 256, 8, 0},
      {"f32 1e6x128 k=16", 1000000, 128, 16, 0},
      {"f32 1e6x64 k=4", 1000000, 64, 4, 0},
      {"f32 1e6x64 k=8", 1000000, 64, 8, 0},
      {"f32 1e6x64 k=16", 1000000, 64, 16, 0},
      {"f32 1e6x64 k=32", 1000000, 64, 32, 0},
      {"f32 1e6x32 k=16", 1000000, 32, 16, 0},
      {"f32 1e6x16 k=16", 1000000, 16, 16, 0},
      {"f32 odd 5003x4 k=2", 5003, 4, 2, 0},
      {"f32 odd 5003x8 k=31", 5003, 8, 31, 0},
      {"f32 odd 5003x12 k=7", 5003, 12, 7, 0},
      {"f32 1e6x48 k=12", 1000000, 48, 12, 0},
      {"f32 1e6x128 k=8", 1000000, 128, 8, 0},
      {"f32 1e6x128 k=32", 1000000, 128, 32, 0},
      {"f32 1e6x96 k=16", 1000000, 96, 16, 0},
      {"f32 1e6x100 k=24", 1000000, 100, 24, 0},
      {"f32 1e7x64 k=16", 10000000, 64, 16, 0},
      {"f32 odd 30011x44 k=23", 30011, 44, 23, 0},
      {"f32 odd 17x20 k=3", 17, 20, 3, 0},
      {"f32 2.5e5x1024 k=16", 250000, 1024, 16, 0},
      {"f32 5e5x768 k=16", 500000, 768, 16, 0},
      {"f32 5e5x516 k=12", 500000, 516, 12, 0},
      {"f32 2.5e5x1024 k=32", 250000, 1024, 32, 0},
      {"f32 1e6x512 k=16", 1000000, 512, 16, 0},
      {"f32 1e6x260 k=16", 1000000, 260, 16, 0},
      {"f32 1e6x320 k=12", 1000000, 320, 12, 0},
      {"f32 1e6x384 k=16", 1000000, 384, 16, 0},
      {"f32 2.5e5x2048 k=16", 250000, 2048, 16, 0},
      {"f32 2.5e5x4096 k=32", 250000, 4096, 32, 0},
      {"f32 2.5e5x4096 k=9", 250000, 4096, 9, 0},
      {"f32 2.5e5x3072 k=16", 250000, 3072, 16, 0},
      {"f32 5e5x1536 k=16", 500000, 1536, 16, 0},
      {"f32 odd 20011x4092 k=13", 20011, 4092, 13, 0},
      {"f32 odd 30011x2052 k=9", 30011, 2052, 9, 0},
      {"f32 odd 17x1028 k=16", 17, 1028, 16, 0},
      {"f32 odd 1x4096 k=11", 1, 4096, 11, 0},
      {"f32 odd 23x388 k=12", 23, 388, 12, 0},
      {"f32 odd 4099x772 k=16", 4099, 772, 16, 0},
      {"f64 1e6x256 k=16", 1000000, 256, 16, 1},
      {"f64 1e5x4096 k=16", 100000, 4096, 16, 1},
      {"bf16 1e6x256 k=16", 1000000, 256, 16, 2},
      {"bf16 2.5e5x4096 k=32", 250000, 4096, 32, 2},
      {"f16 1e6x256 k=16", 1000000, 256, 16, 3},
      {"f32 odd 100003x17 k=5", 100003, 17, 5, 0},
      {"f32 odd 30011x1000 k=31", 30011, 1000, 31, 0},
      {"f32 odd 20011x4099 k=13", 20011, 4099, 13, 0},
      {"f32 odd 1x33 k=3", 1, 33, 3, 0},
      {"f32 odd 100003x132 k=17", 100003, 132, 17, 0},
      {"f32 odd 65x252 k=1", 65, 252, 1, 0},
      {"f32 odd 4099x68 k=32", 4099, 68, 32, 0},
      // The tensor-core step's 32-row tiles: a partial last tile, both row classes.
      {"f32 odd 30011x196 k=11", 30011, 196, 11, 0},
      {"f32 odd 50021x100 k=16", 50021, 100, 16, 0},
      {"f32 odd 33x256 k=9", 33, 256, 9, 0},
      {"f64 odd 4099x3 k=1", 4099, 3, 1, 1},
      {"f64 odd 5003x2049 k=9", 5003, 2049, 9, 1},
      {"bf16 odd 10007x33 k=7", 10007, 33, 7, 2},
      {"f16 odd 7919x3001 k=17", 7919, 3001, 17, 3},
  };
  for (const Case& cs : cases) {
    if (!lab::Wanted(cs.name, filter)) continue;
    if (has(tunings, "default")) RunCase<tsm2::KmeansTuning>(cs, "default");
    if (has(tunings, "no_wide")) RunCase<NoWideTuning>(cs, "no_wide");
    if (has(tunings, "tile64")) RunCase<Tile64Tuning>(cs, "tile64");
    if (has(tunings, "no_narrow")) RunCase<NoNarrowTuning>(cs, "no_narrow");
    if (has(tunings, "checked")) RunCase<tsm2::KmeansTuning, 1>(cs, "checked");
  }
  return 0;
}

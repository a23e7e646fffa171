// Lab: a CUTLASS 3 TF32 GEMM whose epilogue also reduces the columns of C against the ABFT
// weights, timed with and without that reduction, for several tiles and schedules.
// Stand-alone: it needs only the CUTLASS headers and the CUDA runtime. The nvidia-cutlass
// wheel ships them (cutlass_library/source/include, plus tools/util/include for
// packed_stride.hpp); benchmarks/abft_gemm_peers.py times cuBLAS on the same product.
//
//   cmake -DTSM2_BUILD_LAB=ON -DTSM2_CUTLASS_DIR=<cutlass> (benchmarks/lab/README.md), or
//   nvcc -O3 -DNDEBUG -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -I<cutlass>/include \
//        -I<cutlass>/tools/util/include benchmarks/lab/abft_gemm_lab.cu -o build/labs/abft_gemm_lab
//   build/labs/abft_gemm_lab [m n k]  # one line per variant: us, TFLOP/s, sums' worst error
//
// -DNDEBUG matters: CUTLASS's device asserts are calls, and ptxas serialises the wgmma
// pipeline across a call (warning C7510), which costs more than the epilogue does.
//
// What it showed on an H100: row-major A @ row-major B in TF32 has one
// operand MN-major, which TF32 wgmma cannot read from shared memory, so CUTLASS's builder
// swaps the operands and transposes one through registers (the RS mainloop). Its best
// variant took 3.31-3.39 ms against cuBLAS's 2.74-2.75 ms; the checksum epilogue itself was
// free (3.30 ms with it).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"

using namespace cute;

#define CHECK(x)                                                                           \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

namespace lab {

// row + x * w, the weighted column sum's register step (RowReduction's RegReduceFn).
template <class T>
struct WeightedAdd {
  CUTLASS_HOST_DEVICE T operator()(T const& row, T const& x, T const& w) const {
    return cutlass::multiply_add<T>{}(x, w, row);
  }
};

template <class TileShape, class ClusterShape, class MainSchedule, class EpiSchedule, bool kSums>
struct Gemm {
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutB = cutlass::layout::RowMajor;
  using LayoutD = cutlass::layout::RowMajor;
  static constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

  // Per-CTA partial sums (FinalReduction = false): a (ceil(M / tile_m), N) array per weight,
  // added up afterwards in a fixed order, so the sums are bitwise reproducible.
  using RowStride = Stride<_0, _1, int64_t>;
  using Ones =
      cutlass::epilogue::fusion::Sm90RowReduction<cutlass::plus, cutlass::plus, cutlass::plus, 0,
                                                  TileShape, float, float, kRound, RowStride, 4,
                                                  true, false>;
  using Ramp =
      cutlass::epilogue::fusion::Sm90RowReduction<WeightedAdd, cutlass::plus, cutlass::plus, 0,
                                                  TileShape, float, float, kRound, RowStride, 4,
                                                  true, false, true, cute::seq<0, 1, 2>>;
  using RampWeights = cutlass::epilogue::fusion::Sm90ColBroadcast<0, TileShape, float, float,
                                                                  Stride<_1, _0, int64_t>>;
  using SumsEvt = cutlass::epilogue::fusion::Sm90EVT<
      Ones, cutlass::epilogue::fusion::Sm90EVT<Ramp, cutlass::epilogue::fusion::Sm90AccFetch,
                                               RampWeights>>;
  using PlainEvt = cutlass::epilogue::fusion::LinearCombination<float, float, void, float, kRound>;
  using Fusion = std::conditional_t<kSums, SumsEvt, PlainEvt>;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD, 4, float,
      LayoutD, 4, EpiSchedule, Fusion>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, float, LayoutA, 4, float, LayoutB, 4,
      float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename Epilogue::SharedStorage))>,
      MainSchedule>::CollectiveOp;
  using Kernel =
      cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue>;
  using Device = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static typename Device::Arguments Args(int m, int n, int k, float const* a, float const* b,
                                         float* d, float* ones, float* ramp, float const* w) {
    auto sa = cutlass::make_cute_packed_stride(typename Kernel::StrideA{}, {m, k, 1});
    auto sb = cutlass::make_cute_packed_stride(typename Kernel::StrideB{}, {n, k, 1});
    auto sd = cutlass::make_cute_packed_stride(typename Kernel::StrideD{}, {m, n, 1});
    typename Device::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm,
                                    {m, n, k, 1},
                                    {a, sa, b, sb},
                                    {{}, nullptr, sd, d, sd}};
    if constexpr (kSums) {
      // A node's arguments are its children's, then its own: {{acc, weights, ramp}, ones}.
      args.epilogue.thread = {{{}, {w, 0.0f, {}}, {ramp, 0.0f, {}}}, {ones, 0.0f, {}}};
    } else {
      args.epilogue.thread.alpha = 1.0f;
      args.epilogue.thread.beta = 0.0f;
    }
    return args;
  }
};

}  // namespace lab

__global__ void Fill(float* x, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    unsigned h = unsigned(i) * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    x[i] = (h & 0xffffff) / float(0x1000000) - 0.5f;
  }
}

// Reference column sums of D (weights 1 and (i + 1) / m), one thread per column, in f64.
__global__ void RefSums(float const* d, int m, int n, double* ones, double* ramp) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= n) return;
  double s1 = 0, s2 = 0;
  for (int i = 0; i < m; ++i) {
    double v = d[size_t(i) * n + j];
    s1 += v;
    s2 += v * (double(i + 1) / m);
  }
  ones[j] = s1;
  ramp[j] = s2;
}

template <class G>
void Run(char const* name, int m, int n, int k, float const* a, float const* b, float* d,
         float const* w, int reps) {
  typename G::Device gemm;
  int tiles_m = (m + 127) / 128;
  float *ones = nullptr, *ramp = nullptr;
  size_t part = size_t(tiles_m + 1) * (n + 256);
  CHECK(cudaMalloc(&ones, part * sizeof(float)));
  CHECK(cudaMalloc(&ramp, part * sizeof(float)));
  auto args = G::Args(m, n, k, a, b, d, ones, ramp, w);
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) {
    std::printf("%-28s cannot implement\n", name);
    return;
  }
  size_t ws = G::Device::get_workspace_size(args);
  void* workspace = nullptr;
  if (ws) CHECK(cudaMalloc(&workspace, ws));
  if (gemm.initialize(args, workspace) != cutlass::Status::kSuccess) {
    std::printf("%-28s initialize failed\n", name);
    return;
  }
  for (int i = 0; i < 3; ++i) gemm.run();
  CHECK(cudaDeviceSynchronize());
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<float> us;
  for (int r = 0; r < reps; ++r) {
    cudaEventRecord(e0);
    gemm.run();
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    us.push_back(ms * 1000);
  }
  CHECK(cudaGetLastError());
  std::sort(us.begin(), us.end());
  double med = us[us.size() / 2];
  double tflops = 2.0 * m * n * k / (med * 1e-6) / 1e12;

  // Check the sums against the written D (f64 reference; tile partials added in tile order).
  double err1 = 0, err2 = 0;
  if (G::kSumsOn) {
    double *r1, *r2;
    CHECK(cudaMalloc(&r1, n * sizeof(double)));
    CHECK(cudaMalloc(&r2, n * sizeof(double)));
    RefSums<<<(n + 255) / 256, 256>>>(d, m, n, r1, r2);
    std::vector<double> h1(n), h2(n);
    std::vector<float> p1(size_t(tiles_m) * n), p2(size_t(tiles_m) * n);
    CHECK(cudaMemcpy(h1.data(), r1, n * sizeof(double), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(h2.data(), r2, n * sizeof(double), cudaMemcpyDeviceToHost));
    int ld = (n + 255) / 256 * 256;  // round_nearest(N, CTA_N) for 256-wide tiles
    ld = G::kTileN == 128 ? (n + 127) / 128 * 128 : ld;
    for (int t = 0; t < tiles_m; ++t) {
      CHECK(cudaMemcpy(p1.data() + size_t(t) * n, ones + size_t(t) * ld, n * sizeof(float),
                       cudaMemcpyDeviceToHost));
      CHECK(cudaMemcpy(p2.data() + size_t(t) * n, ramp + size_t(t) * ld, n * sizeof(float),
                       cudaMemcpyDeviceToHost));
    }
    for (int j = 0; j < n; ++j) {
      double s1 = 0, s2 = 0;
      for (int t = 0; t < tiles_m; ++t) {
        s1 += p1[size_t(t) * n + j];
        s2 += p2[size_t(t) * n + j];
      }
      err1 = std::max(err1, std::fabs(s1 - h1[j]));
      err2 = std::max(err2, std::fabs(s2 - h2[j]));
    }
    cudaFree(r1);
    cudaFree(r2);
  }
  std::printf("%-28s %9.1f us  %6.1f TFLOP/s  min %.1f max %.1f  sum err %.3g %.3g\n", name, med,
              tflops, us.front(), us.back(), err1, err2);
  cudaFree(ones);
  cudaFree(ramp);
  if (workspace) cudaFree(workspace);
}

template <class TileShape, class ClusterShape, class MainSchedule, class EpiSchedule, bool kSums>
struct Variant : lab::Gemm<TileShape, ClusterShape, MainSchedule, EpiSchedule, kSums> {
  static constexpr bool kSumsOn = kSums;
  static constexpr int kTileN = size<1>(TileShape{});
};

int main(int argc, char** argv) {
  int m = argc > 3 ? std::atoi(argv[1]) : 8192;
  int n = argc > 3 ? std::atoi(argv[2]) : 8192;
  int k = argc > 3 ? std::atoi(argv[3]) : 8192;
  int reps = 21;
  float *a, *b, *d, *w;
  CHECK(cudaMalloc(&a, size_t(m) * k * sizeof(float)));
  CHECK(cudaMalloc(&b, size_t(k) * n * sizeof(float)));
  CHECK(cudaMalloc(&d, size_t(m) * n * sizeof(float)));
  CHECK(cudaMalloc(&w, size_t(m) * sizeof(float)));
  Fill<<<1024, 256>>>(a, size_t(m) * k, 1);
  Fill<<<1024, 256>>>(b, size_t(k) * n, 2);
  std::vector<float> hw(m);
  for (int i = 0; i < m; ++i) hw[i] = float(i + 1) / m;
  CHECK(cudaMemcpy(w, hw.data(), m * sizeof(float), cudaMemcpyHostToDevice));

  using Coop = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using CoopEpi = cutlass::epilogue::TmaWarpSpecializedCooperative;
  using T128x256 = Shape<_128, _256, _32>;
  using C2x1 = Shape<_2, _1, _1>;
  using C1x2 = Shape<_1, _2, _1>;
  using Ping = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
  using PingEpi = cutlass::epilogue::TmaWarpSpecialized;
  using T256x128 = Shape<_256, _128, _32>;
  using T64x256 = Shape<_64, _256, _32>;
  using T128x128 = Shape<_128, _128, _32>;
  using C1x1 = Shape<_1, _1, _1>;
  Run<Variant<T128x256, C2x1, Coop, CoopEpi, false>>("coop 128x256 2x1 plain", m, n, k, a, b, d, w,
                                                     reps);
  Run<Variant<T128x256, C2x1, Coop, CoopEpi, true>>("coop 128x256 2x1 sums", m, n, k, a, b, d, w,
                                                    reps);
  Run<Variant<T128x256, C1x2, Coop, CoopEpi, false>>("coop 128x256 1x2 plain", m, n, k, a, b, d, w,
                                                     reps);
  Run<Variant<T128x256, C1x1, Coop, CoopEpi, false>>("coop 128x256 1x1 plain", m, n, k, a, b, d, w,
                                                     reps);
  Run<Variant<T256x128, C1x1, Coop, CoopEpi, false>>("coop 256x128 1x1 plain", m, n, k, a, b, d, w,
                                                     reps);
  Run<Variant<T256x128, C2x1, Coop, CoopEpi, false>>("coop 256x128 2x1 plain", m, n, k, a, b, d, w,
                                                     reps);
  Run<Variant<T64x256, C1x1, Ping, PingEpi, false>>("ping 64x256 1x1 plain", m, n, k, a, b, d, w,
                                                    reps);
  Run<Variant<T128x128, C1x1, Ping, PingEpi, false>>("ping 128x128 1x1 plain", m, n, k, a, b, d, w,
                                                     reps);
  Run<Variant<T128x128, C2x1, Coop, CoopEpi, false>>("coop 128x128 2x1 plain", m, n, k, a, b, d, w,
                                                     reps);
  return 0;
}

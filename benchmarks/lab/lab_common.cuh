// What the lab programs built on the production headers share: error checks,
// case filters, element conversions, back-to-back launch timing and the read
// ceiling they report percentages against. Header-only; each lab is one
// translation unit, so everything here is static (internal linkage).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "ffi/common/status.h"
#include "ffi/harness/launcher.h"

#define CHECK(x)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

// The same for the launchers' Status (ffi/common/status.h): says what failed
// inside the library, and where.
#define CHECK_STATUS(x)                                                                  \
  do {                                                                                   \
    const tsm2::Status s_ = (x);                                                         \
    if (!s_.ok()) {                                                                      \
      std::fprintf(stderr, "%s:%d %s: %s failed at %s:%d: %s\n", __FILE__, __LINE__, #x, \
                   s_.what ? s_.what : "?", s_.file ? s_.file : "?", s_.line,            \
                   cudaGetErrorString(s_.error));                                        \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

namespace lab {

// The comma-separated items of `list`, empty ones left out.
static std::vector<std::string> Items(const char* list) {
  std::vector<std::string> items;
  for (std::string rest = list; !rest.empty();) {
    const size_t comma = rest.find(',');
    if (comma != 0) items.push_back(rest.substr(0, comma));
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
  }
  return items;
}

// Whether a case name contains one of the comma-separated substrings of
// `filter` (every case when there is no filter).
static bool Wanted(const char* name, const char* filter) {
  if (!filter) return true;
  for (const std::string& want : Items(filter)) {
    if (std::strstr(name, want.c_str())) return true;
  }
  return false;
}

static __device__ double AsDouble(double v) { return v; }
template <typename T>
static __device__ double AsDouble(T v) {
  return static_cast<double>(static_cast<float>(v));
}

// Median over 5 rounds of 5 back-to-back launches (after one warm-up round).
template <typename F>
static double TimeLaunches(const F& launch) {
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  constexpr int kLaunches = 5, kRepeats = 5;
  std::vector<float> ms;
  for (int r = 0; r < kRepeats + 1; ++r) {
    CHECK(cudaEventRecord(e0));
    for (int i = 0; i < kLaunches; ++i) launch();
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    float t_ms = 0;
    CHECK(cudaEventElapsedTime(&t_ms, e0, e1));
    if (r > 0) ms.push_back(t_ms / kLaunches);  // the first round warms up
  }
  CHECK(cudaEventDestroy(e0));
  CHECK(cudaEventDestroy(e1));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2] * 1e-3;
}

// Values in [-1, 1) from a hash of the index: the same data every run.
template <typename T>
__global__ void FillKernel(T* x, int64_t count, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    x[i] = T(static_cast<float>(h & 0xffffff) / 8388608.0f - 1.0f);
  }
}

// The read ceiling in GB/s: the harness's streaming-read kernel over `bytes`
// of `buf`, best of 5 (after one warm-up); printed as the labs' first line.
static double ReadCeilingGbs(const void* buf, int64_t bytes) {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  uint32_t* xor_out = nullptr;
  const int64_t blocks = int64_t{sms} * 8;
  CHECK(cudaMalloc(&xor_out, blocks * sizeof(uint32_t)));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  float best = 1e30f;
  for (int r = 0; r < 6; ++r) {
    CHECK(cudaEventRecord(e0));
    CHECK_STATUS(tsm2::LaunchStreamRead(buf, bytes, xor_out, blocks, nullptr));
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, e0, e1));
    if (r > 0) best = std::min(best, t);
  }
  CHECK(cudaEventDestroy(e0));
  CHECK(cudaEventDestroy(e1));
  CHECK(cudaFree(xor_out));
  const double gbs = bytes / (best * 1e-3) * 1e-9;
  std::printf("read ceiling: %.0f GB/s (%d SMs)\n", gbs, sms);
  return gbs;
}

}  // namespace lab

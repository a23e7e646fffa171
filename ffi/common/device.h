// What the launchers ask the current CUDA device: its SM count, its compute
// capability (the plans never pick a kernel the device cannot run), and a
// kernel's blocks per SM (with the dynamic shared-memory opt-in), the last
// cached per kernel and device because the CUDA calls are not free at every
// launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <utility>

namespace tsm2 {

inline cudaError_t SmCount(int* sms) {
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
  return cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, dev);
}

// JAX_TSM2_PRETEND_CC="8.0" caps the compute capability the plans see (and
// Python's, jax_tsm2/_ffi.py): a test seam, so that a newer GPU runs the plans
// an older one gets. 0 when unset or not "major.minor".
inline int PretendCc() {
  static const int cap = [] {
    const char* v = std::getenv("JAX_TSM2_PRETEND_CC");
    int major = 0, minor = 0;
    return v != nullptr && std::sscanf(v, "%d.%d", &major, &minor) == 2 ? 10 * major + minor : 0;
  }();
  return cap;
}

// The current device's compute capability as 10 * major + minor (90 for an
// H100), which the plans compare with the architecture a kernel needs.
inline cudaError_t ComputeCapability(int* cc) {
  int dev = 0, major = 0, minor = 0;
  if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
  if (cudaError_t e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
      e != cudaSuccess) {
    return e;
  }
  if (cudaError_t e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
      e != cudaSuccess) {
    return e;
  }
  *cc = 10 * major + minor;
  if (PretendCc() > 0 && PretendCc() < *cc) *cc = PretendCc();
  return cudaSuccess;
}

// Shared memory a block may opt in to (227 KB on sm_90 and sm_100, 163 KB
// on sm_80, 99 KB on sm_86, sm_89 and sm_120).
inline cudaError_t SmemPerBlockOptin(int* bytes) {
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
  return cudaDeviceGetAttribute(bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
}

inline bool ComputeMajorAtLeast(int major) {
  int cc = 0;
  return ComputeCapability(&cc) == cudaSuccess && cc >= 10 * major;
}
// Thread-block clusters, TMA and distributed shared memory: sm_90 and later.
inline bool HasClusters() { return ComputeMajorAtLeast(9); }
// FP64, TF32 and bf16 mma.sync and ldmatrix.trans: sm_80 and later.
inline bool HasMmaSync() { return ComputeMajorAtLeast(8); }

// Occupancy and the shared-memory opt-in, once per kernel and device.
inline cudaError_t BlocksPerSm(const void* kernel, int threads, int smem, int* out) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, int> cache;
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find({kernel, dev});
  if (it != cache.end()) {
    *out = it->second;
    return cudaSuccess;
  }
  if (cudaError_t e =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
      e != cudaSuccess) {
    return e;
  }
  int blocks = 0;
  if (cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem);
      e != cudaSuccess) {
    return e;
  }
  if (blocks < 1) return cudaErrorInvalidConfiguration;
  cache[{kernel, dev}] = blocks;
  *out = blocks;
  return cudaSuccess;
}

}  // namespace tsm2

// Integer helpers and device defaults the planners share. Plain C++, so that
// the host planners, the kernels and the Python bindings (through
// _tsm2_ext) compute the same numbers.
#pragma once

#include <cstdint>

namespace tsm2 {

// The SM count plans assume where there is no GPU to ask (lowering on a CPU
// machine, the Python model's preset): an H100 SXM's.
constexpr int kDefaultSmCount = 132;
// An H100's compute capability (10 * major + minor) and opt-in shared memory
// per block, which Python plans for without a GPU, as for kDefaultSmCount.
constexpr int kDefaultCc = 90;
constexpr int kDefaultSmemOptin = 227 * 1024;

constexpr int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

constexpr int64_t Pow2AtLeast(int64_t x) {
  int64_t p = 1;
  while (p < x) p *= 2;
  return p;
}

}  // namespace tsm2

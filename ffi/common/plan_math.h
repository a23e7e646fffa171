// Integer helpers and device defaults the planners share. Plain C++, so that
// the host planners, the kernels and the Python bindings (through
// _tsm2_ext) compute the same numbers.
#pragma once

#include <cstdint>

namespace tsm2 {

// The SM count plans assume where there is no GPU to ask (lowering on a CPU
// machine, the Python model's preset): an H100 SXM's.
constexpr int kDefaultSmCount = 132;

constexpr int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

constexpr int64_t Pow2AtLeast(int64_t x) {
  int64_t p = 1;
  while (p < x) p *= 2;
  return p;
}

}  // namespace tsm2

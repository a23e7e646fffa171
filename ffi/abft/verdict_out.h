// Where a check's last kernel writes jax_tsm2.abft.Verdict's six fields:
// device scalars, the magnitude in the accumulator type. Shared by the
// judgement of the passes (kernels/judge.cuh) and the fused row check
// (kernels/row_check.cuh); the CUDA handlers fill it from their results.
#pragma once

#include <cstdint>

namespace tsm2 {

struct VerdictOut {
  int32_t* errors_detected = nullptr;
  bool* corrected = nullptr;
  int32_t* row = nullptr;
  int32_t* col = nullptr;
  void* magnitude = nullptr;
  bool* uncorrectable = nullptr;
};

}  // namespace tsm2

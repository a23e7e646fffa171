// How the launchers report failure: the CUDA error and where it came from
// (the failing expression or the reason a launch was refused, with file and
// line), so that the handler's ffi::Error says exactly what failed. CUDA
// runtime types only (no XLA): the launchers also serve the lab programs.
#pragma once

#include <cuda_runtime_api.h>

namespace tsm2 {

struct Status {
  cudaError_t error = cudaSuccess;
  const char* what = nullptr;  // the failing expression, or why a launch was refused
  const char* file = nullptr;
  int line = 0;
  bool ok() const { return error == cudaSuccess; }
};

}  // namespace tsm2

// Returns a Status naming `expr` when the CUDA call `expr` fails.
#define TSM2_CUDA_RETURN_IF_ERROR(expr)                               \
  do {                                                                \
    if (const cudaError_t tsm2_e_ = (expr); tsm2_e_ != cudaSuccess) { \
      return ::tsm2::Status{tsm2_e_, #expr, __FILE__, __LINE__};      \
    }                                                                 \
  } while (0)

// After a <<<...>>> launch of `kernel` (a name for the message).
#define TSM2_RETURN_IF_LAUNCH_FAILED(kernel)                                      \
  do {                                                                            \
    if (const cudaError_t tsm2_e_ = cudaGetLastError(); tsm2_e_ != cudaSuccess) { \
      return ::tsm2::Status{tsm2_e_, "launching " kernel, __FILE__, __LINE__};    \
    }                                                                             \
  } while (0)

// Propagates a failed Status.
#define TSM2_RETURN_IF_ERROR(expr)                              \
  do {                                                          \
    if (const ::tsm2::Status tsm2_s_ = (expr); !tsm2_s_.ok()) { \
      return tsm2_s_;                                           \
    }                                                           \
  } while (0)

// A refused launch: `err` (a cudaError_t) with the reason `why` (a literal).
#define TSM2_FAIL(err, why) (::tsm2::Status{(err), (why), __FILE__, __LINE__})

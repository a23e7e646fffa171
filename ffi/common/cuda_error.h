// Turns a launcher's failed Status into the ffi::Error a CUDA handler
// returns: the op, what failed and where, the CUDA error's name and text,
// and the operands, e.g.
//   tsm2_matmul (cuda): launching Tsm2Kernel failed at ffi/matmul/...:88:
//   cudaErrorInvalidConfiguration (invalid configuration argument) for a=f32[...], ...
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <string_view>

#include "ffi/common/status.h"
#include "xla/ffi/api/ffi.h"

namespace tsm2 {

inline xla::ffi::Error CudaFailure(std::string_view op, const Status& s,
                                   const std::string& operands) {
  std::string msg(op);
  msg += ": ";
  msg += s.what ? s.what : "a CUDA call";
  msg += " failed";
  if (s.file) msg += std::string(" at ") + s.file + ":" + std::to_string(s.line);
  msg += std::string(": ") + cudaGetErrorName(s.error) + " (" + cudaGetErrorString(s.error) + ")";
  if (!operands.empty()) msg += " for " + operands;
  return xla::ffi::Error::Internal(msg);
}

// Returns from a CUDA handler with CudaFailure when the launcher's Status failed.
#define TSM2_FFI_RETURN_IF_LAUNCH_FAILED(op, expr, operands)    \
  do {                                                          \
    if (const ::tsm2::Status tsm2_s_ = (expr); !tsm2_s_.ok()) { \
      return ::tsm2::CudaFailure((op), tsm2_s_, (operands));    \
    }                                                           \
  } while (0)

// Returns from a CUDA handler with CudaFailure when the CUDA call `expr` fails.
#define TSM2_FFI_RETURN_IF_CUDA_ERROR(op, expr, operands)                                  \
  do {                                                                                     \
    if (const cudaError_t tsm2_e_ = (expr); tsm2_e_ != cudaSuccess) {                      \
      return ::tsm2::CudaFailure((op), ::tsm2::Status{tsm2_e_, #expr, __FILE__, __LINE__}, \
                                 (operands));                                              \
    }                                                                                      \
  } while (0)

}  // namespace tsm2

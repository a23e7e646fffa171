// The FFI target that reads rows of registered host memory into a device
// buffer, tsm2_host_rows (cuda_handler.cc): CUDA builds only. Python lowers
// it only for host memory it registered (jax_tsm2/host_memory.py).
#pragma once

#include "xla/ffi/api/ffi.h"

#ifdef TSM2_WITH_CUDA
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2HostRowsCuda);
#endif

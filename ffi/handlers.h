// The XLA FFI handler symbols exported by _tsm2_ext (see module.cc).
#pragma once

#include "xla/ffi/api/ffi.h"

// CPU reference: plain loops, same signature and validation as the CUDA one.
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2MatmulCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2KmeansStepCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2ColsumsCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2RepairColumnCpu);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2AbftJudgeCpu);

#ifdef TSM2_WITH_CUDA
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2MatmulCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2StreamReadCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2DeviceClockCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2KmeansStepCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2KmeansUpdateCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2ColsumsCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2RepairColumnCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2AbftJudgeCuda);
#endif

// The benchmark harness's private FFI targets, tsm2_stream_read (its read
// ceiling) and tsm2_device_clock (its timer): not part of the product API.
// No jax_tsm2 function lowers to them; jax_tsm2.bench and the benchmark
// scripts call them by name, and _tsm2_ext.harness_registrations() hands
// them out apart from the product's registrations().
#pragma once

#include "xla/ffi/api/ffi.h"

#ifdef TSM2_WITH_CUDA
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2StreamReadCuda);
XLA_FFI_DECLARE_HANDLER_SYMBOL(Tsm2DeviceClockCuda);
#endif

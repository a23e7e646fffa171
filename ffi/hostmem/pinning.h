// Page-locking (pinning) host memory in place, so that the GPU reads it over
// the host link directly (tsm2_host_rows) at the link's DMA rate, with no
// staging copy. Plain C++ on the CUDA runtime; module.cc binds it to Python
// as host_register / host_unregister (CUDA builds only).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tsm2 {

struct HostRegistration {
  cudaError_t error = cudaSuccess;
  const char* what = nullptr;    // the call that failed
  uintptr_t device_ptr = 0;      // the address the device reads the memory at
  bool registered_here = false;  // false: it was registered already; leave it so
  bool read_only = false;        // registered with cudaHostRegisterReadOnly
};

// Registers [ptr, ptr + bytes) as pinned, mapped and portable (every device
// reads it), read-only where the driver supports that flag, from `device`'s
// context (the one that will read it). Memory some
// earlier registration covers (start and end both registered) is reported
// as such, with its device address, and must not be unregistered by us.
HostRegistration RegisterHost(void* ptr, size_t bytes, int device);

// Undoes RegisterHost's registration of `ptr` once everything queued on
// `device` is done (a program still reading the memory must not lose it).
// The synchronization's error, if any, wins over the unregistration's; the
// memory is unregistered either way.
cudaError_t UnregisterHost(void* ptr, int device, const char** what);

}  // namespace tsm2

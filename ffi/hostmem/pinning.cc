// Page-locking host memory in place (pinning.h).
#include "ffi/hostmem/pinning.h"

namespace tsm2 {
namespace {

// Whether `p` lies in registered (page-locked) host memory; its device
// address in *device_ptr.
bool IsRegistered(const void* p, uintptr_t* device_ptr) {
  cudaPointerAttributes attr;
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  if (attr.type != cudaMemoryTypeHost) return false;
  if (device_ptr != nullptr) *device_ptr = reinterpret_cast<uintptr_t>(attr.devicePointer);
  return true;
}

}  // namespace

HostRegistration RegisterHost(void* ptr, size_t bytes, int device) {
  HostRegistration out;
  if (ptr == nullptr || bytes == 0) {
    out.error = cudaErrorInvalidValue;
    out.what = "RegisterHost: a null pointer or zero bytes";
    return out;
  }
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    (void)cudaGetLastError();
    out.error = e;
    out.what = "cudaSetDevice";
    return out;
  }
  const unsigned base = cudaHostRegisterPortable | cudaHostRegisterMapped;
  // Read-only lets the driver pin read-only pages (a memmap opened "r") and
  // tells it the device never writes; not every platform supports the flag.
  cudaError_t e = cudaHostRegister(ptr, bytes, base | cudaHostRegisterReadOnly);
  out.read_only = e == cudaSuccess;
  if (e != cudaSuccess && e != cudaErrorHostMemoryAlreadyRegistered) {
    (void)cudaGetLastError();
    e = cudaHostRegister(ptr, bytes, base);
  }
  if (e == cudaErrorHostMemoryAlreadyRegistered) {
    (void)cudaGetLastError();
    const void* last = static_cast<const char*>(ptr) + (bytes - 1);
    if (IsRegistered(ptr, &out.device_ptr) && IsRegistered(last, nullptr)) return out;
    out.error = e;
    out.what = "cudaHostRegister: part of the range is registered already";
    return out;
  }
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    out.error = e;
    out.what = "cudaHostRegister";
    return out;
  }
  out.registered_here = true;
  void* mapped = nullptr;
  if (e = cudaHostGetDevicePointer(&mapped, ptr, 0); e != cudaSuccess) {
    (void)cudaGetLastError();
    (void)cudaHostUnregister(ptr);
    out = HostRegistration{};
    out.error = e;
    out.what = "cudaHostGetDevicePointer";
    return out;
  }
  out.device_ptr = reinterpret_cast<uintptr_t>(mapped);
  return out;
}

cudaError_t UnregisterHost(void* ptr, int device, const char** what) {
  cudaError_t sync = cudaSetDevice(device);
  *what = "cudaSetDevice";
  if (sync == cudaSuccess) {
    sync = cudaDeviceSynchronize();
    *what = "cudaDeviceSynchronize";
  }
  const cudaError_t e = cudaHostUnregister(ptr);
  if (sync != cudaSuccess || e != cudaSuccess) (void)cudaGetLastError();
  if (sync != cudaSuccess) return sync;
  *what = "cudaHostUnregister";
  return e;
}

}  // namespace tsm2

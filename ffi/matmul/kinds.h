// The kernel families and operand layouts of a tsm2_matmul call, as the FFI
// attributes `kernel` and `layout` carry them, and which family reads which
// layout. Plain C++, and the one definition of these ids: the handlers check
// calls against it, and Python builds its tables from it (_tsm2_ext.KERNELS,
// LAYOUTS and KERNEL_LAYOUTS, read by jax_tsm2/_ffi.py).
#pragma once

#include <cstdint>

namespace tsm2 {

// Which kernel family a call runs. The value travels as the i32 attribute
// `kernel`; Python's router (jax_tsm2/routing.py) picks it.
enum class Kernel : int32_t {
  kTsm2r = 0,  // regular A (m x k, k large) times tall-and-skinny B (k x n); NN or NT
  kTsm2l = 1,  // tall-and-skinny A (m x k, k small) times small B (k x n); NN or NT
  kTsm2s = 2,  // small A (m x k, m small) times large B (k x n); NN only
  kTsm2t = 3,  // A^T @ B with both given tall (k x m and k x n, k huge); TN only
};

// How the operands are stored (all row-major), as the i32 attribute `layout`.
// The result is always C[batch?, m, n] and the contraction has length k.
enum class Layout : int32_t {
  kNN = 0,  // a[batch?, m, k], b[batch?, k, n]: C = A @ B
  kNT = 1,  // a[batch?, m, k], b[batch?, n, k]: C = A @ B^T
  kTN = 2,  // a[batch?, k, m], b[batch?, k, n]: C = A^T @ B
};

inline constexpr Kernel kKernels[] = {Kernel::kTsm2r, Kernel::kTsm2l, Kernel::kTsm2s,
                                      Kernel::kTsm2t};
inline constexpr Layout kLayouts[] = {Layout::kNN, Layout::kNT, Layout::kTN};

constexpr const char* KernelName(Kernel k) {
  switch (k) {
    case Kernel::kTsm2r:
      return "tsm2r";
    case Kernel::kTsm2l:
      return "tsm2l";
    case Kernel::kTsm2s:
      return "tsm2s";
    case Kernel::kTsm2t:
      return "tsm2t";
  }
  return "?";
}

constexpr const char* LayoutName(Layout l) {
  switch (l) {
    case Layout::kNN:
      return "nn";
    case Layout::kNT:
      return "nt";
    case Layout::kTN:
      return "tn";
  }
  return "?";
}

// Each family reads the layouts it was written for: R and L take NN and NT
// (B is small and read through strides), S takes NN, T takes TN.
constexpr bool KernelTakesLayout(Kernel k, Layout l) {
  switch (k) {
    case Kernel::kTsm2r:
    case Kernel::kTsm2l:
      return l == Layout::kNN || l == Layout::kNT;
    case Kernel::kTsm2s:
      return l == Layout::kNN;
    case Kernel::kTsm2t:
      return l == Layout::kTN;
  }
  return false;
}

// The family with attribute value `id`, or false for an unknown id.
constexpr bool KernelFromId(int32_t id, Kernel* out) {
  for (Kernel k : kKernels) {
    if (static_cast<int32_t>(k) == id) {
      *out = k;
      return true;
    }
  }
  return false;
}
constexpr bool LayoutFromId(int32_t id, Layout* out) {
  for (Layout l : kLayouts) {
    if (static_cast<int32_t>(l) == id) {
      *out = l;
      return true;
    }
  }
  return false;
}

}  // namespace tsm2

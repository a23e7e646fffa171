// The kernel families and operand layouts of a tsm2_matmul call, as the
// FFI attributes `kernel` and `layout` carry them. Plain C++: shared by the
// FFI handlers, the launchers and the Python bindings.
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

// Element type of the operands as the launchers take it (no XLA types there).
enum class ElemType { kF32, kF64, kBF16, kF16 };

inline const char* LayoutName(Layout l) {
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

}  // namespace tsm2

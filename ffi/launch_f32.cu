// Instantiates the TSM2 kernels for float.
#include "ffi/launch_matmul.cuh"

namespace tsm2 {
template struct TypedLauncher<float>;
}  // namespace tsm2

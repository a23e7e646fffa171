// Instantiates the TSM2 kernels for double.
#include "ffi/launch_matmul.cuh"

namespace tsm2 {
template struct TypedLauncher<double>;
}  // namespace tsm2

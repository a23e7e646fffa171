// Instantiates the TSM2 kernels for __nv_bfloat16.
#include "ffi/matmul/launch_tiles.cuh"

namespace tsm2 {
template struct TypedLauncher<__nv_bfloat16>;
}  // namespace tsm2

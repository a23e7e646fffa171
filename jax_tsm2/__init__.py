"""jax_tsm2: tall-and-skinny matrix products for JAX (TSM2R / L / S / T CUDA kernels).

Public API only; see README.md. Importing the package loads the compiled
extension and registers its XLA FFI targets (``jax_tsm2._ffi``).
"""

from jax_tsm2 import abft
from jax_tsm2._ffi import build_info, disabled_safety_checks
from jax_tsm2._version import VERSION as __version__
from jax_tsm2.api import dot_general, matmul
from jax_tsm2.clustering import KMeans, kmeans
from jax_tsm2.config import (
    autotune,
    custom_call_mode,
    get_autotune,
    get_custom_call_mode,
    set_autotune,
    set_custom_call_mode,
)
from jax_tsm2.explanation import explain
from jax_tsm2.tune.calibrate import run as calibrate

__all__ = [
    "KMeans",
    "__version__",
    "abft",
    "autotune",
    "build_info",
    "calibrate",
    "clustering",
    "custom_call_mode",
    "disabled_safety_checks",
    "dot_general",
    "explain",
    "get_autotune",
    "get_custom_call_mode",
    "kmeans",
    "matmul",
    "set_autotune",
    "set_custom_call_mode",
]

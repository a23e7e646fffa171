"""The implementations timed side by side, and the error each is allowed against float64.

Every implementation is a ``matmul(a, b)`` callable of one framework; a family composes it into
its product (``Family.apply``: ``matmul(a, b.T)`` for NT, ``matmul(a.T, b)`` for TN, the
gradient of a loss written with ``matmul`` for GRAD), so families need nothing here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp

#: Unit roundoff of each dtype (half the machine epsilon).
_UNIT_ROUNDOFF = {"f64": 2.0**-53, "f32": 2.0**-24, "bf16": 2.0**-8, "f16": 2.0**-11}


@dataclass(frozen=True)
class Impl:
    """One implementation: a name for tables and JSON, its framework and its ``matmul``."""

    name: str
    framework: str  # "jax" or "torch"
    description: str
    matmul: Callable[[Any, Any], Any]
    #: f32 products may use TF32 (or another reduced mode), so the f32 tolerance is looser.
    reduced_f32: bool = False
    #: jax_tsm2 custom-call mode to compile under ("always" forces our kernels), or None.
    custom_call_mode: str | None = None
    #: Compile with jax_tsm2's autotune switch on (``--autotune``): a shape without a tune
    #: cache entry is timed at its first lowering and the winner runs.
    autotune: bool = False
    #: The TSM2 kernel this implementation forces through the FFI target (the grid), or None.
    kernel: str | None = None
    #: ``matmul`` takes the family's operands as stored (a kernel called in the family's
    #: layout) instead of being composed into the product by ``Family.apply``.
    stored: bool = False

    def apply(self, family: Any, *operands: Any) -> Any:
        """This implementation's product of one family's operands."""
        if self.stored:
            return self.matmul(*operands)
        return family.apply(self.matmul, *operands)


def _tsm2_matmul(a: Any, b: Any) -> Any:
    # Looked up at trace time, so tests can monkeypatch jax_tsm2.matmul.
    import jax_tsm2

    return jax_tsm2.matmul(a, b)


def _jnp_matmul(a: Any, b: Any) -> Any:
    return jnp.matmul(a, b)


def _jnp_matmul_highest(a: Any, b: Any) -> Any:
    return jnp.matmul(a, b, precision="highest")


def tsm2_available() -> str | None:
    """``None`` if ``jax_tsm2.matmul`` exists, else why it cannot be benchmarked."""
    try:
        import jax_tsm2
    except Exception as err:  # the extension may fail to load
        return f"import jax_tsm2 failed: {err}"
    if not callable(getattr(jax_tsm2, "matmul", None)):
        return "jax_tsm2.matmul does not exist yet"
    return None


#: custom-call modes the forced-kernel column (``tsm2_kernel``) may be compiled under.
KERNEL_MODES = ("always", "prefer")


def jax_impls(kernel_mode: str = "always") -> list[Impl]:
    """The JAX implementations: ours, and ``jnp.matmul`` at default and highest precision."""
    return [
        # Routed: where XLA's dot is faster it runs there, at jnp's default precision (TF32).
        Impl("tsm2", "jax", "jax_tsm2.matmul(a, b) under jit", _tsm2_matmul, reduced_f32=True),
        Impl(
            "jnp",
            "jax",
            "jnp.matmul(a, b), default precision (may use TF32 for f32)",
            _jnp_matmul,
            reduced_f32=True,
        ),
        Impl("jnp_highest", "jax", 'jnp.matmul(a, b, precision="highest")', _jnp_matmul_highest),
        *_forced_kernel_impls(kernel_mode),
    ]


def _forced_kernel_impls(mode: str = "always") -> list[Impl]:
    """Our CUDA kernels forced on whatever the router would pick: shows the kernels' own speed
    beside the routed path, for every family (NT, TN, S and GRAD compose the same ``matmul``).
    ``mode`` "always" forces the custom call for every product it can compute, "prefer" for
    every tall-and-skinny one. Only where the CUDA targets exist."""
    if mode not in KERNEL_MODES:
        raise ValueError(f"kernel mode {mode!r}: one of {', '.join(KERNEL_MODES)}")
    try:
        import jax_tsm2

        built = jax_tsm2.build_info().get("cuda_targets_registered")
        if not built or jax.default_backend() != "gpu":
            return []
    except Exception:  # the routed "tsm2" impl reports import problems
        return []
    return [
        Impl(
            "tsm2_kernel",
            "jax",
            f'jax_tsm2.matmul(a, b) with custom-call mode "{mode}" (the kernels, unrouted)',
            _tsm2_matmul,
            custom_call_mode=mode,
        )
    ]


def load_torch() -> tuple[ModuleType | None, str | None]:
    """``(torch, None)`` if torch is importable and has CUDA, else ``(None, reason)``."""
    try:
        import torch
    except Exception as err:
        return None, f"torch is not importable ({type(err).__name__})"
    if not torch.cuda.is_available():
        return None, "torch has no CUDA device"
    return torch, None


def torch_impl(torch: ModuleType) -> Impl:
    """cuBLAS through ``torch.matmul`` on the same device buffers (shared through DLPack)."""
    tf32 = bool(torch.backends.cuda.matmul.allow_tf32)
    desc = "torch.matmul(a, b) (cuBLAS) on the same buffers via DLPack"
    desc += ", TF32 allowed" if tf32 else ", TF32 off"
    return Impl("torch", "torch", desc, torch.matmul, reduced_f32=tf32)


def tolerance(impl: Impl, dtype: str, k: int) -> float:
    """Largest relative Frobenius error accepted for ``impl`` on a case of this dtype whose
    sums are ``k`` long (``Family.contraction``: k for NN/NT/S, m for TN and the gradient).

    f64 1e-12; f32 1e-5 (or 2 u sqrt(k) for long sums: rounding errors of a sum of k random
    terms grow like sqrt(k)) and 1e-2 for TF32-capable peers; bf16/f16 1e-2 (their output
    rounding alone is ~1e-3).
    """
    if dtype == "f64":
        return 1e-12
    if dtype == "f32":
        if impl.reduced_f32:
            return 1e-2
        return max(1e-5, 2 * _UNIT_ROUNDOFF["f32"] * math.sqrt(max(k, 1)))
    return 1e-2

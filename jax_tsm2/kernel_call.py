"""One TSM2 kernel, or XLA's dot, as a function of operands stored in a layout.

The kernels are forced here: the ``tsm2_matmul`` FFI target is called directly with its
``kernel`` and ``layout`` attributes, so routing never sees the product. The autotuner
(``jax_tsm2.tune``) and the benchmark harness's validation grid (``jax_tsm2.bench --grid``)
time each candidate this way.

Operands are stored as the layout says (``problem.problem_of``): nn ``a[.., m, k] b[.., k, n]``,
nt ``a[.., m, k] b[.., n, k]``, tn ``a[.., k, m] b[.., k, n]``; the result is ``c[.., m, n]``
in the operand dtype.

Example:
    >>> import jax.numpy as jnp
    >>> from jax_tsm2 import kernel_call
    >>> from jax_tsm2.problem import Problem
    >>> a, b = jnp.ones((100, 3), jnp.float32), jnp.ones((100, 2), jnp.float32)
    >>> kernel_call.xla_product("tn")(a, b).shape
    (3, 2)
    >>> g = kernel_call.kernel_product("tsm2t", Problem(None, 3, 100, 2), "float32", "tn")
    >>> g(a, b)[0, 0]  # on CPU, the FFI target's reference loops
    Array(100., dtype=float32)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax import numpy as jnp

from jax_tsm2 import _ffi
from jax_tsm2.problem import KERNEL_IDS, KERNEL_LAYOUTS, LAYOUT_IDS, Problem

_EINSUM = {"nn": "...mk,...kn->...mn", "nt": "...mk,...nk->...mn", "tn": "...km,...kn->...mn"}


def xla_product(layout: str, precision: Any = None) -> Callable[[Any, Any], Any]:
    """XLA's dot on operands stored in ``layout``, at ``precision`` (None: the default)."""
    if layout not in _EINSUM:
        raise ValueError(f"layout must be one of {tuple(_EINSUM)}, got {layout!r}")
    spec = _EINSUM[layout]
    return lambda a, b: jnp.einsum(spec, a, b, precision=precision)


def kernel_product(kernel: str, p: Problem, dtype: Any, layout: str) -> Callable[[Any, Any], Any]:
    """The ``tsm2_matmul`` FFI target with ``kernel`` forced, for problem ``p`` in ``layout``.

    The returned function takes the operands as stored and returns ``c`` (the workspace
    result is dropped). A kernel that does not take the layout raises ValueError here, and
    operands of another dtype or shape TypeError when the function is traced: the handler
    would return an error, and an error returned by a CUDA handler has crashed the process
    under jax 0.11, so every check happens in Python.
    """
    if kernel not in KERNEL_IDS:
        raise ValueError(f"unknown kernel {kernel!r}; one of {sorted(KERNEL_IDS)}")
    if layout not in KERNEL_LAYOUTS[kernel]:
        raise ValueError(
            f"{kernel} does not take layout {layout!r} (it takes {sorted(KERNEL_LAYOUTS[kernel])})"
        )
    kid, lid = KERNEL_IDS[kernel], LAYOUT_IDS[layout]
    dt = jnp.dtype(dtype)
    ws = _ffi.matmul_workspace_bytes(dt, kid, p.batch or 1, p.m, p.k, p.n)
    out = (p.m, p.n) if p.batch is None else (p.batch, p.m, p.n)
    call = jax.ffi.ffi_call(
        _ffi.MATMUL_TARGET,
        (jax.ShapeDtypeStruct(out, dt), jax.ShapeDtypeStruct((ws,), jnp.uint8)),
    )
    want = [tuple(s) for s in stored_shapes(p, layout)]

    def product(a: Any, b: Any) -> Any:
        got = [tuple(a.shape), tuple(b.shape)]
        if got != want or a.dtype != dt or b.dtype != dt:
            raise TypeError(
                f"{kernel} ({layout}) was set up for {dt} operands of shapes {want[0]} and "
                f"{want[1]}, got {a.dtype}{list(got[0])} and {b.dtype}{list(got[1])}"
            )
        return call(a, b, kernel=np.int32(kid), layout=np.int32(lid))[0]

    return product


def stored_shapes(p: Problem, layout: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The operand shapes of ``p`` as stored in ``layout`` (``problem.problem_of``'s inverse).

    Example:
        >>> stored_shapes(Problem(None, 3, 100, 2), "tn")
        ((100, 3), (100, 2))
    """
    bsz = () if p.batch is None else (p.batch,)
    a = (*bsz, p.k, p.m) if layout == "tn" else (*bsz, p.m, p.k)
    b = (*bsz, p.n, p.k) if layout == "nt" else (*bsz, p.k, p.n)
    return a, b

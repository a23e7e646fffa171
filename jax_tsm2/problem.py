"""A product's sizes and the names the kernels take: shared by routing (which path), the
model (how fast), the autotuner and the direct kernel calls (``kernel_call``).

It lives apart from all of them and imports none of them, so each can name problems,
kernels and layouts without importing the others.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from jax_tsm2 import _compat, _ffi

# The FFI attributes `kernel` and `layout`, and which layouts each kernel reads, as
# the extension defines them (ffi/matmul/kinds.h): defined once, in C++.
KERNEL_IDS: dict[str, int] = _ffi.KERNEL_IDS
LAYOUT_IDS: dict[str, int] = _ffi.LAYOUT_IDS
LAYOUTS: tuple[str, ...] = tuple(LAYOUT_IDS)
KERNEL_LAYOUTS: dict[str, frozenset[str]] = {
    name: frozenset(layouts) for name, layouts in _ffi.KERNEL_LAYOUTS.items()
}


@dataclasses.dataclass(frozen=True)
class Problem:
    """Sizes of a product with result ``c[batch?, m, n]`` and contraction length ``k``.

    ``batch`` is None when both operands have rank 2. The sizes do not depend
    on the layout (``problem_of`` reads them from the operands by layout).

    Example:
        >>> Problem(None, 1000, 64, 8).empty, Problem(0, 10, 10, 10).empty
        (False, True)
    """

    batch: int | None
    m: int
    k: int
    n: int

    @property
    def empty(self) -> bool:
        return 0 in (self.m, self.k, self.n) or self.batch == 0


def check_dims(*shapes: Sequence[Any]) -> None:
    """TypeError naming the shapes unless every dimension is a non-negative integer (Python
    or NumPy, not bool) or symbolic (``jax.export``)."""
    for d in (d for shape in shapes for d in shape):
        if not _compat.is_symbolic_dim(d) and (
            isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0
        ):
            named = " and ".join(str(tuple(s)) for s in shapes)
            raise TypeError(
                f"tsm2_matmul: dimensions must be non-negative integers, got shapes {named}"
            )


def check_layout(layout: Any) -> str:
    """Returns ``layout`` if it is one of ``LAYOUTS``, else raises ValueError."""
    if layout not in LAYOUT_IDS:
        raise ValueError(f"tsm2_matmul: layout must be one of {LAYOUTS}, got {layout!r}")
    return layout


def problem_of(a_shape: Sequence[int], b_shape: Sequence[int], layout: str = "nn") -> Problem:
    """Checks a canonical operand pair in ``layout`` and returns its sizes.

    Each operand has rank 2 or 3; a rank-3 operand's batch equals the result's
    or is 1 (shared by every batch entry). ``layout`` says how the last two
    dimensions are stored: nn ``a[m, k], b[k, n]``, nt ``a[m, k], b[n, k]``,
    tn ``a[k, m], b[k, n]``. Dimensions are non-negative integers or symbolic
    (``jax.export``). Raises TypeError naming the shapes.

    Example:
        >>> problem_of((4, 10, 3), (3, 2))
        Problem(batch=4, m=10, k=3, n=2)
        >>> problem_of((3, 10), (2, 10), "nt")
        Problem(batch=None, m=3, k=10, n=2)
        >>> problem_of((1000, 3), (1000, 2), "tn")
        Problem(batch=None, m=3, k=1000, n=2)
    """
    a_shape, b_shape = tuple(a_shape), tuple(b_shape)
    check_layout(layout)
    check_dims(a_shape, b_shape)
    if len(a_shape) not in (2, 3) or len(b_shape) not in (2, 3):
        raise TypeError(
            f"tsm2_matmul: operands must have rank 2 or 3, got shapes {a_shape} and {b_shape}"
        )
    m, k = a_shape[-2:] if layout != "tn" else a_shape[:-3:-1]
    kb, n = b_shape[-2:] if layout != "nt" else b_shape[:-3:-1]
    if k != kb:
        raise TypeError(
            f"tsm2_matmul: contracting dimensions differ (layout {layout}): "
            f"a{list(a_shape)} has k={k}, b{list(b_shape)} has k={kb}"
        )
    if len(a_shape) == 2 and len(b_shape) == 2:
        return Problem(None, m, k, n)
    ba = a_shape[0] if len(a_shape) == 3 else 1
    bb = b_shape[0] if len(b_shape) == 3 else 1
    if ba != bb and 1 not in (ba, bb):
        raise TypeError(
            f"tsm2_matmul: batch dimensions {ba} and {bb} differ and neither is 1 "
            f"(shapes {a_shape} and {b_shape})"
        )
    return Problem(bb if ba == 1 else ba, m, k, n)

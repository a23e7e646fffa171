"""Which implementation runs a product: a TSM2 kernel (R, L, S, T) or XLA's dot.

``route`` is a pure function of static facts (operand shapes and dtypes, the
operand layout, the output dtype, precision, platform, the custom-call mode,
and whether the CUDA targets were built). The lowerings in ``primitive.py``
call it; tests and the coming ``explain()`` call it directly. It returns a
``Route``: the decision and a sentence saying why.

The problem is the canonical one of the ``tsm2_matmul`` primitive, in one of
three layouts (all row-major; the result is always ``c[batch?, m, n]`` and the
contraction has length ``k``):

- ``"nn"``: ``a[batch?, m, k] @ b[batch?, k, n]``;
- ``"nt"``: ``a[batch?, m, k] @ b[batch?, n, k]^T`` (k-means' ``X @ C.T``);
- ``"tn"``: ``a[batch?, k, m]^T @ b[batch?, k, n]`` (Gram matrices, ``dL/dB``).

Two layers decide. Eligibility (the thresholds below, from the paper's
reasoning) says which kernel could run a shape:

- TSM2L (nn, nt): k and n small enough for B to sit on chip;
- TSM2R (nn, nt): a skinny B (n small) and a contraction long enough to stream A;
- TSM2S (nn only): a few rows of A (m <= 16) times a large B (n past TSM2R's range);
- TSM2T (tn only): both output dimensions small (m, n <= 512), the contraction
  k the huge one; deterministic (no float atomics).

Other shapes, and layouts a kernel does not take (``ffi/matmul_problem.h``
CheckKernel), go to XLA's dot. In mode "auto" a kernel must also have
measured faster than XLA's dot for that kind of shape and layout
(``MEASURED_WINS``); on an H100 with jax 0.11.2, XLA's dot streamed most of
the R and L suites at 90-99% of the read ceiling and our kernels at 25-91%
(benchmarks/results/h100-2026-11-22b), so that list is short: bf16 TSM2L with
k, n <= 8 in layout nn, where XLA's dot reached only 50-55%. The S and T
kernels and the nt/tn layouts have no measurement yet, so "auto" never picks
them. Mode "prefer" skips the second layer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from jax import numpy as jnp

from jax_tsm2 import _compat
from jax_tsm2.problem import Problem

# TSM2L: tall-and-skinny A (k small) times a small B (k x n).
TSM2L_MAX_K = 64
TSM2L_MAX_N = 64
# TSM2R: large A times a skinny B; used when k is past TSM2L's range.
TSM2R_MAX_N = 64
# TSM2S: a few rows of A times a large B (ffi/split_plans.h kSMaxM).
TSM2S_MAX_M = 16
# TSM2T: A^T @ B with a small result (both m and n) and a huge contraction.
TSM2T_MAX_M = 512
TSM2T_MAX_N = 512

# The FFI attributes `kernel` and `layout` (ffi/matmul_kinds.h).
KERNEL_IDS: dict[str, int] = {"tsm2r": 0, "tsm2l": 1, "tsm2s": 2, "tsm2t": 3}
LAYOUT_IDS: dict[str, int] = {"nn": 0, "nt": 1, "tn": 2}
LAYOUTS: tuple[str, ...] = tuple(LAYOUT_IDS)
# Which layouts each kernel reads (ffi/matmul_problem.h CheckKernel).
KERNEL_LAYOUTS: dict[str, frozenset[str]] = {
    "tsm2r": frozenset({"nn", "nt"}),
    "tsm2l": frozenset({"nn", "nt"}),
    "tsm2s": frozenset({"nn"}),
    "tsm2t": frozenset({"tn"}),
}


@dataclasses.dataclass(frozen=True)
class MeasuredWin:
    """A region of shapes where a kernel measured faster than XLA's dot (``rows`` = batch * m).

    ``layout`` is the operand layout the measurement was taken in.
    """

    target: str
    dtypes: frozenset[str]
    max_rows: int
    max_k: int
    max_n: int
    evidence: str
    min_rows: int = 0
    layout: str = "nn"
    min_k: int = 0

    def covers(self, target: str, dtype: np.dtype, p: Problem, layout: str = "nn") -> bool:
        rows = (p.batch or 1) * p.m
        return (
            target == self.target
            and layout == self.layout
            and dtype.name in self.dtypes
            and self.min_rows <= rows <= self.max_rows
            and self.min_k <= p.k <= self.max_k
            and p.n <= self.max_n
        )


# Regions where mode "auto" picks a kernel over XLA's dot, from the committed
# benchmark runs. Widen them only with a measurement in benchmarks/results/.
MEASURED_WINS: tuple[MeasuredWin, ...] = (
    MeasuredWin(
        "tsm2l",
        frozenset({"bfloat16"}),
        max_rows=2**62,
        max_k=8,
        max_n=8,
        evidence="H100: L bf16 1e7x8x8 1.47x, 1e6x8x8 1.34x, 1e5x8x8 1.01-1.19x over "
        "jnp.matmul (h100-2026-11-22b); measured at k = n = 8 only",
    ),
    # A^T @ B over a long contraction: XLA's dot streamed every TN case at
    # about 32% of the read ceiling, TSM2T at 54-80%.
    MeasuredWin(
        "tsm2t",
        frozenset({"float32", "float64"}),
        max_rows=512,
        max_k=2**62,
        max_n=256,
        min_k=1_000_000,
        layout="tn",
        evidence="H100: TN f32 1e7x16x16 2.25x, 1e6x16x256 1.85x, 1e6x64x64 1.19x; f64 "
        "2.48x, 2.20x, 1.38x over jnp.matmul (h100-2026-11-22c); measured at k >= 1e6",
    ),
)
SUPPORTED_DTYPES: frozenset[np.dtype] = frozenset(
    np.dtype(t) for t in (jnp.float32, jnp.float64, jnp.bfloat16, jnp.float16)
)
_HALF_DTYPES = frozenset(np.dtype(t) for t in (jnp.bfloat16, jnp.float16))
_PLATFORMS_WITH_TARGETS = ("cpu", "cuda")

Target = Literal["tsm2r", "tsm2l", "tsm2s", "tsm2t", "xla"]
Layout = Literal["nn", "nt", "tn"]


@dataclasses.dataclass(frozen=True)
class Route:
    """A routing decision: ``target`` and a human-readable ``reason``, for one ``layout``."""

    target: Target
    reason: str
    problem: Problem | None = None
    layout: Layout = "nn"

    @property
    def kernel(self) -> int | None:
        """The FFI ``kernel`` attribute (0 = R, 1 = L, 2 = S, 3 = T), or None for XLA."""
        return KERNEL_IDS.get(self.target)

    @property
    def layout_id(self) -> int:
        """The FFI ``layout`` attribute (0 = nn, 1 = nt, 2 = tn)."""
        return LAYOUT_IDS[self.layout]

    @property
    def custom_call(self) -> bool:
        return self.target != "xla"


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
    tn ``a[k, m], b[k, n]``. Raises TypeError naming the shapes.

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


def kernel_can_write(dtype: Any, out_dtype: Any) -> bool:
    """The kernels write C in the operand dtype, or in f32 for bf16/f16 operands."""
    dtype, out_dtype = np.dtype(dtype), np.dtype(out_dtype)
    return out_dtype == dtype or (dtype in _HALF_DTYPES and out_dtype == np.float32)


def _choose_kernel(p: Problem, layout: str, mode: str) -> tuple[Target, str]:
    """Eligibility: the kernel that takes this shape in this layout, or XLA's dot."""
    if layout == "tn":
        if p.m <= TSM2T_MAX_M and p.n <= TSM2T_MAX_N:
            why = f"m={p.m} <= {TSM2T_MAX_M} and n={p.n} <= {TSM2T_MAX_N}"
            return "tsm2t", f"tn: {why}, contraction k={p.k}: TSM2T"
        if mode == "always":
            return "tsm2t", f"tn: m={p.m}, n={p.n}, forced by mode 'always': TSM2T"
        return "xla", (
            f"tn: m={p.m} or n={p.n} > {TSM2T_MAX_M}: the result is not small, XLA's dot"
        )
    if p.k <= TSM2L_MAX_K and p.n <= TSM2L_MAX_N:
        return "tsm2l", f"{layout}: k={p.k} <= {TSM2L_MAX_K} and n={p.n} <= {TSM2L_MAX_N}: TSM2L"
    if p.n <= TSM2R_MAX_N:
        return "tsm2r", f"{layout}: n={p.n} <= {TSM2R_MAX_N} and k={p.k} > {TSM2L_MAX_K}: TSM2R"
    if layout == "nn" and p.m <= TSM2S_MAX_M:
        return "tsm2s", f"nn: m={p.m} <= {TSM2S_MAX_M} and n={p.n} > {TSM2R_MAX_N}: TSM2S"
    if mode == "always":
        return "tsm2r", f"{layout}: n={p.n} > {TSM2R_MAX_N}, forced by mode 'always': TSM2R"
    return "xla", f"{layout}: n={p.n} > {TSM2R_MAX_N}: not tall-and-skinny, XLA's dot"


def route(
    a: Any,
    b: Any,
    out_dtype: Any,
    *,
    platform: str,
    mode: str,
    precision: Any = None,
    cuda_targets: bool = True,
    layout: str = "nn",
) -> Route:
    """Decides how the product of canonical rank-2/3 operands ``a``, ``b`` is computed.

    Args:
      a, b: anything with ``.shape`` and ``.dtype`` (avals, ShapeDtypeStructs, arrays),
        stored in ``layout``.
      out_dtype: dtype of the result.
      platform: the lowering platform, e.g. ``"cuda"`` or ``"cpu"``.
      mode: ``"auto"``, ``"prefer"``, ``"always"`` or ``"never"`` (see ``jax_tsm2.config``).
      precision: canonical ``lax`` precision (None, a pair of ``lax.Precision``
        or a dot algorithm). The kernels compute at full precision (never
        TF32), which satisfies every ``Precision`` value; dot algorithms ask
        for specific arithmetic and go to XLA.
      cuda_targets: whether this build has the CUDA kernels.
      layout: ``"nn"``, ``"nt"`` or ``"tn"`` (module docstring).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> a = jax.ShapeDtypeStruct((20480, 20480), jnp.float32)
        >>> b = jax.ShapeDtypeStruct((20480, 8), jnp.float32)
        >>> route(a, b, jnp.float32, platform="cuda", mode="prefer").target
        'tsm2r'
        >>> route(a, b, jnp.float32, platform="cuda", mode="auto").target  # XLA measured faster
        'xla'
        >>> g = jax.ShapeDtypeStruct((1_000_000, 16), jnp.float32)  # A^T @ A: a Gram matrix
        >>> route(g, g, jnp.float32, platform="cuda", mode="prefer", layout="tn").target
        'tsm2t'
    """
    dtype, out = np.dtype(a.dtype), np.dtype(out_dtype)
    p = problem_of(a.shape, b.shape, layout)
    xla = lambda why: Route("xla", f"{layout}: {why}", p, layout)
    if platform not in _PLATFORMS_WITH_TARGETS:
        return xla(f"no tsm2 target for platform {platform!r}")
    if mode == "never":
        return xla("mode 'never'")
    if np.dtype(b.dtype) != dtype or dtype not in SUPPORTED_DTYPES:
        return xla(f"dtypes {dtype}, {np.dtype(b.dtype)}: the kernels take f32, f64, bf16, f16")
    if not kernel_can_write(dtype, out):
        return xla(f"the kernels cannot write {out} from {dtype} operands")
    if precision is not None and _compat.is_dot_algorithm(precision):
        return xla(f"dot algorithm {precision} requested")
    if p.empty:
        return xla("empty problem (a zero dimension): XLA's dot returns the right zeros")
    if platform == "cpu":
        if mode != "always":
            return xla("on CPU XLA's dot is used (mode 'always' forces the reference target)")
        target, why = _choose_kernel(p, layout, mode)
        return Route(target, f"mode 'always' on CPU: reference target ({why})", p, layout)
    if not cuda_targets:
        return xla("this build of jax_tsm2 has no CUDA targets (built with TSM2_CUDA=OFF?)")
    target, why = _choose_kernel(p, layout, mode)
    if mode == "auto" and target != "xla":
        win = next((w for w in MEASURED_WINS if w.covers(target, dtype, p, layout)), None)
        if win is None:
            return Route(
                "xla",
                f"{why}, but XLA's dot measured faster for such shapes, or no measurement "
                "covers them (routing.MEASURED_WINS; mode 'prefer' runs the kernel anyway)",
                p,
                layout,
            )
        why = f"{why}; measured faster than XLA's dot ({win.evidence})"
    assert layout in KERNEL_LAYOUTS.get(target, LAYOUTS), (target, layout)
    return Route(target, why, p, layout)

"""The benchmark suite (docs/benchmarking.md): families of cases, their bytes, flops and references.

A *family* is everything the harness needs to know about one kind of product: which cases it has
(the full suite, a quick subset, tiny CPU shapes), the operand shapes of a case, the fewest bytes
an implementation must move, the flop count, how to apply a ``matmul``-like callable to the
operands (one definition serves ``jax_tsm2.matmul``, ``jnp.matmul``, ``torch.matmul`` and
``np.matmul``), and how to compute a cheap float64 reference.

Families R, L, NT, TN and S are the product suite. GRAD is the gradient benchmark:
``jax.grad`` of a least-squares loss, timed like a product (see :class:`GradFamily`). ``APP``
is no family of its own but a list of products taken from real programs
(:data:`jax_tsm2.programs.APP_CASES`),
each a case of the family of its layout that names its source. A family with another layout
subclasses :class:`Family` (override ``operand_shapes``/``output_shape``/``apply`` and, where
rows of the output are not rows of the first operand, ``check_rows``/``reference``) and is
listed in :data:`FAMILIES`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from jax_tsm2.programs import APP_CASES

try:  # ml_dtypes ships with jaxlib; it is what jnp.bfloat16 is.
    from ml_dtypes import bfloat16 as _bfloat16
except ImportError:  # pragma: no cover
    _bfloat16 = None

Shape = tuple[int, ...]

#: Short dtype names used on the command line and in the JSON, with their numpy dtypes.
DTYPES: dict[str, Any] = {
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "bf16": np.dtype(_bfloat16) if _bfloat16 is not None else None,
    "f16": np.dtype(np.float16),
}


def itemsize(dtype: str) -> int:
    """Bytes per element of a short dtype name."""
    return DTYPES[dtype].itemsize


@dataclass(frozen=True, order=True)
class Case:
    """One benchmark case: a family, a dtype and the logical sizes ``m``, ``k``, ``n``; for a
    product of family APP, the program it comes from (``source``)."""

    family: str
    dtype: str
    m: int
    k: int
    n: int
    source: str | None = field(default=None, compare=False)

    @property
    def shape_label(self) -> str:
        return f"{self.m}x{self.k}x{self.n}"

    @property
    def label(self) -> str:
        """``FAMILY:MxKxN`` as ``--case`` accepts it (the dtype is separate)."""
        return f"{self.family}:{self.shape_label}"


@dataclass(frozen=True)
class Family:
    """A family of products ``C = A @ B`` with ``A`` m x k and ``B`` k x n (row-major, NN).

    Subclasses change the operand layout (NT, TN) by overriding :meth:`operand_shapes`,
    :meth:`output_shape`, :meth:`apply` and, where rows of the output are not rows of the first
    operand, :meth:`reference`.
    """

    name: str
    title: str
    shapes: tuple[tuple[int, int, int], ...]
    quick_shapes: tuple[tuple[int, int, int], ...]
    tiny_shapes: tuple[tuple[int, int, int], ...]
    dtypes: tuple[str, ...] = ("f32", "f64", "bf16", "f16")
    notes: str = field(default="", compare=False)

    # -- what a case is ---------------------------------------------------------------------
    def operand_shapes(self, case: Case) -> tuple[Shape, ...]:
        return ((case.m, case.k), (case.k, case.n))

    def output_shape(self, case: Case) -> Shape:
        return (case.m, case.n)

    def apply(self, matmul: Callable[..., Any], *operands: Any) -> Any:
        """The product of this family, written with ``matmul`` (any framework's)."""
        a, b = operands
        return matmul(a, b)

    @property
    def product(self) -> str:
        """The product as a formula, for tables and the JSON (``records[i].product``)."""
        return "A @ B"

    def contraction(self, case: Case) -> int:
        """Length of the sums in the product (what rounding errors grow with)."""
        return case.k

    def explain_operands(self, operands: Sequence[Any]) -> tuple[Any, ...] | None:
        """The ``(a, b)`` that ``jax_tsm2.explain`` should be asked about, or None where the
        product is not a plain ``a @ b`` of the operands as given."""
        return tuple(operands[:2])

    # -- what it costs ----------------------------------------------------------------------
    def min_bytes(self, case: Case) -> int:
        """Fewest bytes moved: every operand read once, the output written once."""
        elems = sum(int(np.prod(s)) for s in self.operand_shapes(case))
        elems += int(np.prod(self.output_shape(case)))
        return elems * itemsize(case.dtype)

    def input_bytes(self, case: Case) -> int:
        return sum(int(np.prod(s)) for s in self.operand_shapes(case)) * itemsize(case.dtype)

    def output_bytes(self, case: Case) -> int:
        return int(np.prod(self.output_shape(case))) * itemsize(case.dtype)

    def flops(self, case: Case) -> int:
        return 2 * case.m * case.k * case.n

    # -- how it is checked ------------------------------------------------------------------
    def check_rows(self, case: Case, rng: np.random.Generator) -> np.ndarray:
        """Rows of the output to compare with the reference: first, last, and random ones.

        About four million elements of ``A`` are read back, so huge cases stay cheap.
        """
        m, k = case.m, case.k
        count = int(min(m, max(8, min(4096, 4_000_000 // max(k, 1)))))
        if count >= m:
            return np.arange(m)
        picked = rng.choice(m, size=count - 2, replace=False)
        return np.unique(np.concatenate([[0, m - 1], picked])).astype(np.int64)

    def reference(self, operands: Sequence[Any], rows: np.ndarray) -> np.ndarray:
        """Float64 reference of the given output rows, computed on the host.

        ``operands`` are device arrays (JAX); only the sampled rows of the first operand and
        the (small) other operands come back to the host.
        """
        a = operands[0]
        first = np.asarray(a)[rows] if a.nbytes <= 2**26 else np.asarray(a[rows])
        first = first.astype(np.float64)
        rest = [np.asarray(op).astype(np.float64) for op in operands[1:]]
        return np.asarray(self.apply(np.matmul, first, *rest))


def _row_blocks(rows: int, width: int, elems: int = 1 << 22) -> Iterator[tuple[int, int]]:
    """``(lo, hi)`` blocks of rows of about ``elems`` elements each (for float64 references
    that need every row but should not hold a float64 copy of a GB-sized operand)."""
    step = max(1, elems // max(width, 1))
    for lo in range(0, rows, step):
        yield lo, min(rows, lo + step)


@dataclass(frozen=True)
class NTFamily(Family):
    """``C = A @ B.T`` with ``B`` given as n x k (k-means distances). Rows of C are rows of A,
    so the sampled-rows check of :class:`Family` applies as is."""

    def operand_shapes(self, case: Case) -> tuple[Shape, ...]:
        return ((case.m, case.k), (case.n, case.k))

    def apply(self, matmul: Callable[..., Any], *operands: Any) -> Any:
        a, b = operands
        return matmul(a, b.T)  # .T is a view in numpy and torch, a transpose JAX may fold

    @property
    def product(self) -> str:
        return "A @ B.T"

    def explain_operands(self, operands: Sequence[Any]) -> tuple[Any, ...] | None:
        return None  # explain(a, b) would describe a @ b, not a @ b.T


@dataclass(frozen=True)
class TNFamily(Family):
    """``C = A.T @ B`` with ``A`` m x k, ``B`` m x n, ``m`` huge; C is k x n.

    Every element of C is a sum over all m rows, so no sample of rows checks it: the check
    compares the whole (small) output with a float64 reference of every row, computed on the
    host in blocks of rows. The sums are m long, so the f32 tolerance grows with sqrt(m).
    """

    def operand_shapes(self, case: Case) -> tuple[Shape, ...]:
        return ((case.m, case.k), (case.m, case.n))

    def output_shape(self, case: Case) -> Shape:
        return (case.k, case.n)

    def apply(self, matmul: Callable[..., Any], *operands: Any) -> Any:
        a, b = operands
        return matmul(a.T, b)

    @property
    def product(self) -> str:
        return "A.T @ B"

    def contraction(self, case: Case) -> int:
        return case.m

    def explain_operands(self, operands: Sequence[Any]) -> tuple[Any, ...] | None:
        return None  # explain(a, b) would describe a @ b, not a.T @ b

    def check_rows(self, case: Case, rng: np.random.Generator) -> np.ndarray:
        return np.arange(case.k)  # the whole k x n output

    def reference(self, operands: Sequence[Any], rows: np.ndarray) -> np.ndarray:
        a, b = (np.asarray(op) for op in operands)
        out = np.zeros((a.shape[1], b.shape[1]))
        for lo, hi in _row_blocks(a.shape[0], a.shape[1] + b.shape[1]):
            out += a[lo:hi].astype(np.float64).T @ b[lo:hi].astype(np.float64)
        return out[rows]


def _is_torch(x: Any) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


def _jax_grad(matmul: Callable[..., Any], a: Any, x: Any, y: Any) -> Any:
    import jax
    import jax.numpy as jnp

    def loss(x: Any) -> Any:
        r = matmul(a, x) - y
        return jnp.sum(r * r)

    return jax.grad(loss)(x)


def _torch_grad(matmul: Callable[..., Any], a: Any, x: Any, y: Any) -> Any:
    import torch

    x = x.detach().requires_grad_(True)  # a leaf of its own: autograd stops here
    with torch.enable_grad():
        r = matmul(a, x) - y
        (grad,) = torch.autograd.grad((r * r).sum(), x)
    return grad


@dataclass(frozen=True)
class GradFamily(Family):
    """The gradient benchmark: ``grad_x sum((A @ x - y)**2) = 2 A.T (A x - y)``.

    Operands ``A`` (m x k), ``x`` (k x n), ``y`` (m x n); the output is the gradient, k x n.
    JAX implementations are ``jax.grad`` of the loss written with their ``matmul`` (so
    ``jax_tsm2.matmul``'s own transpose rule computes ``A.T @ r``), torch is autograd
    (``torch.autograd.grad``) of the same loss, numpy (the reference) the closed form.
    Bytes are what a two-pass gradient must move: ``A`` read twice (the forward product and
    the backward ``A.T @ r``), ``y`` read once, ``x`` read and the gradient written once; the
    m x n residual (written and read back between the passes) is not counted.
    """

    def operand_shapes(self, case: Case) -> tuple[Shape, ...]:
        return ((case.m, case.k), (case.k, case.n), (case.m, case.n))

    def output_shape(self, case: Case) -> Shape:
        return (case.k, case.n)

    def apply(self, matmul: Callable[..., Any], *operands: Any) -> Any:
        a, x, y = operands
        if isinstance(a, np.ndarray):
            return 2.0 * matmul(a.T, matmul(a, x) - y)
        if _is_torch(a):
            return _torch_grad(matmul, a, x, y)
        return _jax_grad(matmul, a, x, y)

    @property
    def product(self) -> str:
        return "grad_x sum((A @ x - y)**2) = 2 A.T (A @ x - y)"

    def min_bytes(self, case: Case) -> int:
        m, k, n = case.m, case.k, case.n
        return (2 * m * k + m * n + 2 * k * n) * itemsize(case.dtype)

    def flops(self, case: Case) -> int:
        return 4 * case.m * case.k * case.n  # A @ x and A.T @ r

    def contraction(self, case: Case) -> int:
        return max(case.m, case.k)  # A.T @ r sums over m

    def explain_operands(self, operands: Sequence[Any]) -> tuple[Any, ...] | None:
        return tuple(operands[:2])  # the forward product A @ x

    def check_rows(self, case: Case, rng: np.random.Generator) -> np.ndarray:
        return np.arange(case.k)  # the whole k x n gradient

    def reference(self, operands: Sequence[Any], rows: np.ndarray) -> np.ndarray:
        a, x, y = (np.asarray(op) for op in operands)
        x = x.astype(np.float64)
        grad = np.zeros(x.shape)
        for lo, hi in _row_blocks(a.shape[0], a.shape[1] + y.shape[1]):
            block = a[lo:hi].astype(np.float64)
            grad += block.T @ (block @ x - y[lo:hi].astype(np.float64))
        return 2.0 * grad[rows]


# The suite. m = 1e4 .. 1e7 are written out so that the JSON holds plain integers.
_R_SHAPES = tuple(
    (s, s, n) for s in (10240, 20480, 30720) for n in (1, 2, 4, 8, 16, 32, 64)
) + tuple((15360, k, 16) for k in (3840, 7680, 15360, 30720))
_L_SHAPES = tuple(
    (m, kn, kn) for m in (10_000, 100_000, 1_000_000, 10_000_000) for kn in (8, 16, 32, 64)
)
_NT_SHAPES = (
    (1_000_000, 256, 16),
    (1_000_000, 256, 64),
    (100_000, 4096, 16),
    (250_000, 4096, 16),
)
_S_SHAPES = tuple((m, k, n) for k, n in ((4096, 4096), (8192, 14336)) for m in (1, 2, 4, 8, 16))
_TN_SHAPES = ((10_000_000, 16, 16), (1_000_000, 16, 256), (1_000_000, 64, 64))
#: The gradient benchmark: A 1e6 x 512, x 512 x 8.
GRAD_SHAPE = (1_000_000, 512, 8)

FAMILIES: dict[str, Family] = {
    "R": Family(
        name="R",
        title="TSM2R: large A (m x k), tall-and-skinny B (k x n)",
        shapes=_R_SHAPES,
        quick_shapes=((20480, 20480, 4), (20480, 20480, 16)),
        tiny_shapes=((256, 256, 1), (256, 256, 8), (96, 320, 16)),
    ),
    "L": Family(
        name="L",
        title="TSM2L: tall-and-skinny A (m x k, m huge), small B (k x n)",
        shapes=_L_SHAPES,
        quick_shapes=((1_000_000, 16, 16), (10_000_000, 16, 16)),
        tiny_shapes=((1000, 8, 8), (4099, 16, 16)),
    ),
    "NT": NTFamily(
        name="NT",
        title="NT: A @ B.T, A m x k, B given as n x k (k-means distances)",
        shapes=_NT_SHAPES,
        quick_shapes=((1_000_000, 256, 16), (100_000, 4096, 16)),
        tiny_shapes=((1000, 64, 8), (300, 96, 16)),
        dtypes=("f32", "bf16", "f16"),
    ),
    "S": Family(
        name="S",
        title="S: small-left, A m x k with m small, B k x n large",
        shapes=_S_SHAPES,
        quick_shapes=((4, 4096, 4096), (16, 8192, 14336)),
        tiny_shapes=((1, 256, 512), (8, 320, 96)),
        dtypes=("f32", "bf16", "f16"),
        notes="m <= 16: every output row is checked (B comes back to the host whole)",
    ),
    "TN": TNFamily(
        name="TN",
        title="TN: A.T @ B, A m x k, B m x n, m huge; C k x n",
        shapes=_TN_SHAPES,
        quick_shapes=((10_000_000, 16, 16), (1_000_000, 64, 64)),
        tiny_shapes=((20000, 8, 8), (2000, 16, 32)),
        dtypes=("f32", "f64"),
    ),
    "GRAD": GradFamily(
        name="GRAD",
        title="GRAD: jax.grad of sum((A @ x - y)**2) in x, A m x k, x k x n, y m x n",
        shapes=(GRAD_SHAPE,),
        quick_shapes=(GRAD_SHAPE,),
        tiny_shapes=((2000, 64, 8), (513, 32, 3)),
        # Not f16: with unit-normal data the gradient's entries (sums of 1e6
        # products of ~N(0, 512) residuals) pass f16's 65504, so every
        # implementation, jnp and torch included, returns inf.
        dtypes=("f32", "f64", "bf16"),
        notes="f16 left out: the gradient overflows f16 at 1e6 rows for every implementation",
    ),
}


APP = "APP"

#: dtypes run when ``--dtype`` is not given (f16 on request).
DEFAULT_DTYPES: tuple[str, ...] = ("f32", "f64", "bf16")
#: families run when ``--family`` is not given (``--family all`` runs every one).
DEFAULT_FAMILIES: tuple[str, ...] = ("R", "L")
#: the layout families: their checks are reported apart from R and L's (report.py).
LAYOUT_FAMILIES: tuple[str, ...] = ("NT", "TN", "S")
GRAD_FAMILY = "GRAD"


def parse_int(text: str) -> int:
    """Parse ``20480``, ``1e7`` or ``10_000`` as an exact integer."""
    text = text.strip().replace("_", "")
    try:
        return int(text)
    except ValueError:
        value = float(text)
        if not value.is_integer():
            raise ValueError(f"not an integer: {text!r}") from None
        return int(value)


def parse_case(text: str) -> tuple[str, tuple[int, int, int]]:
    """Parse ``R:20480x20480x8`` (``FAMILY:MxKxN``) into ``("R", (20480, 20480, 8))``."""
    try:
        fam, dims = text.split(":", 1)
        m, k, n = (parse_int(d) for d in dims.lower().split("x"))
    except (ValueError, OverflowError) as err:
        raise ValueError(f"bad case {text!r}; expected FAMILY:MxKxN, e.g. R:20480x20480x8") from err
    if min(m, k, n) < 1:
        raise ValueError(f"bad case {text!r}: sizes must be >= 1")
    fam = fam.strip().upper()
    if fam not in FAMILIES:
        raise ValueError(f"unknown family {fam!r} in case {text!r}; known: {', '.join(FAMILIES)}")
    return fam, (m, k, n)


def _app_cases(mode: str, dtypes: list[str]) -> list[Case]:
    """The APP products in their listed order, at the dtypes asked for that each runs."""
    out = []
    for app in APP_CASES:
        if mode == "quick" and not app.quick:
            continue
        shape = app.tiny if mode == "tiny" else app.shape
        out += [Case(app.family, d, *shape, source=app.source) for d in app.dtypes if d in dtypes]
    return out


def select_cases(
    families: Iterable[str] = DEFAULT_FAMILIES,
    dtypes: Iterable[str] = DEFAULT_DTYPES,
    mode: str = "full",
    m: Iterable[int] | None = None,
    k: Iterable[int] | None = None,
    n: Iterable[int] | None = None,
    explicit: Iterable[str] = (),
) -> list[Case]:
    """The cases to run, ordered by family, dtype and (m, k, n); then the APP products.

    ``mode`` is ``"full"`` (the suite), ``"quick"`` or ``"tiny"`` (CPU smoke tests). Explicit
    ``FAMILY:MxKxN`` cases replace the suite's shapes (and imply their families). ``m``, ``k``,
    ``n`` keep only shapes whose sizes are listed. Family ``"ALL"`` stands for every family and
    the APP products; ``"APP"`` for the products from real programs (:data:`APP_CASES`, each
    at its own dtypes among ``dtypes``). A family runs only the dtypes it lists (the suite's,
    plus f16 where it makes sense); a selection that leaves no case is an error that says why.
    """
    if mode not in ("full", "quick", "tiny"):
        raise ValueError(f"unknown mode {mode!r}")
    dtypes = list(dtypes)
    for d in dtypes:
        if d not in DTYPES or DTYPES[d] is None:
            raise ValueError(f"unknown or unavailable dtype {d!r}; known: {', '.join(DTYPES)}")
    shapes: dict[str, list[tuple[int, int, int]]] = {}
    explicit = list(explicit)
    apps: list[Case] = []
    app_asked = False
    if explicit:
        for text in explicit:
            fam, shape = parse_case(text)
            shapes.setdefault(fam, []).append(shape)
    else:
        families = [f.strip().upper() for f in families]
        if "ALL" in families:
            families = [*FAMILIES, APP]
        for fam in families:
            if fam == APP:
                app_asked, apps = True, _app_cases(mode, dtypes)
                continue
            if fam not in FAMILIES:
                known = ", ".join([*FAMILIES, APP])
                raise ValueError(f"unknown family {fam!r}; known: {known}")
            f = FAMILIES[fam]
            pick = {"full": f.shapes, "quick": f.quick_shapes, "tiny": f.tiny_shapes}[mode]
            shapes[fam] = list(pick)
    keep_m, keep_k, keep_n = (set(v) if v is not None else None for v in (m, k, n))

    def kept(mm: int, kk: int, nn: int) -> bool:
        return all(
            keep is None or v in keep for keep, v in ((keep_m, mm), (keep_k, kk), (keep_n, nn))
        )

    cases = []
    for fam, fam_shapes in shapes.items():
        f = FAMILIES[fam]
        for mm, kk, nn in dict.fromkeys(fam_shapes):
            if kept(mm, kk, nn):
                cases.extend(Case(fam, d, mm, kk, nn) for d in dtypes if d in f.dtypes)
    order = {d: i for i, d in enumerate(DTYPES)}
    fam_order = {name: i for i, name in enumerate(FAMILIES)}
    cases.sort(key=lambda c: (fam_order[c.family], order[c.dtype], c.m, c.k, c.n))
    cases += [c for c in apps if kept(c.m, c.k, c.n)]
    if not cases:
        runs = [f"{f} runs {', '.join(FAMILIES[f].dtypes)}" for f in shapes]
        if app_asked:
            runs.append(f"{APP} runs {', '.join(sorted({d for a in APP_CASES for d in a.dtypes}))}")
        filters = " and the m/k/n filters" if any(v is not None for v in (m, k, n)) else ""
        raise ValueError(
            f"no cases selected by dtypes {', '.join(dtypes)}{filters} ({'; '.join(runs)})"
        )
    return cases

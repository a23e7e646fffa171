"""``--grid N``: the validation grid of random shapes, and what runs on each.

Each shape draws its family uniformly from R, L, NT, TN, S and its dtype uniformly from f32,
f64, bf16, f16; then m, k, n log-uniformly over the family's ranges (``FULL``: those of
the suite's families, widened to the regions the kernels are meant for), redrawn until
the case's minimal bytes lie in ``[min_bytes, max_bytes]`` (at most ~1 GB, so that the distinct
buffers of a call fit and the grid stays short; at least ~1 MB, below which launch costs are
all there is to time). A family may have several regions (NT: R-like, L-like and the k-means
shapes of the NT suite); one is picked uniformly per draw. The draw is deterministic for a seed,
and the first ``N`` shapes of a larger grid are the grid of ``N``.

On each shape the harness times the routed ``jax_tsm2.matmul`` (mode "auto"; with
``--autotune``, autotuned at its lowering: ``jax_tsm2.autotune``), XLA's dot
(``jnp.matmul``, default precision) and every TSM2 kernel that can take the shape in the
family's layout, each forced through the FFI target (``jax_tsm2.kernel_call``);
``grid_report.py`` compares them.

Example:
    >>> from jax_tsm2.bench import grid
    >>> cases = grid.draw(120, seed=0)
    >>> len(cases), sorted({c.family for c in cases}) == sorted(grid.GRID_FAMILIES)
    (120, True)
    >>> cases == grid.draw(120, seed=0) and cases[:10] == grid.draw(10, seed=0)
    True
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from jax_tsm2 import model
from jax_tsm2.bench.impls import Impl, jax_impls
from jax_tsm2.bench.suite import DTYPES, FAMILIES, Case
from jax_tsm2.kernel_call import kernel_product
from jax_tsm2.tune.tuner import candidates

GRID_FAMILIES: tuple[str, ...] = ("R", "L", "NT", "TN", "S")
GRID_DTYPES: tuple[str, ...] = ("f32", "f64", "bf16", "f16")
#: The operand layout of each family's product as stored (``kernel_call``'s layouts).
LAYOUT = {"R": "nn", "L": "nn", "S": "nn", "NT": "nt", "TN": "tn"}

Interval = tuple[float, float]
Region = tuple[Interval, Interval, Interval]  # m, k, n of a Case (TN: m is the contraction)


@dataclasses.dataclass(frozen=True)
class GridSpec:
    """Per family, the regions its shapes are drawn from; and the minimal-bytes window."""

    name: str
    regions: dict[str, tuple[Region, ...]]
    min_bytes: int
    max_bytes: int

    def to_json(self) -> dict[str, Any]:
        return {
            "spec": self.name,
            "regions": {f: [list(map(list, r)) for r in rs] for f, rs in self.regions.items()},
            "min_bytes": self.min_bytes,
            "max_bytes": self.max_bytes,
        }


_R: Region = ((1e3, 3e4), (1e3, 3e4), (1, 64))
_L: Region = ((1e4, 1e7), (1, 64), (1, 64))
#: The validation grid (the suite's families, widened; TN's m is the contraction).
FULL = GridSpec(
    name="full",
    regions={
        "R": (_R,),
        "L": (_L,),
        "NT": (_R, _L, ((1e5, 1e6), (256, 4096), (1, 64))),
        "TN": (((1e4, 1e7), (1, 256), (1, 256)),),
        "S": (((1, 16), (1e3, 2e4), (1e3, 2e4)),),
    },
    min_bytes=1_000_000,
    max_bytes=1_000_000_000,
)
_TINY_R: Region = ((16, 200), (16, 200), (1, 64))
_TINY_L: Region = ((500, 5000), (1, 64), (1, 64))
#: Tiny shapes of the same kinds (``--tiny``): CPU runs and tests, where the forced kernels
#: are the FFI target's plain-loop CPU reference.
TINY = GridSpec(
    name="tiny",
    regions={
        "R": (_TINY_R,),
        "L": (_TINY_L,),
        "NT": (_TINY_R, _TINY_L),
        "TN": (((1000, 20000), (1, 32), (1, 32)),),
        "S": (((1, 16), (64, 400), (64, 400)),),
    },
    min_bytes=1_000,
    max_bytes=1_000_000,
)
_MAX_TRIES = 10_000


def spec_for(mode: str) -> GridSpec:
    """``TINY`` for the harness's tiny mode (``--tiny``), else ``FULL``."""
    return TINY if mode == "tiny" else FULL


def _log_uniform(rng: np.random.Generator, lo: float, hi: float) -> int:
    value = math.exp(rng.uniform(math.log(lo), math.log(hi)))
    return int(min(max(round(value), math.ceil(lo)), math.floor(hi)))


def draw(
    n: int,
    seed: int = 0,
    spec: GridSpec = FULL,
    families: Sequence[str] = GRID_FAMILIES,
    dtypes: Sequence[str] = GRID_DTYPES,
) -> list[Case]:
    """``n`` distinct random cases (in draw order), deterministic for ``seed``.

    Family and dtype are drawn first, uniformly, and kept; the sizes are redrawn until the
    minimal bytes fit ``spec``'s window, so the window does not bias families or dtypes.
    Raises ValueError for an unknown family or dtype, or one that cannot fit the window.
    """
    families, dtypes = [f.upper() for f in families], list(dtypes)
    for f in families:
        if f not in spec.regions:
            raise ValueError(f"grid family {f!r}: one of {', '.join(spec.regions)}")
    for d in dtypes:
        if d not in DTYPES or DTYPES[d] is None:
            raise ValueError(f"grid dtype {d!r}: one of {', '.join(GRID_DTYPES)}")
    if n < 1:
        raise ValueError(f"--grid takes a number of shapes >= 1, got {n}")
    rng = np.random.default_rng(seed)
    cases: list[Case] = []
    seen: set[Case] = set()
    while len(cases) < n:
        fam = families[rng.integers(len(families))]
        dtype = dtypes[rng.integers(len(dtypes))]
        regions = spec.regions[fam]
        for _ in range(_MAX_TRIES):
            region = regions[rng.integers(len(regions))]
            m, k, nn = (_log_uniform(rng, lo, hi) for lo, hi in region)
            case = Case(fam, dtype, m, k, nn)
            size = FAMILIES[fam].min_bytes(case)
            if spec.min_bytes <= size <= spec.max_bytes and case not in seen:
                break
        else:
            raise ValueError(
                f"no {fam} {dtype} shape of {spec.min_bytes}-{spec.max_bytes} bytes found "
                f"in {_MAX_TRIES} draws"
            )
        seen.add(case)
        cases.append(case)
    return cases


def problem(case: Case) -> Any:
    """The canonical problem of a case in its family's layout (``routing.Problem``)."""
    shapes = FAMILIES[case.family].operand_shapes(case)
    return model.problem_from(tuple(shapes[:2]), LAYOUT[case.family])


def kernels_for(case: Case, device: Any) -> list[str]:
    """The TSM2 kernels that can take the case in its layout (``tune.tuner.candidates``: those
    the model supports, without TSM2L where it would run TSM2R's tile)."""
    dtype = DTYPES[case.dtype].name
    return [t for t in candidates(problem(case), dtype, LAYOUT[case.family], device) if t != "xla"]


def forced_impl(case: Case, kernel: str) -> Impl:
    """The ``kernel`` forced through the FFI target on the case's operands as stored."""
    layout = LAYOUT[case.family]
    fn = kernel_product(kernel, problem(case), DTYPES[case.dtype], layout)
    desc = f"{kernel} forced through the tsm2_matmul FFI target (layout {layout})"
    return Impl(kernel, "jax", desc, fn, kernel=kernel, stored=True)


def routed_and_xla(autotune: bool = False) -> list[Impl]:
    """The routed ``jax_tsm2.matmul`` (custom-call mode "auto", autotuned at its lowering if
    ``autotune``) and ``jnp.matmul``."""
    base = {i.name: i for i in jax_impls() if i.name in ("tsm2", "jnp")}
    desc = 'jax_tsm2.matmul(a, b) under jit, custom-call mode "auto" (routed'
    tsm2 = dataclasses.replace(
        base["tsm2"],
        custom_call_mode="auto",
        autotune=autotune,
        description=desc + (", autotune on)" if autotune else ")"),
    )
    return [tsm2, base["jnp"]]


def impls_for(
    case: Case, device: Any, wanted: set[str] | None = None, autotune: bool = False
) -> list[Impl]:
    """What runs on one grid case: routed, XLA's dot, then each kernel that takes it."""
    routed = routed_and_xla(autotune)
    impls = routed + [forced_impl(case, k) for k in kernels_for(case, device)]
    return [i for i in impls if wanted is None or i.name in wanted]

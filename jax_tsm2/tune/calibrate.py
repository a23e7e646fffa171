"""Calibration: the performance model fitted to the GPU at hand.

The model (``jax_tsm2.model``) predicts each kernel's and XLA's dot's time from
the device's properties and a few constants. Those constants were fitted on
one GPU, and what XLA's dot does on a shape changes with the GPU and the jax
version, so on another GPU the predictions drift (on an H200 the model of an
H100 erred by a median 31%). A calibration measures, on this GPU:

- the streaming-read ceiling and the time of the smallest launch,
- each candidate (our kernels and XLA's dot) on a designed set of probe
  shapes covering the regions the kernels are meant for (``design``),

and stores them (``CalibrationData``) in the user cache directory, one file
per GPU model. ``Corrections`` turns the probes into a correction of the
model per target, layout and dtype: the model's prediction (its per-call
floor at the measured launch, ``measured_floor``) times the geometric mean of
measured / predicted over nearby probes (a Gaussian kernel in log-size space),
shrunk where few probes are near towards the same mean over the layout's probes
in every dtype, and that towards the target's mean over all its probes. Routing picks
with the corrected predictions (``decide``); its margin grows where the
probes are far from the shape, so an extrapolation never buys a kernel that
has not been seen winning near there.

The probe set is deterministic and designed (strata of log-bytes in each
region), and it is not the set anything is judged on: the benchmark's random
grids draw their shapes with other seeds.

Example (a fake timer standing in for the GPU: every kernel runs 20% slower
than the model says, XLA's dot as predicted):
    >>> from jax_tsm2 import model, programs
    >>> from jax_tsm2.tune import calibrate
    >>> dev = model.H100_SXM
    >>> constants = calibrate.measured_floor(model.CALIBRATION, 6e-6)
    >>> probes = calibrate.design(per_cell=2, dtypes=("float32",), families=("L",))
    >>> def timer(target, p, dtype, layout):
    ...     t = model.predict(p, dtype, layout, target, dev, constants).seconds
    ...     return t if target == "xla" else 1.2 * t
    >>> data = calibrate.measure(probes, timer, dev, read_bytes_per_s=3.07e12,
    ...                          launch_seconds=6e-6, log=None)
    >>> corr = calibrate.Corrections(data, dev)
    >>> probe = data.records[0]  # at a probe: the factor it measured, support 1
    >>> [round(x, 2) for x in corr.factor("tsm2l", probe.problem, "float32", "nn")]
    [1.2, 1.0]
    >>> # Nothing measured in f64: the layout's probes in f32 stand in, with no support.
    >>> [round(x, 2) for x in corr.factor("tsm2l", probe.problem, "float64", "nn")]
    [1.2, 0.0]
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import hashlib
import json
import math
import os
import pathlib
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from jax_tsm2 import model, programs
from jax_tsm2.model import xla_plan
from jax_tsm2.problem import Problem
from jax_tsm2.tune import tuner

SCHEMA = "jax_tsm2.calibration"
VERSION = 1
# Nothing is tuned on this seed's shapes but the corrections themselves; the
# benchmark grids that judge routing use other seeds.
DESIGN_SEED = 20_481
# A calibration file holds a few hundred probes: well under a megabyte.
MAX_BYTES = 4 << 20

Timer = Callable[[str, Problem, str, str], float]
# XLA's plan for a product (dtype and layout names), or None where there is none.
PlanSource = Callable[[Problem, str, str], "model.XlaPlan | None"]

# The regions the kernels are meant for, as (m, k, n) ranges of the canonical
# problem (for TN, k is the long contraction), with the layout each family's
# product is stored in. The probes' sizes are kept between MIN_BYTES and
# MAX_PROBE_BYTES of operands and result.
Region = tuple[tuple[float, float], tuple[float, float], tuple[float, float]]
FAMILY_LAYOUT = programs.FAMILY_LAYOUT
REGIONS: dict[str, tuple[Region, ...]] = {
    "R": (((1e3, 3e4), (1e3, 3e4), (1, 64)),),
    "L": (((1e4, 1e7), (1, 64), (1, 64)),),
    "NT": (((1e3, 3e4), (1e3, 3e4), (1, 64)), ((1e4, 1e7), (1, 64), (1, 64))),
    "TN": (((1, 4096), (1e4, 1e7), (1, 512)),),
    "S": (((1, 16), (1e3, 2e4), (1e3, 2e4)),),
}
DTYPES = ("float32", "float64", "bfloat16", "float16")
MIN_BYTES = 1_000_000
MAX_PROBE_BYTES = 1_000_000_000

# The corrections' kernel width in octaves of each size (rows, k, n), and the
# weight of the prior (no correction) against one probe at distance zero.
BANDWIDTH_OCTAVES = 1.5
PRIOR_WEIGHT = 0.25
# Margins a kernel must be predicted faster than XLA's dot by: where probes
# of both are near (support >= 1) the base margin, growing towards FAR_MARGIN
# as the nearest probes recede (the uncorrected model then decides, and its
# constants may be another GPU's). The prediction itself is already blended towards the
# kernel's least favourable correction there (``decide``), so the far margin need not
# double it: 60% kept every committed H200 run free of new losses where 100% left wins
# like S f32 1 x 8367 x 13081 (TSM2S 2.4x faster) to XLA's dot. Without a calibration
# routing uses the model's own margins widened to UNCALIBRATED_MARGIN.
BASE_MARGIN = 0.04
FAR_MARGIN = 0.6
UNCALIBRATED_MARGIN = 0.3
# XLA's dot changes algorithm between neighbouring shapes, which no probe foretells: on an
# H200, f64 14 x 9051 x 9876 ran on cuBLAS at 1.25 TB/s and 14 x 9976 x 7952 on XLA's own
# emitter at 4.1 TB/s. A kernel predicted below this fraction of one pass at the read
# ceiling beats XLA's dot only where XLA takes a slow path, so routing keeps XLA's dot
# there, whatever the probes nearby measured of it. Replayed on the 17 committed H200 runs
# with the present calibration, 30% is the least fraction (in steps of 5%) at which no
# product the present kernels timed becomes a loss: against 40%, 38 picks move from XLA's
# dot to a kernel, 37 of them faster than jnp.matmul (0.19-0.99x of its time) and one
# slower, TN f16 453393 x 9 x 25 on seed 1129, timed with TSM2T's tiled stages since
# replaced by flat ones; 25% adds losses on seeds 2911, 3163 and 5077.
MIN_FLOOR_FRACTION = 0.3
# In f64 the kernels run further from the read ceiling (TSM2R at 37-41% of it on NT
# products of thousands of columns), so more of their predictions fall where XLA's dot's
# fast algorithm wins: on an H200, f64 NT 16613 x 4626 x 12 ran XLA's dot at 86% of one
# pass at the read ceiling where the probe at 9050 x 9390 x 16 had it at 26%, and TSM2R,
# predicted at 59%, ran 2.1x slower. Replayed on the committed H200 runs, 40% is the least
# fraction (in steps of 5%) at which none of the present kernels' runs loses on an f64
# product: from 55%, 26 f64 picks move from XLA's dot to a kernel, each faster than
# jnp.matmul (0.26-0.91x of its time); at 35%, S f64 7 x 8848 x 2463 on seed 2417 goes to
# TSM2S at 1.6x jnp.matmul's time.
MIN_FLOOR_FRACTION_F64 = 0.4


def min_floor_fraction(dtype: str) -> float:
    """The least fraction of one pass at the read ceiling a kernel must be predicted at
    to be routed to in ``dtype`` (``MIN_FLOOR_FRACTION``, ``MIN_FLOOR_FRACTION_F64``)."""
    return MIN_FLOOR_FRACTION_F64 if dtype == "float64" else MIN_FLOOR_FRACTION


@dataclasses.dataclass(frozen=True)
class Probe:
    """One shape to measure: a canonical problem in a layout and dtype."""

    family: str
    dtype: str
    layout: str
    problem: Problem


def _itemsize(dtype: str) -> int:
    return 8 if dtype == "float64" else 4 if dtype == "float32" else 2


def _bytes(p: Problem, dtype: str) -> int:
    b = p.batch or 1
    return b * (p.m * p.k + p.k * p.n + p.m * p.n) * _itemsize(dtype)


def design(
    per_cell: int = 6,
    *,
    seed: int = DESIGN_SEED,
    families: Sequence[str] = tuple(REGIONS),
    dtypes: Sequence[str] = DTYPES,
) -> list[Probe]:
    """The probe set: ``per_cell`` shapes per (family, dtype), in round-robin order.

    Within a cell the shapes are stratified in log-bytes (one per equal slice
    of log(MIN_BYTES)..log(MAX_PROBE_BYTES)) and log-uniform in each size
    within the family's regions, so they spread over the region rather than
    cluster. Cells take turns in the returned order, and each cell's strata
    come largest first and then filling the gaps between (``_spread``), so a
    calibration cut short by its time budget still covers every cell and the
    sizes where a product is memory-bound.

    Example:
        >>> probes = design(per_cell=2)
        >>> len(probes), len({(q.family, q.dtype) for q in probes})
        (40, 20)
        >>> design(per_cell=2) == probes
        True
    """
    if per_cell < 1:
        raise ValueError(f"per_cell must be >= 1, got {per_cell}")
    rng = np.random.default_rng(seed)
    cells: list[list[Probe]] = []
    lo, hi = math.log(MIN_BYTES), math.log(MAX_PROBE_BYTES)
    for fam in families:
        if fam not in REGIONS:
            raise ValueError(f"unknown family {fam!r}; one of {', '.join(REGIONS)}")
        for dtype in dtypes:
            cell: list[Probe] = []
            for i in range(per_cell):
                want = (lo + (hi - lo) * i / per_cell, lo + (hi - lo) * (i + 1) / per_cell)
                # Every other stratum has rows of whole vectors (rows_aligned), which
                # XLA's dot and the kernels run differently from rows of any length.
                seen = {q.problem for q in cell}
                cell.append(_draw(rng, fam, dtype, want, seen, aligned=i % 2 == 1))
            cells.append(cell)
    return [cell[i] for i in _spread(per_cell) for cell in cells]


def program_probes() -> list[Probe]:
    """The products from real programs (``jax_tsm2.programs.APP_CASES``) as probes, one per
    dtype each runs in. A calibration measures them first: XLA's dot changes its algorithm
    between neighbouring shapes (on an H200 it read R f32 20000 x 20000 x 8 once and R f32
    17020 x 13192 x 12, the nearest random probe, 3.4 times over), so the random design alone
    can misjudge the shapes users run most.

    Example:
        >>> q = program_probes()[0]
        >>> q.family, q.dtype, q.layout, q.problem
        ('R', 'float32', 'nn', Problem(batch=None, m=100000, k=2000, n=32))
    """
    out: list[Probe] = []
    for app in programs.APP_CASES:
        problem, layout = app.problem()
        for dtype in app.dtypes:
            probe = Probe(app.family, programs.DTYPE_NAMES[dtype], layout, problem)
            if probe not in out:
                out.append(probe)
    return out


def _spread(n: int) -> list[int]:
    """0..n-1 from the top, each next one in the largest gap left (a van der Corput order).

    Example:
        >>> _spread(6)
        [5, 3, 4, 1, 2, 0]
    """
    out: list[int] = []
    j = 0
    while len(out) < n:
        x, f, v = j, 0.5, 0.0
        while x:
            v, x, f = v + f * (x & 1), x >> 1, f / 2
        i = min(n - 1, int((1.0 - v) * n))
        if i not in out:
            out.append(i)
        j += 1
        if j > 64 * n:  # the sequence reaches every slot long before this
            out += [i for i in range(n) if i not in out]
    return out


def _draw(
    rng: np.random.Generator,
    fam: str,
    dtype: str,
    want: tuple[float, float],
    seen: set,
    aligned: bool = False,
) -> Probe:
    regions = REGIONS[fam]
    layout = FAMILY_LAYOUT[fam]
    best: Probe | None = None
    for _ in range(20_000):
        region = regions[rng.integers(len(regions))]
        m, k, n = (round(math.exp(rng.uniform(math.log(a), math.log(b)))) for a, b in region)
        p = Problem(None, max(m, 1), max(k, 1), max(n, 1))
        if rows_aligned(p, dtype, layout) != aligned:
            continue
        size = math.log(_bytes(p, dtype))
        if p in seen:
            continue
        if want[0] <= size <= want[1]:
            return Probe(fam, dtype, FAMILY_LAYOUT[fam], p)
        if MIN_BYTES <= math.exp(size) <= MAX_PROBE_BYTES and best is None:
            best = Probe(fam, dtype, FAMILY_LAYOUT[fam], p)
    if best is None:
        raise ValueError(f"no {fam} {dtype} probe fits {MIN_BYTES}-{MAX_PROBE_BYTES} bytes")
    return best


@dataclasses.dataclass(frozen=True)
class Record:
    """What one probe measured: seconds per target (targets that failed are absent), and
    XLA's plan for its product (``model.xla_plan``) where the calibration compiled one."""

    dtype: str
    layout: str
    problem: Problem
    seconds: dict[str, float]
    xla_plan: model.XlaPlan | None = None

    def to_json(self) -> dict[str, Any]:
        p = self.problem
        out = {
            "dtype": self.dtype,
            "layout": self.layout,
            "batch": p.batch,
            "m": p.m,
            "k": p.k,
            "n": p.n,
            "seconds": dict(sorted(self.seconds.items())),
        }
        if self.xla_plan is not None:
            out["xla_plan"] = self.xla_plan.to_json()
        return out

    @classmethod
    def from_json(cls, d: Any) -> Record:
        if not isinstance(d, dict):
            raise ValueError(f"a probe record must be an object, got {type(d).__name__}")
        dtype, layout = d.get("dtype"), d.get("layout")
        if dtype not in DTYPES or layout not in model.LAYOUTS:
            raise ValueError(f"probe record with dtype {dtype!r}, layout {layout!r}")
        sizes = [d.get(s) for s in ("m", "k", "n")]
        batch = d.get("batch")
        if not all(_count(s) for s in sizes) or not (batch is None or _count(batch)):
            raise ValueError(f"probe record sizes {sizes}, batch {batch!r}")
        secs = d.get("seconds")
        if not isinstance(secs, dict) or not secs:
            raise ValueError("probe record without seconds")
        out = {}
        for t, s in secs.items():
            if t not in (*model.KERNEL_IDS, "xla") or not _positive(s):
                raise ValueError(f"probe record time {t!r}: {s!r}")
            out[t] = float(s)
        plan = d.get("xla_plan")
        plan = None if plan is None else model.XlaPlan.from_json(plan)
        return cls(dtype, layout, Problem(batch, *sizes), out, plan)


def _count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and 1 <= x < 2**62


def _positive(x: Any, below: float = 1e6) -> bool:
    """A number in (0, below): seconds by default (a probe takes far less than 1e6 s)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and 0 < x < below


@dataclasses.dataclass(frozen=True)
class CalibrationData:
    """A GPU's calibration: its ceilings and the probes' measurements, with provenance."""

    device: dict[str, Any]  # key, name, cc, sm_count
    read_bytes_per_s: float
    launch_seconds: float
    records: tuple[Record, ...]
    made: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def key(self) -> str:
        return str(self.device["key"])

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "version": VERSION,
            "device": self.device,
            "made": self.made,
            "read_bytes_per_s": self.read_bytes_per_s,
            "launch_seconds": self.launch_seconds,
            "records": [r.to_json() for r in self.records],
        }

    @classmethod
    def from_json(cls, doc: Any) -> CalibrationData:
        """Checks the schema of a parsed file; raises ValueError saying what is wrong."""
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            raise ValueError(f"not a {SCHEMA} file")
        if doc.get("version") != VERSION:
            raise ValueError(f"version {doc.get('version')!r}, expected {VERSION}")
        dev = doc.get("device")
        if not isinstance(dev, dict) or not isinstance(dev.get("key"), str):
            raise ValueError("no device key")
        read, launch = doc.get("read_bytes_per_s"), doc.get("launch_seconds")
        if not (_positive(read, below=1e16) and _positive(launch)):
            raise ValueError(f"ceilings {read!r} bytes/s, launch {launch!r} s")
        recs = doc.get("records")
        if not isinstance(recs, list) or not recs:
            raise ValueError("no probe records")
        made = doc.get("made") if isinstance(doc.get("made"), dict) else {}
        return cls(dev, float(read), float(launch), tuple(Record.from_json(r) for r in recs), made)


#: The folders under ``ffi/`` whose sources ``kernels_digest`` covers: the matmul kernels
#: a calibration times, the harness that measures the ceilings, and what both include.
DIGESTED = ("matmul", "common", "harness")


def kernels_digest(root: str | os.PathLike[str]) -> str:
    """The digest of the timed kernels' sources in a source tree, as CMakeLists.txt
    computes it for ``build_info()["kernels_digest"]``: SHA-256 over ``"path sha256\\n"``
    for every file under ``root/ffi/{matmul,common,harness}`` (:data:`DIGESTED`) in sorted
    order, its first 12 hex digits. k-means and ABFT sources are left out: a calibration
    does not time them.

    Example:
        >>> import pathlib, tempfile
        >>> root = pathlib.Path(tempfile.mkdtemp())
        >>> (root / "ffi" / "matmul").mkdir(parents=True)
        >>> _ = (root / "ffi" / "matmul" / "k.cu").write_text("__global__ void k() {}")
        >>> len(kernels_digest(root))
        12
    """
    base = pathlib.Path(root)
    files = sorted(
        f.relative_to(base).as_posix()
        for folder in DIGESTED
        for f in (base / "ffi" / folder).rglob("*")
        if f.is_file()
    )
    text = "".join(f"{f} {hashlib.sha256((base / f).read_bytes()).hexdigest()}\n" for f in files)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@functools.cache
def build_kernels_digest() -> str | None:
    """This build's ``kernels_digest`` (None from a build that does not report one)."""
    from jax_tsm2._ffi import _tsm2_ext

    digest = _tsm2_ext.build_info().get("kernels_digest")
    return str(digest) if digest else None


def kernels_note(data: CalibrationData) -> str | None:
    """Why ``data`` may not describe this build's kernels, or None where it timed them: a
    calibration records the digest of the kernels it measured (``made["kernels"]``), and
    routing keeps using one that timed other kernels (near its probes it then assumes
    their times), saying so.

    Example:
        >>> data = CalibrationData({"key": "GPU"}, 4e12, 2e-6, (), {"kernels": "0" * 12})
        >>> kernels_note(data).startswith("timed other kernels")
        True
    """
    ours, theirs = build_kernels_digest(), data.made.get("kernels")
    if ours is None or theirs == ours:
        return None
    if not theirs:
        return "the calibration does not record which kernels it timed"
    return f"timed other kernels (digest {theirs}) than this build's ({ours})"


def measure(
    probes: Iterable[Probe],
    timer: Timer,
    device: model.Device,
    *,
    read_bytes_per_s: float,
    launch_seconds: float,
    budget_s: float | None = None,
    log: Callable[[str], None] | None = print,
    progress: Callable[[Iterable[Any]], Iterable[Any]] | None = None,
    workers: int | None = None,
) -> CalibrationData:
    """Times every target of every probe with ``timer`` (``tune.tuner.GpuTimer`` on a GPU).

    Keeps within ``budget_s`` seconds: a probe (with a batched timer, a batch of
    probes, compiled before any of it is timed) starts only where what is left of
    the budget still holds one as long as the last, and a batch that would not fit
    shrinks to the probes that do, so a run ends short of the budget rather than
    past it (the probes' round-robin order keeps the cells even); the first probe
    always runs. A target whose timing
    fails is left out of its record; a probe where every target failed is
    dropped. ``progress`` wraps the iteration over the timed probes (e.g.
    ``tqdm``). A timer with ``prepare`` and ``run`` (``GpuTimer``) has a batch
    of probes compiled at once on ``workers`` threads (default: the host's
    cores, at most 8) before it times them one by one: compiling, not timing,
    is what a probe costs, and no compilation runs while a probe is timed.
    """
    import jax

    dev = device.with_bandwidth(read_bytes_per_s)
    start = time.monotonic()
    left = lambda: math.inf if budget_s is None else budget_s - (time.monotonic() - start)
    records: list[Record] = []
    probes = list(probes)
    timed = (
        _timed_in_batches(probes, timer, dev, left, workers)
        if hasattr(timer, "prepare") and hasattr(timer, "run")
        else _timed_one_by_one(probes, timer, dev, left)
    )
    count = 0
    for q, got, plan in progress(timed) if progress else timed:
        count += 1
        got = {t: v if isinstance(v, str) else _finite(v) for t, v in got.items()}
        secs = {t: s for t, s in got.items() if isinstance(s, float)}
        if secs:
            records.append(Record(q.dtype, q.layout, q.problem, secs, plan))
        if log:
            cells = ", ".join(
                f"{t} {s * 1e6:.1f} us" if isinstance(s, float) else f"{t} failed ({s})"
                for t, s in got.items()
            )
            p = q.problem
            log(f"{q.family} {q.dtype} {p.m}x{p.k}x{p.n}: {cells}")
    if log and count < len(probes):
        log(
            f"time budget of {budget_s:.0f} s: {count} of {len(probes)} probes timed, "
            f"{len(records)} measured"
        )
    if not records:
        raise RuntimeError("calibration measured nothing: every probe failed")
    from jax_tsm2 import __version__

    made = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "jax": jax.__version__,
        "jax_tsm2": __version__,
        "kernels": build_kernels_digest(),
        "design_seed": DESIGN_SEED,
        "command": "python -m jax_tsm2.tune --calibrate",
        "seconds": round(time.monotonic() - start, 1),
    }
    info = {"key": dev.key, "name": dev.name, "cc": list(dev.cc), "sm_count": dev.sm_count}
    return CalibrationData(info, read_bytes_per_s, launch_seconds, tuple(records), made)


# Each probe, its seconds per target (or why a target failed), and XLA's plan for it.
Timed = Iterator[tuple[Probe, dict[str, "float | str"], "model.XlaPlan | None"]]


def _plan_of(timer: Any, q: Probe) -> model.XlaPlan | None:
    """XLA's plan for a probe, where ``timer`` makes one (``GpuTimer.xla_plan``)."""
    make = getattr(timer, "xla_plan", None)
    return None if make is None else make(q.problem, q.dtype, q.layout)


def _timed_one_by_one(
    probes: Sequence[Probe], timer: Timer, dev: model.Device, left: Callable[[], float]
) -> Timed:
    last = 0.0  # the last probe's seconds
    for i, q in enumerate(probes):
        if i and left() < last:
            return
        t0 = time.monotonic()
        targets = tuner.candidates(q.problem, q.dtype, q.layout, dev)
        got = tuner.time_candidates(timer, targets, q.problem, q.dtype, q.layout)
        plan = _plan_of(timer, q)
        last = time.monotonic() - t0
        yield q, got, plan


def _timed_in_batches(
    probes: Sequence[Probe],
    timer: Any,
    dev: model.Device,
    left: Callable[[], float],
    workers: int | None,
) -> Timed:
    import concurrent.futures

    workers = max(1, min(8, os.cpu_count() or 1) if workers is None else workers)
    why = lambda err: f"{type(err).__name__}: {err}"
    batch = 2 * workers  # enough to keep every worker busy through uneven compile times
    batch_s = 0.0  # a whole batch's seconds, compiling and timing, as the last one ran
    lo = 0
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        while lo < len(probes):
            # A batch's compiling is most of its cost, and wasted where the budget ends
            # before its probes are timed: a batch is started only where what is left
            # holds it, and where a whole one does not fit, a smaller one that does
            # (on an H200, stopping at whole batches of 16 left 28 s of a 175 s budget
            # unused: 94 probes, where the calibration that ran past its budget had 126).
            size = batch
            if lo:
                size = min(batch, int(batch * left() / batch_s)) if batch_s > 0 else batch
                if size < 1:
                    return
            t0 = time.monotonic()
            chunk = probes[lo : lo + size]
            targets = [tuner.candidates(q.problem, q.dtype, q.layout, dev) for q in chunk]
            preps = [
                pool.submit(timer.prepare, ts, q.problem, q.dtype, q.layout)
                for q, ts in zip(chunk, targets, strict=True)
            ]
            concurrent.futures.wait(preps)
            for i, (q, ts, prep) in enumerate(zip(chunk, targets, preps, strict=True)):
                if (lo or i) and left() <= 0:
                    return
                plan = None
                try:
                    prepared = prep.result()
                    got = timer.run(prepared)
                    plan = getattr(prepared, "xla_plan", None)
                except Exception as err:  # a probe that cannot be timed at all
                    got = {t: err for t in ts}
                got = {t: why(v) if isinstance(v, Exception) else v for t, v in got.items()}
                yield q, got, plan
            batch_s = (time.monotonic() - t0) * batch / len(chunk)
            lo += len(chunk)


def _finite(v: Any) -> float | str:
    v = float(v)
    return v if math.isfinite(v) and v > 0 else f"timer returned {v!r}"


def _kind(p: Problem, dtype: str, layout: str) -> bool:
    """The kind of shape a probe corrects: its rows aligned or not (``rows_aligned``), in
    nn and nt. In tn one kind: XLA's dot reads row-major A.T @ B several times over
    whatever the rows, and TSM2T's flat stages read rows of any length alike."""
    return layout == "tn" or rows_aligned(p, dtype, layout)


def rows_aligned(p: Problem, dtype: str, layout: str) -> bool:
    """Whether the rows of the largest operand, as stored, are whole 16-byte vectors.

    XLA's dot and our kernels both run differently on such rows (vector loads, other
    GEMM algorithms): on one H200 grid, XLA's dot read an f32 R product with rows of
    10384 elements once (82% of the floor) while its probes of odd row lengths nearby
    read theirs three to four times over. Probes therefore correct only shapes of their
    own kind, in nn and nt (``_kind``).

    Example:
        >>> rows_aligned(Problem(None, 12141, 10384, 14), "float32", "nn")
        True
        >>> rows_aligned(Problem(None, 12141, 10383, 14), "float32", "nn")
        False
        >>> rows_aligned(Problem(None, 5, 5005, 16102), "float64", "nn")  # B is the largest
        True
    """
    batch = p.batch or 1
    isz = _itemsize(dtype)
    if layout == "tn":  # A stored k x m, B stored k x n
        row = p.m if p.m >= p.n else p.n
    elif layout == "nt":  # A stored m x k, B stored n x k
        row = p.k
    else:  # A stored m x k, B stored k x n
        row = p.k if batch * p.m * p.k >= p.k * p.n else p.n
    return row * isz % 16 == 0


def _coords(p: Problem) -> np.ndarray:
    return np.log2([float((p.batch or 1) * p.m), float(p.k), float(p.n)])


Points = tuple[np.ndarray, np.ndarray]  # probes' _coords and log(measured / predicted)


def _factor(pts: Points | None, p: Problem, prior: float = 1.0) -> tuple[float, float]:
    """(correction factor, support) at ``p`` from the probes ``pts``: their residuals'
    Gaussian-weighted mean, shrunk towards ``prior`` (a factor) by PRIOR_WEIGHT."""
    if pts is None:
        return prior, 0.0
    coords, resid = pts
    d2 = np.sum((coords - _coords(p)) ** 2, axis=1) / BANDWIDTH_OCTAVES**2
    w = np.exp(-0.5 * d2)
    support = float(w.sum())
    mean = ((w * resid).sum() + PRIOR_WEIGHT * math.log(prior)) / (support + PRIOR_WEIGHT)
    return math.exp(float(mean)), support


def measured_floor(cal: model.Calibration, launch_seconds: float) -> model.Calibration:
    """``cal`` with the per-call floors of our kernels and XLA's dot (``t_floor``,
    ``xla_t_floor``) at the launch a calibration measured on its GPU.

    The model's floors are another GPU's harness floor (an H100 at 10-11 us); the
    calibration's launch is timed as the harness times a product of a few bytes, calls
    pipelined, and on an H200 XLA's dot ran 1-2 MB products in about 2 us. A floor kept
    at 10 us there is a constant error no multiplicative correction fixes: the probes
    (1 MB and more) lie on both sides of it.

    Example:
        >>> from jax_tsm2 import model
        >>> measured_floor(model.CALIBRATION, 1.5e-6).xla_t_floor
        1.5e-06
    """
    return dataclasses.replace(cal, t_floor=launch_seconds, xla_t_floor=launch_seconds)


def _extreme(pts: Points | None, target: str, p: Problem) -> float | None:
    """The most favourable correction of ``pts`` for XLA's dot, the least favourable for a
    kernel, where ``p`` lies inside the probes' box of sizes widened by the corrections'
    kernel width; else None."""
    if pts is None:
        return None
    coords, resid = pts
    x = _coords(p)
    if (
        (x < coords.min(axis=0) - BANDWIDTH_OCTAVES) | (x > coords.max(axis=0) + BANDWIDTH_OCTAVES)
    ).any():
        return None
    return math.exp(float(resid.min() if target == "xla" else resid.max()))


# A kernel's least favourable correction is taken over the probes within NEAR_WIDTHS
# kernel widths (BANDWIDTH_OCTAVES) of a shape, where at least NEAR_PROBES lie there (a
# maximum over one probe bounds nothing). Three octaves: a kernel's regime (rows against
# B's width) changes over a few octaves of each size, and on an H200 grid a radius of 4.5
# octaves still let probes of the L regime (millions of rows, k of a few) bound TSM2R on
# R products of ten thousand rows at 4-6x its model.
NEAR_WIDTHS = 2.0
NEAR_PROBES = 2


def _near_extreme(pts: Points | None, p: Problem) -> float | None:
    """A kernel's least favourable correction among the probes ``pts`` near ``p``, or
    None where fewer than NEAR_PROBES are near.

    A kernel's residuals follow its regime, which a cell's probes mix: on an H200, TSM2R
    ran its nn probes of a few rows against a wide ``B`` at 4-6x the model, and those of
    thousands of rows against a skinny ``B`` at 0.8-1.5x. The maximum over all of them put
    every R product at the first, and left TSM2R's 2-3x wins there to XLA's dot. Unlike
    XLA's dot, whose algorithm switches between neighbouring shapes, a kernel runs one
    code path per regime, so its probes near a shape bound it there."""
    if pts is None:
        return None
    coords, resid = pts
    dist = np.sqrt(np.sum((coords - _coords(p)) ** 2, axis=1))
    near = dist <= NEAR_WIDTHS * BANDWIDTH_OCTAVES
    if int(near.sum()) < NEAR_PROBES:
        return None
    return math.exp(float(resid[near].max()))


def _layout_kinds(target: str, kind: bool) -> tuple[bool, ...]:
    """The kinds of rows (``_kind``) of the probes, of any dtype, that stand in for a shape
    of kind ``kind`` where no probe of its own dtype and kind spans it. For XLA's dot, its
    own kind, and for rows that are not whole vectors also rows that are: XLA's dot runs
    those at least as fast, so they never flatter a kernel against it (the other way round
    they would: XLA's dot read an aligned f32 R product once where unaligned probes near it
    read three to four times over). For a kernel, both: it is taken at the least favourable
    correction measured among them."""
    if target == "xla":
        return (kind,) if kind else (False, True)
    return (True, False)


class Corrections:
    """Per (target, layout, dtype): measured / predicted over the probes, by nearness.

    ``factor`` answers the correction for a shape and its *support*: the
    summed kernel weight of the probes behind it (1.0 is one probe at the same
    shape; near 0 nothing was measured near there and the factor is ~1).
    ``layout_factor`` and ``layout_extreme`` answer the same from a target's
    probes of the layout in every dtype, for shapes no probe of their own cell spans.
    """

    def __init__(
        self,
        data: CalibrationData,
        device: model.Device,
        calibration: model.Calibration | None = None,
        plans: PlanSource | None = None,
    ):
        self.data = data
        self.device = device.with_bandwidth(data.read_bytes_per_s)
        self.calibration = calibration or measured_floor(model.CALIBRATION, data.launch_seconds)
        self._points: dict[tuple[str, str, str, bool], tuple[np.ndarray, np.ndarray]] = {}
        self._measured = {(r.dtype, r.layout, r.problem): r.seconds for r in data.records}
        # XLA's dot is predicted from its compiled plan where every probe of it recorded
        # one: the probes' residuals are then of the same prediction a shape is asked with.
        timed_xla = [r for r in data.records if "xla" in r.seconds]
        self.planned = bool(timed_xla) and all(r.xla_plan is not None for r in timed_xla)
        self._plans = plans or xla_plan.plan
        dev = self.device
        grouped: dict[tuple[str, str, str, bool], list[tuple[np.ndarray, float]]] = {}
        for r in data.records:
            for target, secs in r.seconds.items():
                plan = r.xla_plan if target == "xla" and self.planned else None
                pred = model.predict(
                    r.problem, r.dtype, r.layout, target, dev, self.calibration, xla_plan=plan
                )
                if not (pred.supported and math.isfinite(pred.seconds) and pred.seconds > 0):
                    continue
                resid = math.log(secs / pred.seconds)
                key = (target, r.layout, r.dtype, _kind(r.problem, r.dtype, r.layout))
                grouped.setdefault(key, []).append((_coords(r.problem), resid))
        for key, pts in grouped.items():
            self._points[key] = (np.stack([c for c, _ in pts]), np.array([v for _, v in pts]))
        # Each target's mean residual over its probes of every layout and dtype, of the kinds
        # of rows that may correct a shape (``_layout_kinds``), shrunk towards no correction:
        # what its layout's probes are shrunk towards where none is near (``layout_factor``).
        self._target_prior: dict[tuple[str, bool], float] = {}
        for target in {t for t, _, _, _ in grouped}:
            for kind in (True, False):
                resid = [
                    v
                    for (t, _, _, k), pts in grouped.items()
                    if t == target and k in _layout_kinds(target, kind)
                    for _, v in pts
                ]
                if resid:
                    mean = sum(resid) / (len(resid) + PRIOR_WEIGHT)
                    self._target_prior[(target, kind)] = math.exp(mean)
        # A target's probes of a layout in every dtype, per kind of shape they may correct
        # (``_layout_kinds``): what routing falls back to where no probe of a shape's own
        # dtype and kind spans it.
        self._layout_points: dict[tuple[str, str, bool], Points] = {}
        for target, layout in {(t, lay) for t, lay, _, _ in self._points}:
            for kind in (True, False):
                found = [
                    v
                    for (t, lay, _, k), v in self._points.items()
                    if (t, lay) == (target, layout) and k in _layout_kinds(target, kind)
                ]
                if found:
                    self._layout_points[(target, layout, kind)] = (
                        np.concatenate([c for c, _ in found]),
                        np.concatenate([v for _, v in found]),
                    )

    def extreme(self, target: str, p: Problem, dtype: str, layout: str) -> float | None:
        """The correction assumed where no probe is near: for XLA's dot the most favourable
        one measured for its (layout, dtype), for a kernel the least favourable; None where
        ``p`` lies outside the sizes probed there (no bound is known). Routing on these
        bounds far from the probes trades XLA's dot for a kernel only where every
        measurement says it would win.

        A kernel's bound is that of its regime (``_near_extreme``): the least favourable
        correction among its own cell's probes near ``p``, else among its layout's probes
        near ``p`` in every dtype (``layout_extreme``'s), and over the whole cell only where
        neither has probes near.

        Example:
            >>> from jax_tsm2 import model
            >>> probe = Record("float32", "nn", Problem(None, 10**6, 8, 8),
            ...                {"tsm2l": 3e-5, "xla": 2e-5})
            >>> data = CalibrationData({"key": "GPU"}, 4e12, 2e-6, (probe,), {})
            >>> corr = Corrections(data, model.H100_SXM)
            >>> corr.extreme("tsm2l", Problem(None, 2 * 10**6, 8, 8), "float32", "nn") > 0
            True
            >>> corr.extreme("tsm2l", Problem(None, 10**3, 8, 8), "float32", "nn") is None
            True
        """
        pts = self._points.get((target, layout, dtype, _kind(p, dtype, layout)))
        bound = _extreme(pts, target, p)
        if bound is None or target == "xla":
            return bound
        near = _near_extreme(pts, p)
        if near is None:
            near = _near_extreme(
                self._layout_points.get((target, layout, _kind(p, dtype, layout))), p
            )
        return bound if near is None else near

    def xla_plan(self, p: Problem, dtype: str, layout: str) -> model.XlaPlan | None:
        """XLA's plan to predict its dot on ``p`` with: where this calibration's probes were
        predicted with theirs (``planned``), the plan of ``p`` from the plan source
        (compiled on this GPU by default); else None (the model's rules)."""
        return self._plans(p, dtype, layout) if self.planned else None

    def measured(self, p: Problem, dtype: str, layout: str) -> dict[str, float] | None:
        """Seconds per target measured by a probe of exactly this product, or None."""
        return self._measured.get((dtype, layout, p))

    def factor(self, target: str, p: Problem, dtype: str, layout: str) -> tuple[float, float]:
        """(correction factor, support) for ``target`` on ``p``: the weighted mean of the
        probes of its own (layout, dtype, kind of rows), shrunk towards ``layout_factor``
        where few are near. The support is that of the shape's own probes."""
        prior = self.layout_factor(target, p, dtype, layout)[0]
        pts = self._points.get((target, layout, dtype, _kind(p, dtype, layout)))
        return _factor(pts, p, prior)

    def layout_factor(
        self, target: str, p: Problem, dtype: str, layout: str
    ) -> tuple[float, float]:
        """``factor`` from ``target``'s probes of ``layout`` in every dtype, of the kinds of
        rows that may correct ``p`` (``_layout_kinds``), shrunk towards the target's mean
        correction over all its probes where few are near (1 for a target never probed)."""
        kind = _kind(p, dtype, layout)
        prior = self._target_prior.get((target, kind), 1.0)
        pts = self._layout_points.get((target, layout, kind))
        return _factor(pts, p, prior)

    def layout_extreme(self, target: str, p: Problem, dtype: str, layout: str) -> float | None:
        """``extreme`` over ``target``'s probes of ``layout`` in every dtype, of the kinds
        of rows that may correct ``p`` (``_layout_kinds``); None where ``p`` lies outside
        the sizes those probed. Routing falls back to it where no probe of ``p``'s own dtype
        and kind spans ``p`` (``decide``).

        Example:
            >>> from jax_tsm2 import model
            >>> probe = Record("float32", "nn", Problem(None, 8, 4096, 4096),
            ...                {"tsm2s": 3e-5, "xla": 6e-5})
            >>> data = CalibrationData({"key": "GPU"}, 4e12, 2e-6, (probe,), {})
            >>> corr = Corrections(data, model.H100_SXM)
            >>> odd = Problem(None, 4, 4095, 4095)  # f16, rows not whole vectors
            >>> corr.extreme("tsm2s", odd, "float16", "nn") is None
            True
            >>> corr.layout_extreme("tsm2s", odd, "float16", "nn") > 0
            True
        """
        pts = self._layout_points.get((target, layout, _kind(p, dtype, layout)))
        bound = _extreme(pts, target, p)
        if bound is None or target == "xla":
            return bound
        near = _near_extreme(pts, p)
        return bound if near is None else near


def xla_best_case(p: Problem, dtype: str, device: model.Device, launch_s: float) -> float:
    """XLA's dot at its best: one pass over the operands and the result at the read ceiling,
    after a launch. What routing assumes of XLA's dot where nothing was measured near a
    shape, so that an unmeasured shape never trades XLA's dot for a kernel that is slower.

    Example:
        >>> from jax_tsm2 import model
        >>> dev = model.H100_SXM.with_bandwidth(4e12)
        >>> round(xla_best_case(Problem(None, 10**6, 8, 8), "float32", dev, 2e-6) * 1e6, 1)
        18.0
    """
    return launch_s + _bytes(p, dtype) / device.bandwidth()


# What settled a calibrated decision (``Decision.rule``): the product's own probe times, no
# kernel taking it, no kernel measured near it, a kernel predicted below the floor fraction,
# a kernel bounded only by its layout's least favourable correction, or the corrected
# predictions against the margin.
RULES = ("measured", "no kernel", "unprobed", "floor fraction", "layout bound", "predicted")


@dataclasses.dataclass(frozen=True)
class Decision:
    """``decide``'s answer: the target, corrected predictions per target, why, and which of
    ``RULES`` settled it (``benchmarks/routing_replay.py`` tallies the misses by rule)."""

    target: str
    seconds: dict[str, float]
    margin: float
    reason: str
    rule: str = "predicted"


def decide(
    p: Problem,
    dtype: str,
    layout: str,
    names: Sequence[str],
    corrections: Corrections,
    xla_precision: str = "default",
) -> Decision:
    """The fastest of ``names`` and XLA's dot by corrected prediction, with a margin that
    grows where the probes behind the kernel's correction are far away.

    Where no probe of the shape's own dtype and kind of rows spans it, the probes of its
    layout in every dtype stand in (``Corrections.layout_extreme``): XLA's dot is corrected
    from them as from its own cell, and a kernel is taken at the least favourable correction
    measured among them, against which it needs only the base margin. Not where the model
    puts either at its launch floor: those constants are another GPU's per-call floor, and
    no probe (1 MB at least) measured there."""
    dev = corrections.device
    cal = corrections.calibration
    hit = corrections.measured(p, dtype, layout)
    if hit is not None and xla_precision == "default" and "xla" in hit:
        # A product the calibration timed itself (the real programs' products are probed
        # first) is decided by its own times: XLA's dot changes algorithm between
        # neighbouring shapes, so a correction smoothed over neighbours can miss it by 3x.
        return _decide_measured(hit, names)

    def corrected(
        model_s: float, far_s: float, factor_support: tuple[float, float]
    ) -> tuple[float, float]:
        # Near probes (support >= 1) the local correction; away from them a blend towards
        # far_s, the bound every measurement of the (layout, dtype) allows.
        f, support = factor_support
        w = min(1.0, support)
        return math.exp(w * math.log(model_s * f) + (1.0 - w) * math.log(far_s)), support

    plan = corrections.xla_plan(p, dtype, layout) if xla_precision == "default" else None
    xla_pred = model.predict(p, dtype, layout, "xla", dev, cal, xla_precision, plan)
    xla_model = xla_pred.seconds
    # XLA's dot is never assumed faster than one pass over its operands at the read ceiling.
    best_case = xla_best_case(p, dtype, dev, corrections.data.launch_seconds)
    fastest = corrections.extreme("xla", p, dtype, layout)
    xla_factor = corrections.factor("xla", p, dtype, layout)
    if fastest is None:
        fastest = corrections.layout_extreme("xla", p, dtype, layout)
        if fastest is not None:
            xla_factor = corrections.layout_factor("xla", p, dtype, layout)
    xla_far = best_case if fastest is None else max(best_case, xla_model * fastest)
    xla, xla_support = corrected(xla_model, xla_far, xla_factor)
    secs: dict[str, float] = {"xla": xla}
    support: dict[str, float] = {}
    at_bound: set[str] = set()
    supported: list[str] = []
    for name in names:
        pred = model.predict(p, dtype, layout, name, dev, cal)
        if not pred.supported:
            continue
        supported.append(name)
        slowest = corrections.extreme(name, p, dtype, layout)
        if slowest is not None:
            factor = corrections.factor(name, p, dtype, layout)
            secs[name], support[name] = corrected(pred.seconds, pred.seconds * slowest, factor)
            continue
        if _near_floor(p, dtype, layout, name, dev):
            continue  # no probe measured there, and one program's samples jump between levels
        slowest = corrections.layout_extreme(name, p, dtype, layout)
        if slowest is None:
            continue  # a kernel never measured near these sizes is not routed to
        secs[name], support[name] = pred.seconds * slowest, 0.0
        at_bound.add(name)
    kernels = [k for k in secs if k != "xla"]
    if not kernels and supported:
        why = (
            f"XLA's dot: this GPU's calibration measured {', '.join(supported)} nowhere near "
            f"this {dtype} {layout} product"
        )
        return Decision("xla", secs, 0.0, why, "unprobed")
    if not kernels:
        return Decision("xla", secs, 0.0, "no kernel takes this problem", "no kernel")
    best = min(kernels, key=secs.__getitem__)
    fraction = min_floor_fraction(dtype)
    if best_case < fraction * secs[best]:
        why = _slow_kernel_reason(best, secs[best], best_case, fraction)
        return Decision("xla", secs, 0.0, why, "floor fraction")
    if best in at_bound:
        where = (
            f"on this GPU's calibration ({best} at the least favourable correction its "
            f"probes of layout {layout} measured: none of {dtype} and this kind of rows near)"
        )
        return _pick(secs, best, BASE_MARGIN, "predicted", where, "layout bound")
    known = min(support[best], xla_support)
    margin = BASE_MARGIN + (FAR_MARGIN - BASE_MARGIN) * math.exp(-2.0 * known)
    return _pick(secs, best, margin, "predicted", "on this GPU's calibration", "predicted")


def _slow_kernel_reason(kernel: str, seconds: float, best_case: float, fraction: float) -> str:
    return (
        f"XLA's dot: {kernel} predicted {seconds * 1e6:.1f} us, {best_case / seconds:.0%} of "
        f"one pass at the read ceiling ({best_case * 1e6:.1f} us); below "
        f"{fraction:.0%}, one of XLA's dot's algorithms may well run faster"
    )


def _near_floor(p: Problem, dtype: str, layout: str, kernel: str, dev: model.Device) -> bool:
    """Whether the model's own constants put ``kernel`` or XLA's dot on ``p`` at their
    per-call floor (10-11 us, an H100 harness's): products that small lie below the probes
    (1 MB and more) of most cells, and the times of one program there jump between two
    levels, so a bound from other dtypes' probes does not trade XLA's dot for a kernel.
    A calibrated prediction puts the floor at the measured launch (``measured_floor``);
    this threshold only keeps such products to what their own probes say."""
    return any(
        model.predict(p, dtype, layout, t, dev, model.CALIBRATION).bound == "launch"
        for t in (kernel, "xla")
    )


def _pick(
    secs: dict[str, float], best: str, margin: float, verb: str, where: str, rule: str
) -> Decision:
    """Kernel ``best`` where it beats XLA's dot by ``margin``, else XLA's dot; the reason
    says the times were ``verb`` ("predicted", "measured") ``where``."""
    xla = secs["xla"]
    us = lambda s: f"{s * 1e6:.1f} us"
    if secs[best] * (1.0 + margin) < xla:
        why = (
            f"{best} {verb} {us(secs[best])} against XLA's {us(xla)} {where} "
            f"({xla / secs[best]:.2f}x, margin {margin:.0%})"
        )
        return Decision(best, secs, margin, why, rule)
    why = f"XLA's dot {verb} {us(xla)} against {best}'s {us(secs[best])} {where}" + (
        f" (within the {margin:.0%} margin)" if secs[best] < xla else ""
    )
    return Decision("xla", secs, margin, why, rule)


def _decide_measured(seconds: dict[str, float], names: Sequence[str]) -> Decision:
    """``decide`` for a product the calibration timed: the fastest measured, with the base
    margin against XLA's dot (the probes' timing noise)."""
    secs = {t: s for t, s in seconds.items() if t == "xla" or t in names}
    kernels = [k for k in secs if k != "xla"]
    if not kernels:
        return Decision("xla", secs, 0.0, "no kernel takes this problem", "no kernel")
    best = min(kernels, key=secs.__getitem__)
    where = "by this GPU's calibration at this shape"
    return _pick(secs, best, BASE_MARGIN, "measured", where, "measured")


# --- Files: the user's calibration, else one shipped with the package. ----------------

SHIPPED_DIR = pathlib.Path(__file__).resolve().parent.parent / "calibrations"


def file_name(device_key: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in device_key)
    return f"calibration-{safe}.json"


def user_path(device_key: str) -> pathlib.Path:
    from jax_tsm2.tune import cache

    return cache.cache_dir() / file_name(device_key)


def shipped_path(device_key: str) -> pathlib.Path:
    return SHIPPED_DIR / file_name(device_key)


def store(data: CalibrationData, path: pathlib.Path | None = None) -> pathlib.Path:
    """Writes ``data`` atomically to ``path`` (default: the user's cache directory).

    The write happens under the lock file beside ``path`` (``cache.file_lock``)
    that the tune cache's writers use too.
    """
    from jax_tsm2.tune import cache

    path = path or user_path(data.key)
    doc = data.to_json()
    # A file routing would refuse is refused here, loudly, rather than ignored later.
    CalibrationData.from_json(json.loads(json.dumps(doc)))
    path.parent.mkdir(parents=True, exist_ok=True)
    with cache.file_lock(path):
        cache.write_json(path, doc)
    _loaded.clear()
    return path


# path -> ((mtime_ns, size, inode, mode), parsed data or None), reloaded when the file changes.
_loaded: dict[str, tuple[tuple[int, int, int, int], CalibrationData | None]] = {}


def _read(path: pathlib.Path, device_key: str, fallback: str) -> CalibrationData | None:
    """The calibration at ``path`` if it can be trusted for ``device_key``; else warns once
    per version of the file, naming the ``fallback`` routing uses instead, and returns
    None. Never raises, never blocks."""
    import warnings

    from jax_tsm2.tune import cache

    try:
        st = path.stat()
    except (OSError, ValueError):
        return None
    version = (st.st_mtime_ns, st.st_size, st.st_ino, st.st_mode)
    hit = _loaded.get(str(path))
    if hit is not None and hit[0] == version:
        return hit[1]
    data: CalibrationData | None = None
    try:
        doc = json.loads(cache.read_capped(path, MAX_BYTES).decode("utf-8"))
        data = CalibrationData.from_json(doc)
        if data.key != device_key:
            raise ValueError(f"made on GPU {data.key[:80]!r}, not this one ({device_key!r})")
    except (OSError, UnicodeDecodeError, ValueError, RecursionError, TypeError) as err:
        warnings.warn(
            f"jax_tsm2: ignoring calibration {path}: {str(err)[:300]}. Routing uses "
            f"{fallback}; run `python -m jax_tsm2.tune --calibrate` to measure this GPU.",
            RuntimeWarning,
            stacklevel=3,
        )
        data = None
    _loaded[str(path)] = (version, data)
    return data


#: ``JAX_TSM2_CALIBRATION=off`` (or 0, false, no) makes routing ignore every calibration,
#: the user's and the shipped ones, as on a GPU never calibrated: to see what the
#: uncalibrated model does, or to rule a calibration out. Read at every lookup.
ENV_VAR = "JAX_TSM2_CALIBRATION"
_OFF, _ON = ("0", "off", "false", "no"), ("", "1", "on", "true", "yes")


def enabled() -> bool:
    """Whether routing reads calibrations (``ENV_VAR``); an unknown value warns once and
    leaves them on.

    Example:
        >>> import os
        >>> os.environ[ENV_VAR] = "off"
        >>> enabled()
        False
        >>> del os.environ[ENV_VAR]
        >>> enabled()
        True
    """
    value = os.environ.get(ENV_VAR, "").strip().lower()
    if value in _OFF:
        return False
    if value not in _ON:
        _warn_value(value)
    return True


@functools.lru_cache(maxsize=8)
def _warn_value(value: str) -> None:
    import warnings

    warnings.warn(
        f"jax_tsm2: {ENV_VAR}={value!r} is neither on nor off; calibrations stay on "
        f"(set {ENV_VAR}=off to route without them)",
        RuntimeWarning,
        stacklevel=4,
    )


def load(device_key: str) -> tuple[CalibrationData, pathlib.Path] | None:
    """This GPU's calibration and where it came from: the user's (``user_path``), else the
    one shipped with the package for this GPU model, else None (also where ``ENV_VAR``
    turns calibrations off)."""
    if not enabled():
        return None
    user, shipped = user_path(device_key), shipped_path(device_key)
    if shipped.is_file():
        fallback = f"the calibration shipped for this GPU ({shipped.name})"
    else:
        fallback = "the uncalibrated model"
    data = _read(user, device_key, fallback)
    if data is not None:
        return data, user
    data = _read(shipped, device_key, "the uncalibrated model")
    return None if data is None else (data, shipped)


_corrections: dict[model.Device, Corrections] = {}


def corrections_for(device: model.Device) -> tuple[Corrections, pathlib.Path] | None:
    """``Corrections`` of this GPU's calibration (built once per loaded file), or None."""
    found = load(device.key)
    if found is None:
        return None
    data, path = found
    corr = _corrections.get(device)
    if corr is None or corr.data is not data:
        corr = _corrections[device] = Corrections(data, device)
    return corr, path


def run(
    *,
    budget_s: float = 150.0,
    per_cell: int = 10,
    write: bool = True,
    path: pathlib.Path | None = None,
    log: Callable[[str], None] | None = print,
    progress: bool = True,
) -> CalibrationData:
    """Calibrates the current GPU: measures its ceilings and the probes, stores the result.

    Needs a CUDA GPU and a CUDA build of jax_tsm2 (RuntimeError otherwise).
    Compiling and timing the probes keeps within ``budget_s`` seconds (``measure``:
    no probe is started that the rest of the budget could not hold; on an H200,
    about one probe per second: 150 s measure ~120 of the design's
    ``20 * per_cell``); the ceilings add about ten seconds. The same as
    ``python -m jax_tsm2.tune --calibrate``; routing uses the stored file from
    the next lowering on.

    Example:
        >>> import jax_tsm2
        >>> data = jax_tsm2.calibrate(budget_s=60)  # doctest: +SKIP
        >>> len(data.records), data.read_bytes_per_s  # doctest: +SKIP
        (100, 4.63e12)
    """
    import jax

    from jax_tsm2 import _ffi

    if not _ffi.cuda_gpu_ready():
        raise RuntimeError("calibration needs a CUDA GPU and a CUDA build of jax_tsm2 for it")
    # f64 probes need f64 operands; the caller's setting is restored on the way out.
    prev_x64 = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        return _run(budget_s, per_cell, write, path, log, progress)
    finally:
        jax.config.update("jax_enable_x64", prev_x64)


def _run(
    budget_s: float,
    per_cell: int,
    write: bool,
    path: pathlib.Path | None,
    log: Callable[[str], None] | None,
    progress: bool,
) -> CalibrationData:
    from jax_tsm2.tune import ceilings

    device = model.device_from_driver(0)
    # The read ceiling over buffers of several times the L2, as the harness measures it.
    buffer = max(1 << 28, 8 * device.l2_bytes)
    bw = ceilings.measure_bandwidth(
        buffer_bytes=buffer, buffers=2, sm_count=device.sm_count, repeats=5
    )
    lf = ceilings.measure_launch(calls=64, per_sample=4, repeats=7)
    read, launch = bw.get("read_bytes_per_s"), lf.get("launch_seconds")
    if not read or not launch:
        raise RuntimeError(f"could not measure the ceilings: {bw} {lf}")
    if log:
        log(
            f"{device.name}: read ceiling {read / 1e9:.0f} GB/s, "
            f"smallest launch {launch * 1e6:.1f} us"
        )
    wrap = None
    if progress:
        from tqdm.auto import tqdm

        wrap = lambda xs: tqdm(xs, total=len(probes), desc="calibrating", unit="probe")
    probes = program_probes() + design(per_cell)
    data = measure(
        probes,
        # Few products per timed call: each probe compiles its own programs, and
        # compiling, not timing, is what a probe costs (measure compiles in threads).
        tuner.GpuTimer(samples=3, max_reps=8),
        device,
        read_bytes_per_s=read,
        launch_seconds=launch,
        budget_s=budget_s,
        log=log,
        progress=wrap,
    )
    if write:
        where = store(data, path)
        if log:
            log(f"wrote {len(data.records)} probes to {where}")
    return data

"""Calibration: the performance model fitted to the GPU at hand.

The model (``jax_tsm2.model``) predicts each kernel's and XLA's dot's time from
the device's properties and a few constants. Those constants were fitted on
one GPU, and what XLA's dot does on a shape changes with the GPU and the jax
version, so on another GPU the predictions drift (on an H200 the model of an
H100 erred by a median 31%). A calibration measures, on this GPU:

- the streaming-read ceiling and the time of the smallest launch,
- each candidate (our kernels and XLA's dot) on a designed set of probe
  shapes covering the regions the kernels are meant for,

and stores them in the user cache directory, one file per GPU model. This module
measures (``measure``, ``run``: ``python -m jax_tsm2.tune --calibrate``); the rest
lives beside it, and every public name is importable from here:

- ``probes``: the probe set (``design``, ``program_probes``);
- ``calibration_data``: what a file holds (``CalibrationData``, ``Record``);
- ``corrections``: the probes turned into a correction of the model per target,
  layout and dtype (``Corrections``);
- ``decide``: routing on the corrected predictions, with margins that grow where
  the probes are far from the shape, so an extrapolation never buys a kernel that
  has not been seen winning near there;
- ``calibration_files``: where files live and how they are read (``load``, ``store``).

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

import datetime
import math
import os
import pathlib
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from jax_tsm2 import model
from jax_tsm2.problem import Problem
from jax_tsm2.tune import tuner
from jax_tsm2.tune.calibration_data import (
    DIGESTED,
    SCHEMA,
    VERSION,
    CalibrationData,
    Record,
    build_kernels_digest,
    kernels_digest,
    kernels_note,
)
from jax_tsm2.tune.calibration_files import (
    ENV_VAR,
    MAX_BYTES,
    SHIPPED_DIR,
    corrections_for,
    enabled,
    file_name,
    load,
    shipped_path,
    store,
    user_path,
)
from jax_tsm2.tune.corrections import (
    BANDWIDTH_OCTAVES,
    NEAR_PROBES,
    NEAR_WIDTHS,
    PRIOR_WEIGHT,
    Corrections,
    PlanSource,
    measured_floor,
    xla_best_case,
)
from jax_tsm2.tune.decide import (
    BASE_MARGIN,
    FAR_MARGIN,
    MIN_FLOOR_FRACTION,
    MIN_FLOOR_FRACTION_F64,
    RULES,
    UNCALIBRATED_MARGIN,
    Decision,
    decide,
    min_floor_fraction,
)
from jax_tsm2.tune.probes import (
    DESIGN_SEED,
    DTYPES,
    FAMILY_LAYOUT,
    MAX_PROBE_BYTES,
    MIN_BYTES,
    REGIONS,
    Probe,
    design,
    problem_bytes,
    program_probes,
    rows_aligned,
)

__all__ = [
    "BANDWIDTH_OCTAVES",
    "BASE_MARGIN",
    "DESIGN_SEED",
    "DIGESTED",
    "DTYPES",
    "ENV_VAR",
    "FAMILY_LAYOUT",
    "FAR_MARGIN",
    "MAX_BYTES",
    "MAX_PROBE_BYTES",
    "MIN_BYTES",
    "MIN_FLOOR_FRACTION",
    "MIN_FLOOR_FRACTION_F64",
    "NEAR_PROBES",
    "NEAR_WIDTHS",
    "PRIOR_WEIGHT",
    "REGIONS",
    "RULES",
    "SCHEMA",
    "SHIPPED_DIR",
    "UNCALIBRATED_MARGIN",
    "VERSION",
    "CalibrationData",
    "Corrections",
    "Decision",
    "PlanSource",
    "Probe",
    "Record",
    "Timer",
    "build_kernels_digest",
    "corrections_for",
    "decide",
    "design",
    "enabled",
    "file_name",
    "kernels_digest",
    "kernels_note",
    "load",
    "measure",
    "measured_floor",
    "min_floor_fraction",
    "problem_bytes",
    "program_probes",
    "rows_aligned",
    "run",
    "shipped_path",
    "store",
    "user_path",
    "xla_best_case",
]

Timer = Callable[[str, Problem, str, str], float]


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

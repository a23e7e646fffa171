"""The autotuner: time every candidate of a problem on this GPU and cache the winner.

For each (shape, dtype, layout) the candidates are the kernels that take the layout and can
run the shape (``model.KERNELS_FOR_LAYOUT``) and XLA's dot. Each is timed in steady state
(``GpuTimer``: a jitted function of up to ``max_reps`` products on distinct buffers, calls
pipelined as the benchmark harness pipelines them, ``jax_tsm2.tune.timing``; median over
samples), the fastest is the entry's ``target``, and the entries are merged into this GPU's
cache file (``jax_tsm2.tune.cache``), which routing consults before the model. A candidate
that fails (a kernel this build does not have) is reported and left out.

``tune()`` takes the timer as an argument (any ``(target, problem, dtype, layout) ->
seconds``), so it runs on a machine without a GPU with a fake one (tests/test_tune.py).
``python -m jax_tsm2.tune`` (``jax_tsm2.tune.cli``) and autotuning at lowering time
(``jax_tsm2.tune.online``) both call it.
"""

from __future__ import annotations

import dataclasses
import datetime
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import numpy as np
from jax import numpy as jnp

from jax_tsm2 import _version, kernel_call, model
from jax_tsm2.model import xla_plan
from jax_tsm2.problem import Problem
from jax_tsm2.tune import cache, timing

Timer = Callable[[str, Problem, str, str], float]
DTYPES = {"f32": "float32", "f64": "float64", "bf16": "bfloat16", "f16": "float16"}


def candidates(p: Problem, dtype: str, layout: str, device: model.Device) -> list[str]:
    """Kernels the model says can run this problem in this layout, then "xla".

    TSM2L on a k too long for its L tile runs TSM2R's tile, so it is not a
    candidate of its own there.

    Example:
        >>> candidates(Problem(None, 10**6, 8, 8), "float32", "nn", model.H100_SXM)
        ['tsm2r', 'tsm2l', 'xla']
        >>> candidates(Problem(None, 20480, 20480, 8), "float32", "nn", model.H100_SXM)
        ['tsm2r', 'xla']
    """
    out = []
    for k in model.KERNELS_FOR_LAYOUT[layout]:
        pred = model.predict(p, dtype, layout, k, device=device)
        # TSM2L past the L tile's k runs what TSM2R runs: not a candidate of its own.
        if not pred.supported or (k == "tsm2l" and pred.params.get("tile") in ("R", "row stream")):
            continue
        out.append(k)
    return [*out, "xla"]


def tune(
    problems: Iterable[Problem],
    dtypes: Sequence[str],
    layouts: Sequence[str],
    *,
    timer: Timer,
    device: model.Device,
    write: bool = True,
    bandwidth: float | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, dict[str, Any]]:
    """Times the candidates of every problem; returns (and unless ``write`` is False
    stores) ``{cache.entry_key: {"target", "seconds", "predicted", ...}}``."""
    entries: dict[str, dict[str, Any]] = {}
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    for p in problems:
        for dtype in dtypes:
            for layout in layouts:
                times: dict[str, float] = {}
                failed: dict[str, str] = {}
                timed = time_candidates(
                    timer, candidates(p, dtype, layout, device), p, dtype, layout
                )
                for target, t in timed.items():
                    if isinstance(t, str):  # a candidate this build cannot run
                        failed[target] = t
                        continue
                    if not (t > 0 and np.isfinite(t)):
                        failed[target] = f"timer returned {t!r}"
                        continue
                    times[target] = t
                key = cache.entry_key(dtype, layout, p.batch, p.m, p.k, p.n)
                if not times:
                    log(f"{key}: every candidate failed: {failed}")
                    continue
                winner = min(times, key=times.__getitem__)
                predicted = {
                    t: model.predict(p, dtype, layout, t, device=device).seconds for t in times
                }
                entries[key] = {
                    "target": winner,
                    "seconds": times,
                    "predicted_seconds": predicted,
                    "failed": failed,
                    "date": date,
                    "jax_tsm2": _version.VERSION,
                    "jax": jax.__version__,
                }
                cells = ", ".join(
                    f"{t} {s * 1e6:.1f} us (model {predicted[t] * 1e6:.1f})"
                    for t, s in sorted(times.items(), key=lambda kv: kv[1])
                )
                log(f"{key}: {winner} wins; {cells}" + (f"; failed: {failed}" if failed else ""))
    if write and (entries or bandwidth):
        dev = {"key": device.key, "name": device.name, "cc": list(device.cc)}
        dev["sm_count"] = device.sm_count
        path = cache.store(dev, entries, bandwidth)
        log(f"wrote {len(entries)} entries to {path}")
    return entries


def time_candidates(
    timer: Timer, targets: Sequence[str], p: Problem, dtype: str, layout: str
) -> dict[str, float | str]:
    """Seconds per target, or why it failed: all at once (taking turns) where the timer has
    ``time_all``, else one target at a time."""
    why = lambda err: f"{type(err).__name__}: {err}"
    time_all = getattr(timer, "time_all", None)
    if time_all is not None:
        try:
            got = time_all(targets, p, dtype, layout)
        except Exception as err:
            return {t: why(err) for t in targets}
        return {t: why(got[t]) if isinstance(got[t], Exception) else float(got[t]) for t in got}
    out: dict[str, float | str] = {}
    for t in targets:
        try:
            out[t] = float(timer(t, p, dtype, layout))
        except Exception as err:
            out[t] = why(err)
    return out


class GpuTimer:
    """Steady-state device time of one product per candidate on the current GPU.

    Timed as the benchmark harness times a case (``jax_tsm2.bench.timing``): a
    jitted function of ``R`` products, each on its own operand buffers (so L2
    cannot serve them), called back to back with the next call always queued
    before the host waits for the current one; a sample is the time between
    completions divided by the products in between; the candidates take turns
    sample by sample (``time_all``); the result is the median of ``samples``
    (three times as many for a product of less than ~20 us).
    ``R`` aims at ``target_call_s`` of device work per call and 4x the L2 of
    distinct inputs, within ``max_reps`` and ``budget_bytes``, so a 10 us
    product is timed by the device, not by the host's dispatch (with only 4 products
    per call, XLA's dot on a bf16 167420 x 2 x 21 product timed 76 us, against 11.7
    us in the harness). Kernels are called
    through the FFI target directly with their ``kernel`` attribute, so each one
    is timed whatever routing would pick.
    """

    def __init__(
        self,
        samples: int = 5,
        *,
        max_reps: int = 64,
        target_call_s: float = 1e-3,
        target_sample_s: float = 4e-3,
        budget_bytes: int = 2 << 30,
        seed: int = 0,
    ):
        self.samples, self.max_reps, self.seed = samples, max_reps, seed
        self.target_call_s, self.target_sample_s = target_call_s, target_sample_s
        self.budget_bytes = budget_bytes

    def _generator(self, p: Problem, dtype: str, layout: str, reps: int) -> Callable:
        """A function of a PRNG key making ``reps`` operand buffers per operand."""
        a_shape, b_shape = kernel_call.stored_shapes(p, layout)
        dt = jnp.dtype(dtype)

        def make(key: Any) -> list[list[Any]]:
            keys = jax.random.split(key, 2 * reps)
            return [
                [jax.random.normal(keys[2 * i], a_shape, dt) for i in range(reps)],
                [jax.random.normal(keys[2 * i + 1], b_shape, dt) for i in range(reps)],
            ]

        return make

    def _product(self, target: str, p: Problem, dtype: str, layout: str) -> Callable:
        if target == "xla":
            return kernel_call.xla_product(layout)
        return kernel_call.kernel_product(target, p, dtype, layout)

    def __call__(self, target: str, p: Problem, dtype: str, layout: str) -> float:
        t = self.time_all([target], p, dtype, layout)[target]
        if isinstance(t, Exception):
            raise t
        return t

    def time_all(
        self, targets: Sequence[str], p: Problem, dtype: str, layout: str
    ) -> dict[str, float | Exception]:
        """Every target on the same buffers, taking turns sample by sample (as the harness's
        implementations do), so that a drift of the clocks lands on all of them alike; a
        target that fails to compile or run maps to its exception."""
        return self.run(self.prepare(targets, p, dtype, layout))

    def prepare(self, targets: Sequence[str], p: Problem, dtype: str, layout: str) -> Prepared:
        """Compiles what timing ``targets`` on ``p`` needs, without touching the device's
        memory: the operand generator and one program per target. Compiling is most of what
        a probe costs and runs on the host, so ``calibrate.measure`` prepares several probes
        at once in threads; ``run`` then times them one at a time."""
        itemsize = jnp.dtype(DTYPES.get(dtype, dtype)).itemsize
        batch = p.batch or 1
        in_bytes = batch * (p.m + p.n) * p.k * itemsize
        out_bytes = batch * p.m * p.n * itemsize
        # A first guess of the time (at ~2.5 TB/s, at least a launch) sizes R.
        guess = max((in_bytes + out_bytes) / 2.5e12, 5e-6)
        plan = timing.make_plan(
            in_bytes,
            out_bytes,
            guess,
            budget_bytes=self.budget_bytes,
            l2_bytes=model.current_device().l2_bytes,
            target_call_s=self.target_call_s,
            target_sample_s=self.target_sample_s,
            max_calls=self.max_reps,
        )
        prep = Prepared(tuple(targets), plan, guess)
        if plan.calls < 1:
            prep.failed.update({t: MemoryError(plan.reason) for t in targets})
            return prep
        key = jax.random.key(self.seed)
        try:
            lowered = jax.jit(self._generator(p, dtype, layout, plan.calls)).lower(key)
            prep.make_operands = lowered.compile()
        except Exception as err:
            prep.failed.update({t: err for t in targets})
            return prep
        shapes = lowered.out_info  # the operands' shapes and dtypes, for the programs
        if "xla" in targets:
            prep.xla_plan = self.xla_plan(p, dtype, layout)
        for t in targets:
            try:
                prep.programs[t], _ = timing.compile_jax(self._product(t, p, dtype, layout), shapes)
            except Exception as err:
                prep.failed[t] = err
        return prep

    def xla_plan(self, p: Problem, dtype: str, layout: str) -> model.XlaPlan | None:
        """XLA's plan for the product (``model.xla_plan.plan``), which a calibration records
        beside each probe's times."""
        return xla_plan.plan(p, dtype, layout)

    def run(self, prep: Prepared) -> dict[str, float | Exception]:
        """Times a prepared probe's programs on fresh operands (see ``time_all``)."""
        out: dict[str, float | Exception] = dict(prep.failed)
        if prep.make_operands is None:
            return {t: out[t] for t in prep.targets}
        copies = prep.make_operands(jax.random.key(self.seed))
        samples: dict[str, list[float]] = {}
        for t, program in prep.programs.items():
            try:
                timing.run_jax(program, copies)  # warm up
                samples[t] = []
            except Exception as err:
                out[t] = err
        # Below ~20 us a product's samples jump between two levels (8.5 or 14 us for every
        # implementation of one 2.3 MB product on an H100): three times the samples.
        rounds = self.samples * (3 if prep.guess < 20e-6 else 1)
        for _ in range(rounds):
            for t in samples:
                samples[t] += timing.time_jax(
                    prep.programs[t], copies, per_sample=prep.plan.per_sample, repeats=1
                )
        out.update({t: statistics.median(v) for t, v in samples.items()})
        return {t: out[t] for t in prep.targets}


@dataclasses.dataclass
class Prepared:
    """A probe compiled and ready to time (``GpuTimer.prepare``): its operand generator,
    one program per target, and the targets that failed to compile."""

    targets: tuple[str, ...]
    plan: timing.Plan
    guess: float
    make_operands: Any = None
    xla_plan: model.XlaPlan | None = None
    programs: dict[str, Any] = dataclasses.field(default_factory=dict)
    failed: dict[str, Exception] = dataclasses.field(default_factory=dict)


def measure_read_bandwidth(nbytes: int = 1 << 30, samples: int = 5) -> float:
    """Bytes/s of a streaming read of ``nbytes`` (XLA's reduction of a u32 array)."""
    x = jnp.ones((nbytes // 4,), jnp.uint32)
    f = jax.jit(lambda x: jnp.bitwise_xor.reduce(x))
    jax.block_until_ready(f(x))
    best = []
    for _ in range(samples):
        t0 = time.perf_counter()
        for _ in range(10):
            r = f(x)
        jax.block_until_ready(r)
        best.append((time.perf_counter() - t0) / 10)
    return x.nbytes / statistics.median(best)

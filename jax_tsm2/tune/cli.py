"""``python -m jax_tsm2.tune``: calibrate this GPU, or time chosen shapes and cache the winners.

    python -m jax_tsm2.tune --calibrate [--budget SECONDS] [--output FILE] [--dry-run]
    python -m jax_tsm2.tune --shapes 20480x20480x8,1e7x8x8 --dtype f32,bf16 [--layout nn]
        [--measure-bandwidth] [--dry-run] [--cache-dir DIR]

``--calibrate`` measures the GPU on a designed probe set and stores its
calibration (``jax_tsm2.tune.calibrate``), from which routing decides every
shape; run it once per GPU model (about three minutes). ``--shapes`` tunes
exact shapes:

For each (shape, dtype, layout) the candidates are the kernels that take the
layout and can run the shape (``model.KERNELS_FOR_LAYOUT``) and XLA's dot. Each
is timed in steady state (``GpuTimer``: a jitted function of up to ``max_reps``
products on distinct buffers, calls pipelined as the benchmark harness pipelines
them; median over samples), the fastest
is the entry's ``target``, and the entries are merged into this GPU's cache
file (``jax_tsm2.tune.cache``), which routing consults before the model.
A candidate that fails (a kernel this build does not have) is reported and
left out. ``--measure-bandwidth`` also stores the streaming-read ceiling,
which then replaces the theoretical bandwidth in the model on this GPU.

``tune()`` takes the timer as an argument (any ``(target, problem, dtype,
layout) -> seconds``), so it runs on a machine without a GPU with a fake one
(tests/test_tune.py).
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from jax_tsm2 import _cli, model
from jax_tsm2.problem import Problem
from jax_tsm2.tune import cache

Timer = Callable[[str, Problem, str, str], float]
DTYPES = {"f32": "float32", "f64": "float64", "bf16": "bfloat16", "f16": "float16"}


def parse_shape(text: str) -> Problem:
    """``"MxKxN"`` or ``"BxMxKxN"``; sizes may be written ``1e7``.

    Example:
        >>> parse_shape("1e7x8x8")
        Problem(batch=None, m=10000000, k=8, n=8)
    """
    try:
        sizes = [_cli.integer(s) for s in text.lower().split("x")]
    except ValueError:
        raise ValueError(f"shape {text!r}: expected MxKxN or BxMxKxN of integers") from None
    if len(sizes) not in (3, 4) or min(sizes) < 1:
        raise ValueError(f"shape {text!r}: expected MxKxN or BxMxKxN with sizes >= 1")
    return model.problem_from(tuple(sizes))


def candidates(p: Problem, dtype: str, layout: str, device: model.Device) -> list[str]:
    """Kernels the model says can run this problem in this layout, then "xla".

    TSM2L on a k too long for its L tile runs TSM2R's tile, so it is not a
    candidate of its own there.
    """
    out = []
    for k in model.KERNELS_FOR_LAYOUT[layout]:
        pred = model.predict(p, dtype, layout, k, device=device)
        if not pred.supported or (k == "tsm2l" and pred.params.get("tile") == "R"):
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
    import jax

    from jax_tsm2 import __version__

    entries: dict[str, dict[str, Any]] = {}
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    for p in problems:
        for dtype in dtypes:
            for layout in layouts:
                times: dict[str, float] = {}
                failed: dict[str, str] = {}
                timed = _time_candidates(
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
                    "jax_tsm2": __version__,
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


def _time_candidates(
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
    product is timed by the device, not by the host's dispatch (with 4 products
    per call, a first version measured XLA's dot on a bf16 167420 x 2 x 21
    product at 76 us against the harness's 11.7). Kernels are called
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

    def _operands(self, p: Problem, dtype: str, layout: str, reps: int) -> list[list[Any]]:
        import jax
        from jax import numpy as jnp

        from jax_tsm2.kernel_call import stored_shapes

        a_shape, b_shape = stored_shapes(p, layout)
        keys = jax.random.split(jax.random.key(self.seed), 2 * reps)
        normal = lambda key, shape: jax.random.normal(key, shape, jnp.dtype(dtype))
        return [
            [normal(keys[2 * i], a_shape) for i in range(reps)],
            [normal(keys[2 * i + 1], b_shape) for i in range(reps)],
        ]

    def _product(self, target: str, p: Problem, dtype: str, layout: str) -> Callable:
        from jax_tsm2 import kernel_call

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
        from jax import numpy as jnp

        from jax_tsm2.bench import timing

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
        if plan.calls < 1:
            return {t: MemoryError(plan.reason) for t in targets}
        copies = self._operands(p, dtype, layout, plan.calls)
        out: dict[str, float | Exception] = {}
        compiled: dict[str, Any] = {}
        samples: dict[str, list[float]] = {}
        for t in targets:
            try:
                compiled[t], _ = timing.compile_jax(self._product(t, p, dtype, layout), copies)
                timing.run_jax(compiled[t], copies)  # warm up
                samples[t] = []
            except Exception as err:
                out[t] = err
                compiled.pop(t, None)
        # Below ~20 us a product's samples jump between two levels (grid seed 7: 8.5 or
        # 14 us in every implementation of a 2.3 MB product): three times the samples.
        rounds = self.samples * (3 if guess < 20e-6 else 1)
        for _ in range(rounds):
            for t, c in compiled.items():
                samples[t] += timing.time_jax(c, copies, per_sample=plan.per_sample, repeats=1)
        out.update({t: statistics.median(v) for t, v in samples.items()})
        return {t: out[t] for t in targets}


def measure_read_bandwidth(nbytes: int = 1 << 30, samples: int = 5) -> float:
    """Bytes/s of a streaming read of ``nbytes`` (XLA's reduction of a u32 array)."""
    import jax
    from jax import numpy as jnp

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


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m jax_tsm2.tune", description=__doc__.split("\n")[0])
    dtypes = {**DTYPES, **{v: v for v in DTYPES.values()}}
    ap.add_argument(
        "--shapes",
        type=_cli.comma_list(parse_shape, "comma-separated MxKxN or BxMxKxN"),
        help="comma-separated MxKxN or BxMxKxN",
    )
    ap.add_argument(
        "--calibrate",
        action="store_true",
        help="measure this GPU (read ceiling, launch, each kernel and XLA's dot on a designed "
        "probe set) and store its calibration, which routing then decides with",
    )
    ap.add_argument(
        "--budget",
        type=_cli.positive_float,
        default=150.0,
        help="with --calibrate: seconds of probing at most (default 150)",
    )
    ap.add_argument("--output", help="with --calibrate: write the calibration to this file")
    ap.add_argument(
        "--dtype",
        default="f32",
        type=_cli.comma_list(_cli.one_of(dtypes, "dtype"), "comma-separated dtypes"),
        help="comma-separated: f32, f64, bf16, f16",
    )
    ap.add_argument(
        "--layout",
        default="nn",
        type=_cli.comma_list(_cli.one_of(model.LAYOUTS, "layout"), "comma-separated layouts"),
        help="comma-separated: nn, nt, tn",
    )
    ap.add_argument("--measure-bandwidth", action="store_true")
    ap.add_argument("--dry-run", action="store_true", help="time and print, write nothing")
    ap.add_argument(
        "--cache-dir", type=_cli.directory, help=f"overrides ${cache.ENV_DIR} for this run"
    )
    ap.add_argument(
        "--max-reps", type=_cli.positive_int, default=64, help="most products per timed call"
    )
    ap.add_argument("--samples", type=_cli.positive_int, default=5)
    return ap


def main(argv: Sequence[str] | None = None, timer: Timer | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    if args.calibrate and args.shapes:
        ap.error("--calibrate measures its own probe shapes: leave out --shapes")
    if not args.calibrate and not args.shapes:
        ap.error("--shapes is required (or --calibrate)")
    saved = os.environ.get(cache.ENV_DIR)
    if args.cache_dir:
        os.environ[cache.ENV_DIR] = str(args.cache_dir)
    try:
        return _calibrate(args) if args.calibrate else _run(args, timer)
    finally:  # the directory is this run's only (main may be called in-process)
        if saved is None:
            os.environ.pop(cache.ENV_DIR, None)
        else:
            os.environ[cache.ENV_DIR] = saved


def _run(args: argparse.Namespace, timer: Timer | None) -> int:
    if timer is None:
        from jax_tsm2 import _ffi

        if not (_ffi.cuda_backend_present() and _ffi.cuda_targets_available()):
            print("jax_tsm2.tune: needs a CUDA GPU and a CUDA build of jax_tsm2", file=sys.stderr)
            return 2
        timer = GpuTimer(samples=args.samples, max_reps=args.max_reps)
        device = model.device_from_driver(0)
    else:
        device = model.current_device()
    bw = measure_read_bandwidth() if args.measure_bandwidth else None
    if bw:
        print(f"streaming read: {bw / 1e9:.0f} GB/s")
        device = device.with_bandwidth(bw)
    print(f"device {device.key} ({device.source}); cache {cache.cache_path(device.key)}")
    tune(
        args.shapes,
        args.dtype,
        args.layout,
        timer=timer,
        device=device,
        write=not args.dry_run,
        bandwidth=bw,
    )
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    import pathlib

    from jax_tsm2.tune import calibrate

    out = pathlib.Path(args.output) if args.output else None
    try:
        data = calibrate.run(budget_s=args.budget, write=not args.dry_run, path=out)
    except RuntimeError as err:
        print(f"jax_tsm2.tune --calibrate: {err}", file=sys.stderr)
        return 2
    read, launch = data.read_bytes_per_s / 1e9, data.launch_seconds * 1e6
    print(
        f"calibrated {data.device['name']}: {len(data.records)} probes, "
        f"read ceiling {read:.0f} GB/s, smallest launch {launch:.1f} us"
    )
    return 0

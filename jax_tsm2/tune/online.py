"""Autotuning at lowering time: time a new shape's candidates when it is first lowered.

Opt-in (``jax_tsm2.autotune()``, ``jax_tsm2.set_autotune(True)``, ``JAX_TSM2_AUTOTUNE=1``;
see ``jax_tsm2.config``). In mode "auto" on a GPU, when this GPU's tune cache has no entry
for a tall-and-skinny shape (one that at least one kernel takes), routing calls
``tune_now``, which runs the tuner's ``tune()`` (``jax_tsm2.tune.tuner``) on that one
shape right there, as XLA's own GEMM autotuner does: every candidate kernel and XLA's
dot, timed with a short ``GpuTimer`` (the candidates take turns; median of ``SAMPLES``
samples of ~``SAMPLE_S`` of device time each, each after as much warm-up, three times as
many for products under ~20 us). Compiling the candidates dominates: on an H100 a shape of the
validation grid took 2-3 s longer to lower with autotuning than without.
The winner is merged into the per-GPU cache file (``jax_tsm2.tune.cache``), which routing
reads first, so each shape is timed once per GPU model, not once per process.

The timing runs on JAX's default device, and only where routing reasons about the GPU of
this process (``model.current_device()``, CUDA device 0); with the H100 preset
(cross-platform lowering, no GPU) nothing is timed. ``timer``, when set, replaces the
GpuTimer for any device (tests pass a fake one).

Tuning never fails a lowering: an exception, or every candidate failing, warns
(``RuntimeWarning``, naming the shape and the error) and routing decides without a
measurement; the shape is not retried in this process. One timing runs at a time (two on
one GPU would disturb each other), and the lowerings of the timer's own jitted functions
never tune.
"""

from __future__ import annotations

import logging
import threading
import warnings

from jax_tsm2 import model
from jax_tsm2.problem import Problem
from jax_tsm2.tune import cache, tuner

# GpuTimer settings: shorter samples than the CLI's (5 of 4 ms).
SAMPLES, SAMPLE_S = 5, 2e-3

#: Replaces the GpuTimer when set: any ``(target, problem, dtype, layout) -> seconds``.
timer: tuner.Timer | None = None

_log = logging.getLogger("jax_tsm2.tune")
_lock = threading.Lock()
_local = threading.local()  # .tuning: this thread is inside tune_now
# (device key, entry key) of shapes whose tuning failed in this process.
_failed: set[tuple[str, str]] = set()


def _timer_for(device: model.Device) -> tuner.Timer | None:
    """``timer``, else a GpuTimer where ``device`` is this process's GPU, else None."""
    if timer is not None:
        return timer
    here = model.current_device()
    if device.source != "driver" or here.source != "driver" or here.key != device.key:
        return None
    return tuner.GpuTimer(samples=SAMPLES, target_sample_s=SAMPLE_S)


def tune_now(p: Problem, dtype: str, layout: str, device: model.Device) -> bool:
    """Times ``p``'s candidates in ``layout`` on this GPU and caches the winner.

    Returns True if it stored an entry now; False if it did not time (no GPU to
    time on, called from inside a timing, another thread stored the entry
    meanwhile, or the shape failed before) or the timing failed (with a
    ``RuntimeWarning``). Never raises.
    """
    key = (device.key, cache.entry_key(dtype, layout, p.batch, p.m, p.k, p.n))
    if getattr(_local, "tuning", False) or key in _failed:
        return False
    t = _timer_for(device)
    if t is None:
        return False
    lines: list[str] = []

    def log(line: str) -> None:
        lines.append(line)
        _log.info(line)

    entries: dict = {}
    with _lock:
        if cache.lookup(device.key, dtype, layout, p.batch, p.m, p.k, p.n) is not None:
            return False
        _local.tuning = True
        try:
            entries = tuner.tune(
                [p], [dtype], [layout], timer=t, device=device, write=True, log=log
            )
            why = lines[-1] if lines else "no result"  # tune's "every candidate failed: ..."
        except Exception as err:  # never fail the user's lowering
            why = f"{type(err).__name__}: {err}"
        finally:
            _local.tuning = False
    if entries:
        return True
    _failed.add(key)
    batch = "" if p.batch is None else f"batch={p.batch} "
    warnings.warn(
        f"jax_tsm2: autotuning {dtype} {layout} {batch}m={p.m} k={p.k} n={p.n} on "
        f"{device.name} failed: {why}. Routing decides without a measurement; this shape "
        "is not retried in this process.",
        RuntimeWarning,
        stacklevel=2,
    )
    return False

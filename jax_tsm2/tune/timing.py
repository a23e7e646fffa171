"""Steady-state device time of jitted JAX products: the autotuner's timing method.

The benchmark harness (``jax_tsm2.bench.timing``, whose docstring gives the reasoning and the
measurements behind each choice) times every implementation this way too, so a tuned entry
and a benchmark figure are the same kind of number:

* a *call* is one jitted function of ``R`` products back to back, each on its own operand
  buffers, so the L2 cache cannot serve repeated reads and XLA cannot merge the products
  (``make_plan`` sizes ``R`` and the calls per sample, ``unrolled`` builds the function);
* calls run back to back with the next one queued before the host waits for the current
  one (``time_jax``), as in any pipelined JAX program;
* on a GPU with this extension, the function stamps the GPU's clock (the
  ``tsm2_device_clock`` target) before its first product and after its last, in stream
  order (``clocked``), and a sample is the stamped time per product; elsewhere it is the
  host clock between completions.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_tsm2 import _ffi

Copies = Sequence[Sequence[Any]]  # one sequence per operand, one buffer per product


@dataclass(frozen=True)
class Plan:
    """How many products per call (``calls``) and calls per sample (``per_sample``)."""

    calls: int
    per_sample: int
    reason: str | None = None  # why the case cannot run, if it cannot


def fmt_bytes(n: float) -> str:
    """``1.5 GB`` style (decimal units, as bandwidths are quoted)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


def make_plan(
    input_bytes: int,
    output_bytes: int,
    est_seconds: float,
    *,
    budget_bytes: int,
    l2_bytes: int,
    target_call_s: float,
    target_sample_s: float,
    max_calls: int,
    per_sample: int | None = None,
    max_per_sample: int = 64,
) -> Plan:
    """Choose ``R`` and ``P`` for a product of the given sizes and estimated time.

    ``R`` aims at ``target_call_s`` of device work per call and at 4x the L2 of distinct input
    bytes, within ``max_calls`` and within ``budget_bytes`` for the inputs plus three sets of
    outputs (two JAX calls in flight, and torch's CUDA graph keeps its own while the
    implementations take turns). ``P`` aims at ``target_sample_s`` per sample.
    """
    per_product = input_bytes + 3 * output_bytes
    fit = budget_bytes // max(per_product, 1)
    if fit < 1:
        return Plan(
            0,
            0,
            f"does not fit: one product needs {fmt_bytes(per_product)} "
            f"(inputs + 3 outputs), the per-case budget is {fmt_bytes(budget_bytes)}",
        )
    want = max(
        2,
        math.ceil(target_call_s / est_seconds),
        math.ceil(4 * l2_bytes / max(input_bytes, 1)),
    )
    calls = int(max(1, min(want, max_calls, fit)))
    if per_sample is None:
        per_sample = math.ceil(target_sample_s / (calls * est_seconds))
        per_sample = int(min(max(per_sample, 1), max_per_sample))
    return Plan(calls, max(1, int(per_sample)))


def unrolled(apply: Callable[..., Any], calls: int) -> Callable[..., tuple[Any, ...]]:
    """A function of one tuple of buffers per operand doing ``calls`` products back to back."""

    def products(*copies: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(apply(*(c[r] for c in copies)) for r in range(calls))

    return products


CLOCK_TARGET = "tsm2_device_clock"


def device_clock_available() -> bool:
    """True where JAX runs on a GPU and our extension registered ``tsm2_device_clock``."""
    if jax.default_backend() != "gpu":
        return False
    return CLOCK_TARGET in _ffi.registered_targets().get("CUDA", ())


def _stamp(*after: Any) -> Any:
    """The GPU clock (u32[2], ns, low word first) once everything in ``after`` is computed."""
    call = jax.ffi.ffi_call(
        CLOCK_TARGET, jax.ShapeDtypeStruct((2,), jnp.uint32), has_side_effect=True
    )
    return call(*after)


def clocked(products: Callable[..., Any]) -> Callable[..., tuple[Any, Any]]:
    """``products`` between two clock stamps: returns its outputs and u32[2, 2] stamps."""

    def run(*copies: Sequence[Any]) -> tuple[Any, Any]:
        t0 = _stamp()
        # The barrier makes every product wait for t0; t1 waits for every output.
        t0, copies = jax.lax.optimization_barrier((t0, copies))
        outs = products(*copies)
        t1 = _stamp(*jax.tree.leaves(outs))
        return outs, jnp.stack([t0, t1])

    return run


@dataclass
class JaxProgram:
    """A compiled unrolled function; ``clocked`` ones also return their two clock stamps."""

    executable: Any
    clocked: bool

    def __call__(self, *args: Any) -> tuple[Any, Any]:
        """(outputs, stamps or None)."""
        out = self.executable(*args)
        return out if self.clocked else (out, None)

    def as_text(self) -> str:
        return self.executable.as_text()


def compile_jax(
    apply: Callable[..., Any], copies: Copies, *, clock: bool | None = None
) -> tuple[JaxProgram, str]:
    """Jit and compile the unrolled products ahead of time (between clock stamps where the
    device clock is available, or as ``clock`` says); also return the lowered text."""
    calls = len(copies[0])
    if clock is None:
        clock = device_clock_available()
    fn = unrolled(apply, calls)
    lowered = jax.jit(clocked(fn) if clock else fn).lower(*[tuple(c) for c in copies])
    return JaxProgram(lowered.compile(), clock), lowered.as_text()


def run_jax(compiled: JaxProgram, copies: Copies) -> tuple[Any, ...]:
    """One call of a compiled unrolled function; waits for it and returns its outputs."""
    return jax.block_until_ready(compiled(*[tuple(c) for c in copies])[0])


def _elapsed_ns(stamps: Any) -> int:
    words = np.asarray(stamps, dtype=np.uint64)
    t0, t1 = (int(w[0]) | (int(w[1]) << 32) for w in words)
    return t1 - t0


def time_jax(
    compiled: JaxProgram,
    copies: Copies,
    *,
    per_sample: int,
    repeats: int,
    warmup: int = 1,
    host: list[float] | None = None,
) -> list[float]:
    """Seconds per product for each of ``repeats`` samples of ``per_sample`` calls, in steady
    state: one call always queued behind the one the host waits for (module docstring). The
    device clock's samples where ``compiled`` is clocked, else the host clock's; ``host``, if
    given, receives the host clock's samples as well."""
    args = [tuple(c) for c in copies]
    calls = len(copies[0])
    total = (warmup + repeats) * per_sample
    pending = compiled(*args)
    marks, stamps = [], []
    for _ in range(total):
        queued = compiled(*args)  # enqueue the next call before waiting for this one
        jax.block_until_ready(pending)
        marks.append(time.perf_counter())
        stamps.append(pending[1])  # a few bytes; read back once the loop is done
        pending = queued  # rebinding frees the finished call's outputs
    jax.block_until_ready(pending)
    marks.append(time.perf_counter())
    del pending, queued
    marks = marks[warmup * per_sample :]
    per = per_sample * calls
    host_samples = [
        (marks[(i + 1) * per_sample] - marks[i * per_sample]) / per for i in range(repeats)
    ]
    if host is not None:
        host.extend(host_samples)
    if not compiled.clocked:
        return host_samples
    ns = [_elapsed_ns(s) for s in stamps[warmup * per_sample :]]
    return [sum(ns[i * per_sample : (i + 1) * per_sample]) * 1e-9 / per for i in range(repeats)]

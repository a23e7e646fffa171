"""How every implementation is timed (docs/benchmarking.md, "How a case is timed").

One *call* is ``R`` products back to back, each on its own operand buffers, so that

* the L2 cache cannot serve repeated reads (the ``R`` buffers together are at least ~4x the L2
  when memory allows), and
* XLA cannot merge the products: no two products in one jitted function share an operand
  buffer. (Sharing one makes XLA's DotMerger fuse ``dot(A, B0)`` and ``dot(A, B1)`` into one
  ``dot(A, [B0 B1])`` and sibling fusion read ``A`` once for several elementwise ops; both were
  seen on an H100 and give impossible bandwidths.)

JAX: one jitted function performs the ``R`` products unrolled and returns all outputs, so
nothing is dead code; it is compiled ahead of time and warmed up. Then calls run back to back
with the next call always enqueued before the host waits for the current one (as in any
pipelined JAX program). On a GPU with our extension built, the function also stamps the GPU's
clock (``tsm2_device_clock``, ``%globaltimer``) before its first product and after its last,
in stream order; a *sample* is the stamped time of ``P`` calls divided by ``P * R``: the
device's time per product, as torch's CUDA events give it. Elsewhere a sample is the host
clock between the completions of call ``i`` and call ``i + P``, divided by ``P * R``; on a GPU
that figure is kept too (``seconds_host`` in the JSON). Why the device clock: a call passes
``2 R`` buffers, and on an H100 the host spends ~3 us per buffer before any launch (a
do-nothing function of the same buffers takes ~1.6 ms for ``R = 256``), so for products
under ~15 us the host, not the GPU, set the pace and the host-clock samples of one case
spread from 14 to 22 us (bf16 S 1 x 4096 x 4096) while torch's spread 0.04 us.
Nothing is subtracted from either clock. Timing one call alone instead (``seconds_isolated``
in the JSON, ``isolated=True`` here) also charges the host's dispatch (and the update of
XLA's command buffers, which were seen to add up to ~2 ms for 34 custom calls) to JAX, but
not to torch's event timing.

torch: the same ``R`` products on the same buffers (DLPack), captured once in a CUDA graph
(XLA launches from compiled thunks/command buffers, not from Python), a sample is ``P`` graph
replays between two CUDA events, divided by ``P * R``. Without graphs it falls back to eager
launches between events.

The implementations of a case take turns: one sample of each, then the next round, so that a
drift of the GPU's clocks or temperature during a case (an H100 at its power limit wanders by a
few percent) lands on all of them alike rather than on whichever ran first or last. The result
of each implementation is the median over ``repeats`` samples.
"""

from __future__ import annotations

import hashlib
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

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
    try:
        from jax_tsm2._ffi import registered_targets
    except Exception:  # the extension is not built: host clock only
        return False
    return CLOCK_TARGET in registered_targets().get("CUDA", ())


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


def program_digest(compiled: Any) -> str | None:
    """A digest of the optimized HLO that two compilations share exactly when they run the
    same program: XLA's fingerprint printing (canonical names, no metadata or source
    locations) with backend configs kept, so that two GEMMs autotuned to different
    algorithms differ. None where the compiled object does not expose its HLO."""
    try:
        from jaxlib import _hlo

        opts = _hlo.HloPrintOptions.fingerprint()
        opts.print_backend_config = True
        executable = getattr(compiled, "executable", compiled)
        modules = executable.runtime_executable().hlo_modules()
        text = "\n".join(m.to_string(opts) for m in modules)
    except Exception:  # a jaxlib without these bindings: no digest, no pooling
        return None
    return hashlib.sha256(text.encode()).hexdigest()[:16]


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


def time_jax_isolated(compiled: JaxProgram, copies: Copies, *, repeats: int = 3) -> list[float]:
    """Seconds per product of one call timed alone: host clock from dispatch to
    ``block_until_ready``, divided by ``R`` (includes the host's dispatch)."""
    args = [tuple(c) for c in copies]
    calls = len(copies[0])
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        samples.append((time.perf_counter() - t0) / calls)
    return samples


def host_overhead(copies: Copies, repeats: int = 5) -> float:
    """Seconds for one call of a do-nothing jitted function taking the same arguments.

    A diagnostic (never subtracted): what one call costs the host before any device work.
    """
    args = [tuple(c) for c in copies]
    fn = jax.jit(lambda *a: jnp.zeros((), jnp.float32), keep_unused=True)
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


class TorchRunner:
    """The ``R`` products in torch on given buffers, as a CUDA graph when capture works."""

    def __init__(
        self, torch: ModuleType, apply: Callable[..., Any], copies: Copies, graph: bool = True
    ):
        self.torch = torch
        self.calls = len(copies[0])
        self._products = lambda: [
            apply(torch.matmul, *(c[r] for c in copies)) for r in range(self.calls)
        ]
        self.method = "torch-eager-events"
        self.note: str | None = None
        self._graph = None
        if graph:
            try:
                self._capture()
                self.method = "torch-cuda-graph-events"
            except Exception as err:  # capture is best effort; eager is still a fair number
                self._graph = None
                self.note = f"CUDA graph capture failed ({type(err).__name__}: {err}); eager"

    def _capture(self) -> None:
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # cuBLAS handles and workspaces before capture
            self._products()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._outs = self._products()
        self._graph = graph

    def first(self) -> Any:
        """The first product, computed eagerly (for the correctness check)."""
        out = self._products()[0]
        self.torch.cuda.synchronize()
        return out

    def time(self, *, per_sample: int, repeats: int, warmup: int = 1) -> list[float]:
        """Seconds per product for each of ``repeats`` samples, from CUDA events."""
        torch = self.torch
        run = self._graph.replay if self._graph is not None else self._products
        samples = []
        for i in range(warmup + repeats):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(per_sample):
                out = run()
            end.record()
            end.synchronize()
            del out
            if i >= warmup:
                samples.append(start.elapsed_time(end) * 1e-3 / (per_sample * self.calls))
        return samples

    def time_eager(self, repeats: int = 3) -> list[float]:
        """Seconds per product of the ``R`` products launched eagerly between CUDA events
        (a diagnostic next to the graph timing: what torch costs without graphs)."""
        torch = self.torch
        samples = []
        for _ in range(repeats):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            out = self._products()
            end.record()
            end.synchronize()
            del out
            samples.append(start.elapsed_time(end) * 1e-3 / self.calls)
        return samples

    def close(self) -> None:
        """Drop the graph and its memory pool."""
        self._graph = None
        self._outs = None
        self.torch.cuda.synchronize()
        self.torch.cuda.empty_cache()

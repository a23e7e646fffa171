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
import statistics
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp

from jax_tsm2 import _compat
from jax_tsm2.tune.timing import (  # the timing core, shared with the autotuner
    CLOCK_TARGET,
    Copies,
    JaxProgram,
    Plan,
    clocked,
    compile_jax,
    device_clock_available,
    fmt_bytes,
    make_plan,
    run_jax,
    time_jax,
    unrolled,
)

__all__ = [
    "CLOCK_TARGET",
    "Copies",
    "JaxProgram",
    "Plan",
    "TorchRunner",
    "clocked",
    "compile_jax",
    "device_clock_available",
    "fmt_bytes",
    "host_overhead",
    "make_plan",
    "median_call_seconds",
    "program_digest",
    "run_jax",
    "time_jax",
    "time_jax_isolated",
    "unrolled",
]


def program_digest(compiled: Any) -> str | None:
    """A digest of the optimized HLO that two compilations share exactly when they run the
    same program: XLA's fingerprint printing (canonical names, no metadata or source
    locations) with backend configs kept, so that two GEMMs autotuned to different
    algorithms differ. None where the compiled object does not expose its HLO."""
    try:
        opts = _compat.hlo_print_options().fingerprint()
        opts.print_backend_config = True
        executable = getattr(compiled, "executable", compiled)
        modules = executable.runtime_executable().hlo_modules()
        text = "\n".join(m.to_string(opts) for m in modules)
    except Exception:  # a jaxlib without these bindings: no digest, no pooling
        return None
    return hashlib.sha256(text.encode()).hexdigest()[:16]


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


def median_call_seconds(fn: Callable[..., Any], *args: Any, repeats: int = 5) -> float:
    """Median host seconds of ``fn(*args)`` to ``block_until_ready``, after one warm-up call
    (compilation excluded; the host's dispatch included)."""
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def host_overhead(copies: Copies, repeats: int = 5) -> float:
    """Seconds for one call of a do-nothing jitted function taking the same arguments.

    A diagnostic (never subtracted): what one call costs the host before any device work.
    """
    args = [tuple(c) for c in copies]
    fn = jax.jit(lambda *a: jnp.zeros((), jnp.float32), keep_unused=True)
    return median_call_seconds(fn, *args, repeats=repeats)


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

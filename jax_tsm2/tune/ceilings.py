"""The two ceilings a calibration and the benchmark harness both measure (GPU only).

* read: our ``tsm2_stream_read`` FFI kernel reads buffers of several times the L2 with
  16-byte loads; bytes = the buffer's size. If the target is not registered (the extension
  is not built yet), an XLA xor-reduction stands in and ``method`` says so. The copy ceiling
  (``x ^ s`` under jit, bytes read plus written) is measured beside it for reference.
* the empty launch: the same kernel with one block on a 16-byte buffer.

Both are timed exactly like the products (``timing``): one operand buffer per launch,
unrolled under jit, median of repeats.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from jax_tsm2.tune import timing

READ_TARGET = "tsm2_stream_read"
#: Bytes of each buffer the empty launch reads: one 16-byte load.
LAUNCH_BYTES = 16


def _words(key: Any, count: int) -> Any:
    return jax.jit(lambda k: jax.random.bits(k, (count,), jnp.uint32))(key)


def _time(
    apply: Callable[..., Any], copies: list[list[Any]], per_sample: int, repeats: int
) -> float:
    compiled, _ = timing.compile_jax(apply, copies)
    timing.run_jax(compiled, copies)
    return statistics.median(
        timing.time_jax(compiled, copies, per_sample=per_sample, repeats=repeats)
    )


def _stream_read(nblocks: int) -> Callable[[Any], Any]:
    call = jax.ffi.ffi_call(READ_TARGET, jax.ShapeDtypeStruct((nblocks,), jnp.uint32))
    return lambda x: call(x)


def _xor_reduce(x: Any) -> Any:
    return jnp.bitwise_xor.reduce(x, axis=0)


def measure_bandwidth(
    *, buffer_bytes: int, buffers: int, sm_count: int | None, repeats: int, seed: int = 0
) -> dict[str, Any]:
    """Read and copy ceilings in bytes/s (``None`` where a measurement failed, with why)."""
    count = buffer_bytes // 4
    keys = jax.random.split(jax.random.key(seed), buffers)
    xs = [_words(k, count) for k in keys]
    nbytes = count * 4
    out: dict[str, Any] = {"buffer_bytes": nbytes, "buffers": buffers}
    read = None
    for method, fn in (
        (f"ffi:{READ_TARGET}", _stream_read((sm_count or 132) * 8)),
        ("xla-xor-reduce (fallback: tsm2_stream_read is not available)", _xor_reduce),
    ):
        try:
            seconds = _time(fn, [xs], per_sample=8, repeats=repeats)
        except Exception as err:
            out.setdefault("read_errors", []).append(f"{method}: {type(err).__name__}: {err}")
            continue
        read = {"bytes_per_s": nbytes / seconds, "method": method}
        break
    out["read_bytes_per_s"] = read["bytes_per_s"] if read else None
    out["read_method"] = read["method"] if read else None
    try:
        scalars = [jnp.uint32(0x9E3779B9 + i) for i in range(buffers)]
        seconds = _time(jnp.bitwise_xor, [xs, scalars], per_sample=4, repeats=repeats)
        out["copy_bytes_per_s"] = 2 * nbytes / seconds
        out["copy_method"] = "xla: x ^ s (bytes read + written)"
    except Exception as err:
        out["copy_bytes_per_s"] = None
        out["copy_method"] = f"failed: {type(err).__name__}: {err}"
    del xs
    return out


def measure_launch(
    *,
    calls: int,
    per_sample: int,
    repeats: int,
    warmup: int = 1,
    apply: Callable[[Any], Any] | None = None,
) -> dict[str, Any]:
    """The empty launch: ``launch_seconds`` per launch (``None`` where it failed, with why).

    ``calls`` launches per jitted call, each on its own ``LAUNCH_BYTES`` buffer, ``per_sample``
    calls per sample, the median of ``repeats`` samples: what ``timing.make_plan`` gives a case
    of a few bytes. ``apply`` replaces the kernel (tests)."""
    words = LAUNCH_BYTES // 4
    method = f"ffi:{READ_TARGET}, 1 block, {LAUNCH_BYTES}-byte buffer"
    out: dict[str, Any] = {"launch_method": method, "launch_calls": calls}
    try:
        xs = [jnp.full((words,), i, jnp.uint32) for i in range(calls)]
        compiled, _ = timing.compile_jax(apply or _stream_read(1), [xs])
        timing.run_jax(compiled, [xs])
        samples = timing.time_jax(
            compiled, [xs], per_sample=per_sample, repeats=repeats, warmup=warmup
        )
    except Exception as err:
        out.update(launch_seconds=None, launch_error=f"{type(err).__name__}: {err}")
        return out
    out.update(
        launch_seconds=statistics.median(samples),
        launch_samples=samples,
        launch_per_sample=per_sample,
        launch_timing_method="jax-jit-device-clock"
        if compiled.clocked
        else "jax-jit-steady-state-host-clock",
    )
    return out

"""The ceilings every case is reported against, measured in the same run (GPU only).

* read: our ``tsm2_stream_read`` FFI kernel reads buffers of ~1 GiB each (20x an H100's L2)
  with 16-byte loads; bytes = the buffer's size. If the target is not registered (the
  extension is not built yet), an XLA xor-reduction stands in and ``method`` says so.
* copy (reference only): ``x ^ s`` under jit, counting bytes read plus written.
* compute (for the roofline plot): ``jnp.matmul(precision="highest")`` of two N x N matrices
  per dtype, in FLOP/s.
* launch: the time of an empty kernel launch, the floor of a product too small to be bound by
  its bytes. The empty kernel is ``tsm2_stream_read`` with one block on a 16-byte buffer: a
  custom call like our products' (XLA never fuses it away, nor merges several into one
  launch as it does small elementwise fusions), which loads its input and stores one word,
  the least any product kernel does.

All are timed exactly like the cases (``timing.py``): one operand buffer per product, unrolled
under jit, device clock where there is one, median of repeats; the launch with as many
launches per call as the smallest cases have products per call.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from jax_tsm2.bench import timing
from jax_tsm2.bench.suite import DTYPES

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


def measure_compute(
    dtypes: list[str], *, size: int, budget_bytes: int, repeats: int, seed: int = 1
) -> dict[str, Any]:
    """Large-GEMM rate per dtype in FLOP/s: ``jnp.matmul(precision="highest")``, N x N."""
    out: dict[str, Any] = {}
    for name in dtypes:
        dtype = DTYPES[name]
        nbytes = size * size * dtype.itemsize
        calls = int(max(1, min(4, budget_bytes // (4 * nbytes))))
        try:
            keys = jax.random.split(jax.random.key(seed), 2 * calls)
            mats = [jax.random.normal(k, (size, size), jnp.float32).astype(dtype) for k in keys]
            seconds = _time(
                lambda a, b: jnp.matmul(a, b, precision="highest"),
                [mats[:calls], mats[calls:]],
                per_sample=2,
                repeats=repeats,
            )
            out[name] = {"flops_per_s": 2.0 * size**3 / seconds, "size": size}
        except Exception as err:
            out[name] = {"flops_per_s": None, "error": f"{type(err).__name__}: {err}"}
        finally:
            mats = None
    return out


def skipped(reason: str) -> dict[str, Any]:
    """The ceilings block when nothing is measured (CPU)."""
    return {
        "read_bytes_per_s": None,
        "read_method": None,
        "copy_bytes_per_s": None,
        "copy_method": None,
        "compute_flops_per_s": {},
        "launch_seconds": None,
        "launch_method": None,
        "note": reason,
    }

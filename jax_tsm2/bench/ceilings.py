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

from typing import Any

import jax
import jax.numpy as jnp

from jax_tsm2.bench.suite import DTYPES

# The read ceiling and the empty launch are measured by the product's calibration too,
# so they live with it; the harness reports them under these names.
from jax_tsm2.tune.ceilings import LAUNCH_BYTES as LAUNCH_BYTES
from jax_tsm2.tune.ceilings import READ_TARGET as READ_TARGET
from jax_tsm2.tune.ceilings import _stream_read as _stream_read
from jax_tsm2.tune.ceilings import _time
from jax_tsm2.tune.ceilings import measure_bandwidth as measure_bandwidth
from jax_tsm2.tune.ceilings import measure_launch as measure_launch


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

"""Where a pinned out-of-core pass spends its time: the reads, the steps, both.

The fit's pinned path reads each chunk with ``tsm2_host_rows`` inside one program per pass,
while a copy engine brings the next chunk into device memory (``ffi/hostmem/staging.h``).
This probe times, per pass over ``--gb`` GB of f32 points pinned in place (chunks of
``--rows`` rows): a loop of reads alone (the copy engine's rate), the iteration's pass as
the fit runs it (``program_passes.iteration``), and the same pass on the data already on the
device (the steps alone, where it fits), with the reads' hit and miss counts. A pass at the
reads' time means the steps hide behind the copies.

Usage (GPU machine)::

    python benchmarks/lab/host_rows_passes.py --gb 8 --d 64 --k 1024 --rows 797011
"""

from __future__ import annotations

import argparse
import functools
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_tsm2 import host_memory
from jax_tsm2.clustering import out_of_core, program_passes


def _best(fn, repeats: int) -> float:
    """The shortest of ``repeats`` timed calls of ``fn`` (after one that compiles)."""
    jax.block_until_ready(fn())
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        best = min(best, time.perf_counter() - t0)
    return best


def _iteration_pass(read, source, n, rows, chunks, c, mu, repeats):
    """The best time of one Lloyd pass over the chunks, labels carried between passes."""
    labels = [program_passes.labels_buffer(chunks, rows)]

    def one():
        out = program_passes.iteration(
            source, None, labels[0], c, mu, read=read, rows=rows, chunks=chunks, n=n,
            precision="float32",
        )  # fmt: skip
        labels[0] = out[-1]
        return out

    return _best(one, repeats)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gb", type=float, default=8.0, help="GB of f32 points in host memory")
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--k", type=int, default=1024)
    ap.add_argument("--rows", type=int, default=797011, help="rows per chunk")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    if args.gb <= 0 or min(args.d, args.k, args.rows, args.repeats) < 1:
        ap.error("sizes and --repeats must be positive")

    n = int(args.gb * 1e9) // (4 * args.d)
    rows = min(args.rows, n)
    chunks = -(-n // rows)
    rng = np.random.default_rng(0)
    # One block of normals, shifted per block, fills the array quickly at tens of GB.
    block = rng.standard_normal((min(n, 1 << 22), args.d), np.float32)
    x = np.empty((n, args.d), np.float32)
    for lo in range(0, n, block.shape[0]):
        hi = min(n, lo + block.shape[0])
        x[lo:hi] = block[: hi - lo] + np.float32(lo % 7)
    print(f"{x.nbytes / 1e9:.1f} GB, {chunks} chunks of {rows} rows", flush=True)
    c = jnp.asarray(x[:: max(1, n // args.k)][: args.k])
    mu = jnp.zeros((args.d,), jnp.float32)

    def report(what: str, seconds: float, extra: str = "") -> None:
        print(
            f"{what}: {seconds * 1e3:.1f} ms, {seconds / chunks * 1e3:.2f} ms a chunk, "
            f"{x.nbytes / seconds / 1e9:.1f} GB/s{extra}",
            flush=True,
        )

    with host_memory.pinned(x, rows) as read:

        @jax.jit
        def reads_only(scale):
            # One value of each chunk is used, so that no read is dropped.
            return lax.fori_loop(0, chunks, lambda i, a: a + read(i)[1, 1] * scale, 0.0)

        t = _best(lambda: reads_only(jnp.float32(1.0)), args.repeats)
        report("reads alone", t, f"; hits, misses so far {read.staging_counts()}")
        pinned = out_of_core._PinnedReader(read)
        t = _iteration_pass(pinned, None, n, rows, chunks, c, mu, args.repeats)
        report("iteration pass, pinned", t, f"; hits, misses so far {read.staging_counts()}")
    if x.nbytes < jax.devices()[0].memory_stats().get("bytes_limit", 0) // 3:
        on_device = functools.partial(program_passes.device_rows, rows=rows)
        t = _iteration_pass(on_device, jnp.asarray(x), n, rows, chunks, c, mu, args.repeats)
        report("iteration pass, data on the device", t)
    return 0


if __name__ == "__main__":
    sys.exit(main())

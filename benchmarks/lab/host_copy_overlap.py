"""Does ``jax.device_put`` of a page-locked chunk overlap the previous chunk's k-means step?

The out-of-core fit's pinned path has the copy engines bring each chunk ahead of its read
inside one program per pass (``ffi/hostmem/staging.h``). This probe measures a way of doing
that from Python instead: the chunks as page-locked
JAX arrays (``memory_kind="pinned_host"``, each a copy made once), then one pass of
``jax.device_put`` of chunk ``i`` (a DMA on the runtime's host-to-device stream) followed by
the jitted step of ``out_of_core``'s passes (``chunk_work.step``) on it, all dispatched
without waiting, so the copy of chunk ``i + 1`` can run while the step of chunk ``i`` does.

Prints, per pass over the data: the copies alone, the steps alone (on chunks already on the
device), both dispatched together, and the ratio of that to the longer of the two (1.0: a
full overlap; the sum over the longer: none). Also the one-time cost of staging the data
into page-locked arrays, which such a path would pay per fit.

Usage (GPU machine)::

    python benchmarks/lab/host_copy_overlap.py --gb 8 --d 64 --k 1024 --budget-gb 2
"""

from __future__ import annotations

import argparse
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from jax_tsm2.clustering import chunk_work, out_of_core


def _seconds(fn, repeats: int) -> float:
    fn()  # compile and warm up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gb", type=float, default=8.0, help="GB of f32 points in host memory")
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--k", type=int, default=1024)
    ap.add_argument("--budget-gb", type=float, default=2.0, help="sizes the chunks")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    if min(args.gb, args.budget_gb) <= 0 or min(args.d, args.k, args.repeats) < 1:
        ap.error("sizes and --repeats must be positive")

    n = int(args.gb * 1e9) // (4 * args.d)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, args.d), np.float32)
    plan = out_of_core.plan_chunks(n, args.d, args.k, np.float32, int(args.budget_gb * 1e9))
    rows, chunks = plan.rows, plan.chunks
    print(f"{x.nbytes / 1e9:.2f} GB, {chunks} chunks of {rows} rows", flush=True)

    dev = jax.devices()[0]
    try:
        host = jax.sharding.SingleDeviceSharding(dev, memory_kind="pinned_host")
        on_device = jax.sharding.SingleDeviceSharding(dev, memory_kind="device")
    except Exception as e:  # any failure means: this JAX or device has no such memory
        print(f"no pinned host memory here: {type(e).__name__}: {e}")
        return 1

    def pad(i: int) -> np.ndarray:
        part = x[i * rows : (i + 1) * rows]
        return part if len(part) == rows else np.pad(part, ((0, rows - len(part)), (0, 0)))

    t0 = time.perf_counter()
    staged = [jax.device_put(pad(i), host) for i in range(chunks)]
    jax.block_until_ready(staged)
    stage_s = time.perf_counter() - t0
    print(f"staging into page-locked arrays: {stage_s:.2f} s ({x.nbytes / stage_s / 1e9:.1f} GB/s)")

    c = jnp.asarray(x[: args.k])
    mu = jnp.zeros(args.d, jnp.float32)
    counts = [jnp.int32(min(rows, n - i * rows)) for i in range(chunks)]
    old = jnp.full((rows,), -1, jnp.int32)
    resident = jax.device_put(staged[0], on_device)

    def copies():
        jax.block_until_ready([jax.device_put(s, on_device) for s in staged])

    def steps():
        jax.block_until_ready([chunk_work.step(resident, w, c, mu, old) for w in counts])

    def both():
        outs = []
        for s, w in zip(staged, counts, strict=True):
            outs.append(chunk_work.step(jax.device_put(s, on_device), w, c, mu, old))
        jax.block_until_ready(outs)

    t_copy = _seconds(copies, args.repeats)
    t_step = _seconds(steps, args.repeats)
    t_both = _seconds(both, args.repeats)
    longer = max(t_copy, t_step)
    print(f"copies alone: {t_copy:.3f} s ({x.nbytes / t_copy / 1e9:.1f} GB/s)")
    print(f"steps alone:  {t_step:.3f} s")
    print(
        f"both:         {t_both:.3f} s = {t_both / longer:.2f}x the longer "
        f"(no overlap would be {(t_copy + t_step) / longer:.2f}x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

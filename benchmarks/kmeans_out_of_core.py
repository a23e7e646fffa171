"""k-means on data in host memory larger than a device-memory budget, against the host link.

Makes ``--gb`` GB of f32 points (``--d`` features) in host memory and measures the
host-to-device link two ways: copying the data once as the chunk-by-chunk path copies it
(``jax.device_put`` from pageable memory, the streamed plan's chunks, no work), and the DMA
rate from page-locked memory (a chunk in JAX's ``pinned_host`` memory, copied repeatedly): one
copy of the data at that rate is the reference an iteration is judged against. Then times
``kmeans_streamed`` at ``--k`` clusters with ``--budget-gb`` of device memory on the path
``--host-pinning`` asks for (``auto``: pinned in place where it can, the default), and says
which path the fit took. Per-iteration time is the difference of two run lengths
(``--iters`` and twice that, ``tol=0``, after a run of one that compiles) divided by the
difference in iterations, so the pinning, the mean-and-variance pass, the init and the final
assignment cancel; the pinning's own cost (registering and releasing the data once) is timed
apart.

Usage (GPU machine)::

    python benchmarks/kmeans_out_of_core.py --gb 40 --d 64 --k 1024 --budget-gb 8 --out DIR

Writes ``kmeans_out_of_core.json`` into ``--out`` and prints the ratio of the per-iteration
time to one copy of the data over the link at its pinned rate (and at the pageable one).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import pathlib
import sys
import time

import jax
import numpy as np

from jax_tsm2 import host_memory
from jax_tsm2.clustering import out_of_core


def link_seconds(x: np.ndarray, plan: out_of_core.StreamPlan) -> float:
    """One copy of ``x`` to the device the way the fit copies it (``out_of_core._passes``,
    chunks of ``plan.rows``), with no work per chunk."""
    t0 = time.perf_counter()
    out_of_core._passes(x, None, plan, lambda carry, xc, wc, i: (xc, xc), None)
    return time.perf_counter() - t0


def pinned_link_bytes_per_s(chunk: np.ndarray, repeats: int = 8) -> float | None:
    """The host link's rate from page-locked memory (``memory_kind="pinned_host"``), where
    a DMA needs no staging copy: the hardware's ceiling for the fit's copies. None where
    this JAX has no pinned host memory."""
    dev = jax.devices()[0]
    try:
        host = jax.sharding.SingleDeviceSharding(dev, memory_kind="pinned_host")
        on_device = jax.sharding.SingleDeviceSharding(dev, memory_kind="device")
        pinned = jax.device_put(chunk, host)
        jax.device_put(pinned, on_device).block_until_ready()
    except Exception as e:  # any failure means: not measurable here
        print(f"no pinned host memory through JAX: {type(e).__name__}: {e}", flush=True)
        return None
    t0 = time.perf_counter()
    outs = [jax.device_put(pinned, on_device) for _ in range(repeats)]
    jax.block_until_ready(outs)
    return repeats * chunk.nbytes / (time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gb", type=float, default=40.0, help="GB of f32 points in host memory")
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--k", type=int, default=1024)
    ap.add_argument("--budget-gb", type=float, default=8.0)
    ap.add_argument("--iters", type=int, default=2)
    ap.add_argument(
        "--host-pinning",
        choices=("auto", "on", "off"),
        default="auto",
        help="pin the data in place (on), copy chunk by chunk with device_put (off), or "
        "pin where the fit can (auto)",
    )
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("."))
    args = ap.parse_args(argv)
    if min(args.gb, args.budget_gb) <= 0 or min(args.d, args.k, args.iters) < 1:
        ap.error("sizes must be positive")

    n = int(args.gb * 1e9) // (4 * args.d)
    t0 = time.perf_counter()
    x = np.empty((n, args.d), np.float32)
    rng = np.random.default_rng(0)
    step = 1 << 22
    # Blobs around 64 centres per slice. One block of noise serves every slice (drawing
    # 40 GB of normals takes minutes); each slice draws its own centres and memberships.
    noise = rng.standard_normal((min(n, step), args.d), np.float32)
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        centres = rng.normal(0, 4, (64, args.d)).astype(np.float32)
        np.add(noise[: hi - lo], centres[rng.integers(0, 64, hi - lo)], out=x[lo:hi])
    del noise
    made = time.perf_counter() - t0
    budget = int(args.budget_gb * 1e9)
    plan = out_of_core.plan_chunks(n, args.d, args.k, np.float32, budget)
    print(f"{x.nbytes / 1e9:.1f} GB ({n} x {args.d}) made in {made:.0f} s; plan {plan}", flush=True)

    pinning = {"auto": None, "on": True, "off": False}[args.host_pinning]
    path = out_of_core.stream_path(x, args.k, budget, host_pinning=pinning)
    how = "pinned in place" if path.pinned else f"device_put ({path.reason})"
    print(f"fit path: {how}; plan {path.plan}", flush=True)
    pin_seconds = None
    if path.pinned:
        t0 = time.perf_counter()
        with host_memory.pinned(x, path.plan.rows):
            pass
        pin_seconds = time.perf_counter() - t0
        print(f"pinning {x.nbytes / 1e9:.1f} GB in place and releasing it: {pin_seconds:.2f} s")
    link_seconds(x[: 2 * plan.rows], dataclasses.replace(plan, chunks=2))  # warm-up
    link = link_seconds(x, plan)
    print(f"host link: {x.nbytes / link / 1e9:.1f} GB/s copied chunk by chunk ({link:.2f} s)")
    init = x[:: max(1, n // args.k)][: args.k].astype(np.float64)
    times = {}
    for iters in (1, args.iters, 2 * args.iters):  # the first compiles
        t0 = time.perf_counter()
        s = out_of_core.kmeans_streamed(
            jax.random.key(0), x, args.k, init=init, max_iter=iters, tol=0.0,
            device_memory_budget=budget, host_pinning=pinning,
        )  # fmt: skip
        float(s.inertia)
        times[iters] = (time.perf_counter() - t0, int(s.n_iter), float(s.inertia))
        print(f"{iters} iterations: {times[iters][0]:.2f} s, inertia {times[iters][2]:.6g}")
    (t1, i1, _), (t2, i2, _) = times[args.iters], times[2 * args.iters]
    per_iter = (t2 - t1) / max(1, i2 - i1)
    record = {
        "gpu": jax.devices()[0].device_kind,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "jax": jax.__version__,
        "command": " ".join(["python", *sys.argv]),
        "n": n,
        "d": args.d,
        "k": args.k,
        "data_bytes": x.nbytes,
        "budget_bytes": budget,
        "path": "pinned" if path.pinned else "device_put",
        "path_reason": path.reason,
        "pin_seconds": pin_seconds,
        "chunk_rows": path.plan.rows,
        "chunks": path.plan.chunks,
        "link_seconds": link,
        "link_bytes_per_s": x.nbytes / link,
        "runs": {
            str(k): {"seconds": v[0], "iterations": v[1], "inertia": v[2]} for k, v in times.items()
        },
        "seconds_per_iteration": per_iter,
        "iteration_over_copy": per_iter / link,
    }
    out = args.out / "kmeans_out_of_core.json"
    args.out.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1))
    print(
        f"per iteration {per_iter:.2f} s ({x.nbytes / per_iter / 1e9:.1f} GB/s streamed) = "
        f"{per_iter / link:.2f}x one copy of the data chunk by chunk from pageable memory",
        flush=True,
    )
    # Last, on a chunk of its own (not a view of the data), with the record already written:
    # the reference, one copy of the data at the link's pinned DMA rate.
    pinned = pinned_link_bytes_per_s(np.array(x[: plan.rows]))
    if pinned:
        record["pinned_link_bytes_per_s"] = pinned
        record["pinned_copy_seconds"] = x.nbytes / pinned
        record["iteration_over_pinned_copy"] = per_iter * pinned / x.nbytes
        out.write_text(json.dumps(record, indent=1))
        print(
            f"from pinned memory the link carries {pinned / 1e9:.1f} GB/s, one copy of the data "
            f"{x.nbytes / pinned:.2f} s: the iteration ({record['path']}) is "
            f"{record['iteration_over_pinned_copy']:.2f}x one such copy"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Scaling over GPUs: a row-sharded product and sharded k-means on every visible GPU vs one.

Product: ``jax_tsm2.matmul`` of A (61440 x 30720, f32) row-sharded over all
visible GPUs times a replicated B (30720 x 16), against one GPU doing its
share of the rows (half of them on 2 GPUs). Throughput is rows per second;
the target is ``multi / single >= 0.9 * n_gpus`` (1.8x on two GPUs).

k-means (n = 4e6, d = 256, k = 16, f32): per-iteration time with the
points sharded over all GPUs (``kmeans(..., axis_name=...)`` under
``shard_map``) against the same problem on one GPU; the target is
``multi / single <= 0.6`` on two GPUs. Per-iteration time is the difference
between a long and a short run divided by the difference in iterations, so
initialisation and the final assignment cancel out.

Timing: each case is compiled and run once (warm-up), then timed ``--repeats``
times with ``block_until_ready``; the median is reported. Data are generated
on the devices (no host transfer). Products run in the routing modes given by
``--modes`` (default: ``auto``, what a user gets, and ``prefer``, the TSM2R
kernel forced on each shard).

Usage (on the GPU machine, after ``pip install --no-build-isolation -e .``)::

    python benchmarks/multi_gpu.py --out /tmp/out/multi_gpu
    python benchmarks/multi_gpu.py --out DIR --quick     # small sizes, a smoke run

It prints a short table and writes ``multi_gpu.json`` (with the device names,
jax version and every raw time) into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import jax_tsm2
from jax_tsm2.clustering import kmeans


def _time(fn: Callable[[], Any], repeats: int, calls: int = 10) -> list[float]:
    """Seconds per call: `calls` back-to-back calls per sample, one sync at the end.

    Timing one call at a time would add the host's dispatch and sync to each
    (about 0.3 ms for a 2-device program, a third of a 1 ms product); queued
    calls overlap dispatch with the GPUs' work, as in a training loop.
    """
    jax.block_until_ready(fn())  # compile + warm up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = [fn() for _ in range(calls)]
        jax.block_until_ready(out)
        times.append((time.perf_counter() - t0) / calls)
        del out
    return times


def _normal(key: jax.Array, shape: tuple[int, ...], sharding: Any) -> jax.Array:
    return jax.jit(lambda k: jax.random.normal(k, shape, jnp.float32), out_shardings=sharding)(key)


def bench_matmul(m: int, k: int, n: int, mode: str, repeats: int) -> dict[str, Any]:
    devs = jax.devices()
    nd = len(devs)
    mesh = jax.make_mesh((nd,), ("p",), axis_types=(AxisType.Auto,))
    key_a, key_b = jax.random.split(jax.random.key(0))
    out: dict[str, Any] = {"m": m, "k": k, "n": n, "mode": mode, "n_gpus": nd}
    with jax_tsm2.custom_call_mode(mode):
        f = jax.jit(jax_tsm2.matmul)
        a = _normal(key_a, (m, k), NamedSharding(mesh, P("p")))
        b = _normal(key_b, (k, n), NamedSharding(mesh, P()))
        hlo = f.lower(a, b).compile().as_text()
        out["multi_s"] = _time(partial(f, a, b), repeats)
        out["multi_has_all_gather"] = "all-gather" in hlo
        out["multi_custom_call"] = "tsm2_matmul" in hlo
        del a
        one = jax.sharding.SingleDeviceSharding(devs[0])
        a1 = _normal(key_a, (m // nd, k), one)
        b1 = jax.device_put(b, one)
        out["single_s"] = _time(partial(f, a1, b1), repeats)
        del a1
    t_multi, t_single = statistics.median(out["multi_s"]), statistics.median(out["single_s"])
    out["speedup"] = (m / t_multi) / ((m // nd) / t_single)  # throughput ratio
    out["target"] = 0.9 * nd
    out["passes"] = out["speedup"] >= out["target"]
    out["multi_gbs"] = 4 * (m * k + k * n + m * n) / t_multi / 1e9
    return out


def _kmeans_runner(x: jax.Array, init: jax.Array, max_iter: int, mesh: Any):
    key = jax.random.key(1)
    kk = init.shape[0]
    if mesh is None:
        f = jax.jit(lambda x, c: kmeans(key, x, kk, init=c, max_iter=max_iter, tol=0.0).n_iter)
    else:

        @jax.jit
        @partial(jax.shard_map, mesh=mesh, in_specs=(P("p"), P()), out_specs=P())
        def f(x, c):
            return kmeans(key, x, kk, init=c, max_iter=max_iter, tol=0.0, axis_name="p").n_iter

    return lambda: f(x, init)


def bench_kmeans(n: int, d: int, k: int, mode: str, repeats: int, iters: tuple[int, int]):
    devs = jax.devices()
    nd = len(devs)
    mesh = jax.make_mesh((nd,), ("p",), axis_types=(AxisType.Auto,))
    out: dict[str, Any] = {"n": n, "d": d, "k": k, "mode": mode, "n_gpus": nd, "iters": iters}
    key = jax.random.key(2)
    with jax_tsm2.custom_call_mode(mode):
        for label, sharding, m in (
            ("multi", NamedSharding(mesh, P("p")), mesh),
            ("single", jax.sharding.SingleDeviceSharding(devs[0]), None),
        ):
            x = _normal(key, (n, d), sharding)
            init = jax.device_put(x[:k], NamedSharding(mesh, P()) if m else sharding)
            per = {}
            for it in iters:
                run = _kmeans_runner(x, init, it, m)
                n_iter = int(run())
                per[it] = (statistics.median(_time(run, repeats, calls=1)), n_iter)
            (t0, i0), (t1, i1) = per[iters[0]], per[iters[1]]
            out[f"{label}_runs"] = {str(i): v for i, v in per.items()}
            out[f"{label}_per_iter_s"] = (t1 - t0) / max(i1 - i0, 1)
            del x
    out["ratio"] = out["multi_per_iter_s"] / out["single_per_iter_s"]
    out["target"] = 0.6 if nd == 2 else 1.2 / nd
    out["passes"] = out["ratio"] <= out["target"]
    return out


def main(argv: list[str] | None = None) -> int:
    """Runs both measurements and writes ``multi_gpu.json``.

    Example:
        python benchmarks/multi_gpu.py --out /tmp/out/multi_gpu --modes auto prefer
    """
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", required=True, type=Path, help="directory for multi_gpu.json")
    p.add_argument("--modes", nargs="+", default=["auto", "prefer"])
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    args = p.parse_args(argv)

    nd = jax.device_count()
    if nd < 2:
        print(f"multi_gpu: needs at least 2 devices, found {jax.devices()}", file=sys.stderr)
        return 2
    mm = (6144 * nd, 3072, 16) if args.quick else (61440, 30720, 16)
    km = (40_000 * nd, 256, 16) if args.quick else (4_000_000, 256, 16)
    iters = (3, 6) if args.quick else (5, 25)

    results: dict[str, Any] = {
        "devices": [str(d.device_kind) for d in jax.devices()],
        "jax": jax.__version__,
        "jax_tsm2": jax_tsm2.build_info(),
        "matmul": [],
        "kmeans": [],
    }
    rows = []
    for mode in args.modes:
        r = bench_matmul(*mm, mode, args.repeats)
        results["matmul"].append(r)
        rows.append(
            f"matmul {mm[0]}x{mm[1]}x{mm[2]} f32 [{mode}]: {nd} GPUs "
            f"{statistics.median(r['multi_s']) * 1e3:.2f} ms ({r['multi_gbs']:.0f} GB/s), "
            f"1 GPU x 1/{nd} rows {statistics.median(r['single_s']) * 1e3:.2f} ms -> "
            f"{r['speedup']:.2f}x throughput (target >= {r['target']:.1f}x: "
            f"{'PASS' if r['passes'] else 'FAIL'}; all-gather: {r['multi_has_all_gather']})"
        )
        print(rows[-1], flush=True)
    for mode in args.modes:
        r = bench_kmeans(*km, mode, max(3, args.repeats // 3), iters)
        results["kmeans"].append(r)
        rows.append(
            f"kmeans n={km[0]} d={km[1]} k={km[2]} [{mode}]: per iteration {nd} GPUs "
            f"{r['multi_per_iter_s'] * 1e3:.2f} ms, 1 GPU {r['single_per_iter_s'] * 1e3:.2f} ms "
            f"-> {r['ratio']:.2f}x (target <= {r['target']:.2f}: "
            f"{'PASS' if r['passes'] else 'FAIL'})"
        )
        print(rows[-1], flush=True)

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "multi_gpu.json").write_text(json.dumps(results, indent=2, default=str))
    print("\n".join(["", f"devices: {results['devices']}", *rows]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

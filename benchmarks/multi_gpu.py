"""Scaling over GPUs: sharded products and sharded k-means, strong and weak, f32 and bf16.

Workloads (the sizes are the full problem of 8 devices; ``--quick`` shrinks them):

- ``row``: A (245760 x 30720) with its rows sharded times a replicated B
  (30720 x 16): each device multiplies its rows, with no communication. Each
  compiled program is searched for collectives: an all-gather there would copy
  A to every device.
- ``contraction``: A (30720 x 245760) and B (245760 x 16) both sharded along
  the contraction: each device multiplies its blocks, then one all-reduce sums
  the 30720 x 16 results.
- ``kmeans``: ``jax_tsm2.kmeans`` (n = 1.6e7 points, d = 256, k = 16) with the
  points sharded (``axis_name`` under ``shard_map``). The time of an iteration
  is the difference between a long and a short run over the difference in
  iterations, so the set-up and the final assignment cancel out.

Strong scaling runs the full problem on every device count; weak scaling gives
each device an eighth of it (30720 rows of A, 30720 of the contraction, 2e6
points), so that 8 devices hold the full problem. The one-device run of each
series (one device, no sharding) is its baseline: the report gives speedup and
efficiency against it (``scaling_report.py``).

k-means equality (on unless ``--no-check``; nothing else with ``--check-only``):
on data with separated clusters, k-means on N devices must give one device's
centroids, inertia and labels, from the same initial centroids, to
floating-point tolerance. (The timing data have no clusters; there Lloyd's
iterations amplify rounding, as a point on a boundary changes cluster, and
after tens of iterations centroids differ by percents.)

One process with all its devices (1, 2, 4 and 8 of them, those present, or ``--gpus``)::

    python benchmarks/multi_gpu.py --out DIR --time-budget 240

One process per GPU: every workload on all the processes' devices, the
one-device baselines and the equality check's reference on process 0's GPU::

    python -m jax_tsm2.launch --nproc 4 -- python benchmarks/multi_gpu.py --out DIR

Timing: each product is compiled and run once, then ``--repeats`` samples of
10 calls queued back to back and synced once; the median sample is the time. With
several processes, each times its own calls and the slowest process's median
counts. Data are generated on the devices. Files, rewritten after every case so
that a run cut short keeps what it measured: ``scaling.json`` (provenance, every
raw sample, the summary), ``scaling.md`` (the tables) and ``scaling.png`` (the
plot, when matplotlib is installed) in ``--out``; ``scaling-processes.*`` when
launched one process per device. ``--time-budget`` skips what would not finish.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import re
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import scaling_report
from jax.experimental import multihost_utils
from jax.sharding import AxisType, Mesh, NamedSharding, SingleDeviceSharding
from jax.sharding import PartitionSpec as P

import jax_tsm2
import jax_tsm2.launch
from jax_tsm2 import _cli
from jax_tsm2.bench import env as bench_env
from jax_tsm2.clustering import KMeansState, kmeans

DTYPES = {"f32": jnp.float32, "bf16": jnp.bfloat16}
WORKLOADS = ("row", "contraction", "kmeans")
SCALINGS = ("strong", "weak")
MODES = ("auto", "prefer", "always", "never")

# The full problem is 8 devices' worth; weak scaling gives each device an eighth of it.
FULL_DEVICES = 8
SIZES = {
    "full": {
        "row": (245_760, 30_720, 16),
        "contraction": (30_720, 245_760, 16),
        "kmeans": (16_000_000, 256, 16),
    },
    "quick": {"row": (8_192, 512, 16), "contraction": (512, 8_192, 16), "kmeans": (80_000, 32, 8)},
}
SPLIT_DIM = {"row": 0, "contraction": 1, "kmeans": 0}  # the dimension over the devices
KMEANS_ITERS = {"full": (5, 25), "quick": (2, 8)}
CHECK_RTOL = 1e-4  # f32 accumulation for every dtype; a summation order's worth is ~1e-6

# Steps in the order they run: the targets' series first, so a short budget still
# measures them (row weak f32, k-means strong f32), then the rest.
ORDER = (
    ("row", "weak"),
    ("kmeans", "strong"),
    ("kmeans", "check"),
    ("contraction", "weak"),
    ("row", "strong"),
    ("kmeans", "weak"),
    ("contraction", "strong"),
)
_COLLECTIVE = re.compile(
    r"=\s*(.*?)\s(all-gather|all-reduce|reduce-scatter|all-to-all|collective-permute)"
    r"(?:-start)?\("
)


# ---------------------------------------------------------------- measuring


def _time(fn: Callable[[], Any], repeats: int, calls: int) -> tuple[list[float], Any]:
    """Seconds per call (``calls`` queued, one sync) in ``repeats`` samples, and the
    warm-up call's result.

    Timing one call at a time would add the host's dispatch and sync to each (about
    0.3 ms for a 2-device program); queued calls overlap dispatch with the devices'
    work, as in a training loop.
    """
    first = jax.block_until_ready(fn())  # compile + warm up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = [fn() for _ in range(calls)]
        jax.block_until_ready(out)
        times.append((time.perf_counter() - t0) / calls)
        del out
    return times, first


def _slowest(value: float, shared: bool) -> float:
    """The largest ``value`` over the processes of a program they all ran."""
    if not shared or jax.process_count() == 1:
        return value
    return float(np.max(multihost_utils.process_allgather(np.float64(value))))


def _scalar(x: jax.Array) -> float:
    """A replicated scalar as a Python number (on any process)."""
    return np.asarray(x.addressable_data(0)).item()


def collectives(hlo: str) -> tuple[dict[str, int], list[str]]:
    """Collective operations in a compiled module's text by kind, and the result shapes
    of its all-gathers.

    Example:
        >>> counts, shapes = collectives("%g = f32[8,4]{1,0} all-gather(f32[2,4]{1,0} %p)")
        >>> counts["all-gather"], counts["all-reduce"], shapes
        (1, 0, ['f32[8,4]{1,0}'])
    """
    ops = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")
    counts = dict.fromkeys(ops, 0)
    gathers = []
    for m in _COLLECTIVE.finditer(hlo):
        counts[m.group(2)] += 1
        if m.group(2) == "all-gather":
            gathers.append(m.group(1))
    return counts, gathers


def _sharding(devices: list, spec: P) -> Any:
    if len(devices) == 1:
        return SingleDeviceSharding(devices[0])
    mesh = Mesh(np.array(devices), ("p",), axis_types=(AxisType.Auto,))
    return NamedSharding(mesh, spec)


def _normal(key: jax.Array, shape: tuple[int, ...], dtype: Any, sharding: Any) -> jax.Array:
    # Generated where it lives; jax's partitionable threefry makes the values independent
    # of the sharding, so every device count sees the same data.
    return jax.jit(lambda k: jax.random.normal(k, shape, dtype), out_shardings=sharding)(key)


def _blobs(key: jax.Array, n: int, d: int, k: int, dtype: Any, sharding: Any) -> jax.Array:
    """Point ``i`` drawn around centre ``i % k`` (so the first ``k`` points hold one of each
    cluster); centres 3 apart per coordinate, unit noise: clusters far apart in d = 256."""
    kc, kx = jax.random.split(key)

    def gen():
        centres = 3.0 * jax.random.normal(kc, (k, d), jnp.float32)
        noise = jax.random.normal(kx, (n, d), jnp.float32)
        return (centres[jnp.arange(n) % k] + noise).astype(dtype)

    return jax.jit(gen, out_shardings=sharding)()


def _describe(shape: tuple[int, ...], split: int, nd: int) -> str:
    local = list(shape)
    local[split] //= nd
    return " x ".join(str(s) for s in local)


def product_case(
    workload: str, dtype: str, mode: str, devices: list, size: tuple[int, int, int], opts: Any
) -> dict[str, Any]:
    """Times ``matmul`` of A (m x k) and B (k x n), sharded as ``workload`` says."""
    m, k, n = size
    nd = len(devices)
    if workload == "row":
        a_spec, b_spec = P("p", None), P()
    else:
        a_spec, b_spec = P(None, "p"), P("p", None)
    key_a, key_b = jax.random.split(jax.random.key(0))
    a = _normal(key_a, (m, k), DTYPES[dtype], _sharding(devices, a_spec))
    b = _normal(key_b, (k, n), DTYPES[dtype], _sharding(devices, b_spec))
    with jax_tsm2.custom_call_mode(mode):
        f = jax.jit(jax_tsm2.matmul)
        hlo = f.lower(a, b).compile().as_text()
        samples, _ = _time(partial(f, a, b), opts.repeats, opts.calls)
    t = _slowest(statistics.median(samples), shared=nd > 1)
    counts, gathers = collectives(hlo)
    a_bytes = m * k * a.dtype.itemsize
    rec = {
        "a_shape": [m, k],
        "b_shape": [k, n],
        "problem": f"{m} x {k} @ {k} x {n}",
        "per_device": _describe((m, k), SPLIT_DIM[workload], nd),
        "samples_s": samples,
        "time_s": t,
        "a_gb_per_s": a_bytes / t / 1e9,
        "collectives": counts,
        "all_gather_shapes": gathers,
        "custom_call": 'custom_call_target="tsm2_matmul"' in hlo,
    }
    if workload == "row":
        rec["rows_per_s"] = m / t
        rec["throughput"] = f"{m / t / 1e6:.1f} M rows/s, A at {a_bytes / t / 1e9:.0f} GB/s"
        # What the row product must not do: gather A (or any piece of it) onto a device.
        rec["a_gathered"] = counts["all-gather"] > 0
        rec["communication_ok"] = nd == 1 or sum(counts.values()) == 0
    else:
        rec["throughput"] = f"A at {a_bytes / t / 1e9:.0f} GB/s"
        rec["communication_ok"] = nd == 1 or (
            counts["all-reduce"] == 1 and sum(counts.values()) == 1
        )
    return rec


def _kmeans_fn(k: int, max_iter: int, devices: list, full_state: bool) -> Callable:
    """jit(kmeans) from given initial centroids, unsharded on one device, else under
    shard_map with the points over the devices."""
    key = jax.random.key(1)
    tol = 0.0  # stop only when no label changes

    def pick(s: KMeansState) -> Any:
        return s if full_state else s.n_iter

    if len(devices) == 1:
        return jax.jit(lambda x, c: pick(kmeans(key, x, k, init=c, max_iter=max_iter, tol=tol)))
    mesh = Mesh(np.array(devices), ("p",), axis_types=(AxisType.Auto,))
    specs = KMeansState(P(), P("p"), P(), P(), P(), P())

    @jax.jit
    @partial(
        jax.shard_map,
        mesh=mesh,
        in_specs=(P("p"), P()),
        out_specs=specs if full_state else P(),
    )
    def f(x, c):
        return pick(kmeans(key, x, k, init=c, max_iter=max_iter, tol=tol, axis_name="p"))

    return f


def _first_rows(x: jax.Array, k: int, devices: list) -> jax.Array:
    return jax.jit(lambda x: x[:k], out_shardings=_sharding(devices, P()))(x)


def kmeans_case(dtype: str, mode: str, devices: list, size: tuple[int, int, int], opts: Any):
    """Per-iteration time of k-means on random normal points (no clusters, so the
    iterations do not stop early), from the first k points as initial centroids."""
    n, d, k = size
    nd = len(devices)
    x = _normal(jax.random.key(2), (n, d), DTYPES[dtype], _sharding(devices, P("p", None)))
    init = _first_rows(x, k, devices)
    runs = {}
    with jax_tsm2.custom_call_mode(mode):
        for it in opts.iters:
            f = _kmeans_fn(k, it, devices, full_state=False)
            samples, n_iter = _time(partial(f, x, init), opts.kmeans_repeats, 1)
            t = _slowest(statistics.median(samples), shared=nd > 1)
            runs[str(it)] = {
                "max_iter": it,
                "n_iter": int(_scalar(n_iter)),
                "samples_s": samples,
                "time_s": t,
            }
    (short, long_) = (runs[str(i)] for i in opts.iters)
    if long_["n_iter"] <= short["n_iter"]:
        raise RuntimeError(f"k-means stopped early: {short['n_iter']} and {long_['n_iter']} iters")
    per_iter = (long_["time_s"] - short["time_s"]) / (long_["n_iter"] - short["n_iter"])
    return {
        "problem": f"n={n} d={d} k={k}",
        "per_device": f"{n // nd} x {d}",
        "runs": runs,
        "per_iter_s": per_iter,
        "points_per_s": n / per_iter,
        "throughput": f"{n / per_iter / 1e6:.0f} M points/s",
    }


def kmeans_to_convergence(dtype: str, devices: list, size: tuple[int, int, int]) -> dict:
    """k-means on separated clusters from one point of each: centroids, inertia, iterations
    and every label (NumPy, on every process)."""
    n, d, k = size
    x = _blobs(jax.random.key(3), n, d, k, DTYPES[dtype], _sharding(devices, P("p", None)))
    init = _first_rows(x, k, devices)
    s = _kmeans_fn(k, 50, devices, full_state=True)(x, init)
    if len(devices) > 1 and jax.process_count() > 1:
        labels = np.asarray(multihost_utils.process_allgather(s.labels, tiled=True))
    else:
        labels = np.asarray(s.labels)
    return {
        "centroids": np.asarray(s.centroids.addressable_data(0), np.float64),
        "inertia": float(_scalar(s.inertia)),
        "n_iter": int(_scalar(s.n_iter)),
        "labels": labels,
    }


def compare(got: dict, ref: dict) -> dict[str, Any]:
    """How far ``got`` is from ``ref`` (both from ``kmeans_to_convergence``)."""
    scale = max(float(np.max(np.abs(ref["centroids"]))), 1e-30)
    c_diff = float(np.max(np.abs(got["centroids"] - ref["centroids"]))) / scale
    i_diff = abs(got["inertia"] - ref["inertia"]) / max(abs(ref["inertia"]), 1e-30)
    differ = int(np.sum(got["labels"] != ref["labels"]))
    return {
        "inertia": got["inertia"],
        "inertia_one": ref["inertia"],
        "n_iter": got["n_iter"],
        "n_iter_one": ref["n_iter"],
        "centroids_rel_diff": c_diff,
        "inertia_rel_diff": i_diff,
        "labels_differ": differ,
        "rtol": CHECK_RTOL,
        "passes": bool(
            c_diff <= CHECK_RTOL
            and i_diff <= CHECK_RTOL
            and differ == 0
            and got["n_iter"] == ref["n_iter"]
        ),
    }


# ---------------------------------------------------------------- running and writing


def provenance(argv: list[str]) -> dict[str, Any]:
    kinds = collections.Counter(str(d.device_kind) for d in jax.devices())
    commit, dirty = bench_env.git_commit(str(Path(__file__).resolve().parent))
    env_names = (
        "NCCL_NVLS_ENABLE",
        "NVSHMEM_DISABLE_NVLS",
        "XLA_PYTHON_CLIENT_PREALLOCATE",
        "XLA_FLAGS",
        "JAX_PLATFORMS",
    )
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(["python", "benchmarks/multi_gpu.py", *argv]),
        "launcher": os.environ.get(jax_tsm2.launch.ENV_COMMAND),
        "commit": commit,
        "dirty": dirty,
        "devices": [str(d.device_kind) for d in jax.devices()],
        "device_summary": ", ".join(f"{n} x {kind}" for kind, n in kinds.items()),
        "processes": jax.process_count(),
        "platform": jax.devices()[0].platform,
        "versions": bench_env.versions(None),
        "build": bench_env.build_info(),
        "env": {k: os.environ[k] for k in env_names if k in os.environ},
    }


class Run:
    """The steps of a run: the time budget, the records, the files after every step."""

    def __init__(self, opts: Any, doc: dict[str, Any], stem: Path):
        self.opts, self.doc, self.stem = opts, doc, stem
        self.start = time.monotonic()
        self.longest: dict[str, float] = {}
        self.writer = jax.process_index() == 0

    def _go(self, workload: str, ready: bool) -> bool:
        """Whether the next step fits the budget (process 0 decides for all)."""
        go = ready
        if self.opts.time_budget is not None:
            left = self.opts.time_budget - (time.monotonic() - self.start)
            go = go and left >= self.longest.get(workload, self.opts.first_step_s) + 10
        if jax.process_count() > 1:
            go = bool(multihost_utils.broadcast_one_to_all(np.int32(go)))
        return go

    def step(
        self,
        label: str,
        workload: str,
        fn: Callable[[], dict[str, Any] | None],
        *,
        fields: dict[str, Any],
        everyone: bool = True,
        ready: bool = True,
    ) -> dict[str, Any] | None:
        """Runs ``fn`` (on every process, or on process 0 only) unless the budget is spent;
        records its result with ``fields``."""
        if not self._go(workload, ready):
            why = "time budget spent" if ready else "its reference was not measured"
            self._record({"label": label, **fields, "skipped": why})
            return None
        if not everyone and jax.process_index() != 0:
            return None
        t0 = time.monotonic()
        try:
            rec = fn()
        except Exception as err:
            if jax.process_count() > 1:
                self.write()
                raise  # the launcher stops the other processes
            rec = {"error": f"{type(err).__name__}: {err}"[:2000]}
        wall = time.monotonic() - t0
        self.longest[workload] = max(self.longest.get(workload, 0.0), wall)
        if rec is None:
            return None
        rec = {"label": label, **fields, **rec, "wall_s": wall}
        self._record(rec)
        return rec

    def _record(self, rec: dict[str, Any]) -> None:
        self.doc["records"].append(rec)
        if self.writer:
            print(_line(rec), flush=True)
        self.write()

    def write(self, plot: bool = False) -> None:
        if not self.writer:
            return
        self.doc["summary"] = scaling_report.summarize(self.doc["records"])
        self.doc["elapsed_s"] = time.monotonic() - self.start
        self.stem.with_suffix(".json").write_text(json.dumps(self.doc, indent=1, default=str))
        self.stem.with_suffix(".md").write_text(scaling_report.markdown(self.doc))
        if plot:
            scaling_report.plot(self.doc, self.stem.with_suffix(".png"))


def _line(rec: dict[str, Any]) -> str:
    head = f"{rec['label']}:"
    if rec.get("skipped") or rec.get("error"):
        return f"{head} not measured ({rec.get('skipped') or rec.get('error')})"
    if rec.get("kind") == "check":
        return (
            f"{head} centroids {rec['centroids_rel_diff']:.1e}, inertia "
            f"{rec['inertia_rel_diff']:.1e}, {rec['labels_differ']} labels differ, "
            f"{rec['n_iter']} iterations -> {'PASS' if rec['passes'] else 'FAIL'}"
        )
    t = rec.get("per_iter_s") if rec["bench"] == "kmeans" else rec.get("time_s")
    what = "per iteration" if rec["bench"] == "kmeans" else "per product"
    extra = ""
    if rec.get("collectives") is not None:
        extra = f", collectives: {scaling_report.collectives_text(rec['collectives'])}"
    return f"{head} {t * 1e3:.3f} ms {what}, {rec['throughput']}{extra} [{rec['wall_s']:.1f} s]"


def _sizes(opts: Any, workload: str, scaling: str, nd: int, multiple: int) -> tuple[int, ...]:
    """The problem on ``nd`` devices: the full one (strong; its split dimension a multiple
    of every device count in the run) or an eighth of it per device (weak)."""
    size = list(SIZES["quick" if opts.quick else "full"][workload])
    dim = SPLIT_DIM[workload]
    if scaling == "weak":
        size[dim] = size[dim] // FULL_DEVICES * nd
    else:
        size[dim] = size[dim] // multiple * multiple
    return tuple(size)


def _check_steps(run: Run, dtype: str, size: tuple[int, ...], one: list, counts: list[int]):
    """The k-means equality check: the reference on one device (process 0), then each
    device count against it."""
    ref: dict[str, Any] = {}

    def reference():
        ref.update(kmeans_to_convergence(dtype, one, size))

    run.step(
        f"kmeans check {dtype}: reference on 1 device",
        "kmeans",
        reference,
        fields={},
        everyone=False,
    )
    for nd in counts[1:]:

        def check(nd=nd):
            got = kmeans_to_convergence(dtype, jax.devices()[:nd], size)
            return compare(got, ref) if jax.process_index() == 0 else None

        fields = {
            "kind": "check",
            "bench": "kmeans",
            "dtype": dtype,
            "n_devices": nd,
            "processes": jax.process_count(),
            "problem": f"n={size[0]} d={size[1]} k={size[2]}",
        }
        ready = bool(ref) or jax.process_index() != 0  # process 0's answer counts
        run.step(
            f"kmeans check {dtype} on {nd} devices", "kmeans", check, fields=fields, ready=ready
        )


def run_all(opts: Any, run: Run, counts: list[int]) -> None:
    """Every requested step, in ``ORDER``, for each dtype and mode; ``counts`` starts at 1."""
    launched = jax.process_count() > 1
    one = [jax.local_devices(process_index=0)[0]] if launched else jax.devices()[:1]
    multiple = math.lcm(*counts)
    for dtype in opts.dtypes:
        for workload, scaling in ORDER:
            if workload not in opts.benchmarks:
                continue
            if scaling == "check":
                if opts.check:
                    size = _sizes(opts, "kmeans", "strong", 1, multiple)
                    _check_steps(run, dtype, size, one, counts)
                continue
            if scaling not in opts.scaling or opts.check_only:
                continue
            for mode, nd in ((mode, nd) for mode in opts.modes for nd in counts):
                size = _sizes(opts, workload, scaling, nd, multiple)
                devs = one if nd == 1 else jax.devices()[:nd]
                if workload == "kmeans":
                    fn = partial(kmeans_case, dtype, mode, devs, size, opts)
                else:
                    fn = partial(product_case, workload, dtype, mode, devs, size, opts)
                fields = {
                    "kind": "time",
                    "bench": workload,
                    "scaling": scaling,
                    "dtype": dtype,
                    "mode": mode,
                    "n_devices": nd,
                    "processes": jax.process_count() if nd > 1 else 1,
                }
                label = f"{workload} {scaling} {dtype} [{mode}] on {nd} device(s)"
                # One process per device: process 0 alone runs the one-device baseline.
                run.step(label, workload, fn, fields=fields, everyone=nd > 1 or not launched)


def _device_counts(requested: list[int] | None, available: int) -> list[int]:
    """1 first (the baseline), then the largest, then the rest from large to small.

    Example:
        >>> _device_counts(None, 4), _device_counts([2, 8], 8), _device_counts(None, 6)
        ([1, 4, 2], [1, 8, 2], [1, 6, 4, 2])
    """
    if requested is None:
        requested = sorted({n for n in (1, 2, 4, 8) if n <= available} | {available})
    rest = sorted({n for n in requested if n > 1}, reverse=True)
    return [1, *rest]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python benchmarks/multi_gpu.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", required=True, type=_cli.directory, help="directory for the files")
    p.add_argument(
        "--gpus",
        type=_cli.comma_list(_cli.positive_int, "comma-separated device counts"),
        help="device counts, e.g. 1,2,4 (default: 1, 2, 4, 8 up to those present, and all); "
        "one process per device runs on all its processes' devices and 1",
    )
    p.add_argument(
        "--benchmarks",
        type=_cli.comma_list(_cli.one_of(WORKLOADS, "workload"), "comma-separated workloads"),
        default=list(WORKLOADS),
        help="row, contraction, kmeans (default: all)",
    )
    p.add_argument(
        "--scaling",
        type=_cli.comma_list(_cli.one_of(SCALINGS, "scaling"), "strong and/or weak"),
        default=list(SCALINGS),
    )
    p.add_argument(
        "--dtypes",
        type=_cli.comma_list(_cli.one_of(tuple(DTYPES), "dtype"), "comma-separated dtypes"),
        default=list(DTYPES),
        help="f32, bf16 (default: both)",
    )
    p.add_argument(
        "--modes",
        type=_cli.comma_list(_cli.one_of(MODES, "custom-call mode"), "comma-separated modes"),
        default=["auto"],
        help="jax_tsm2 custom-call modes (default: auto, what a user gets)",
    )
    p.add_argument("--repeats", type=_cli.positive_int, default=10, help="samples per product")
    check = p.add_mutually_exclusive_group()
    check.add_argument(
        "--no-check", dest="check", action="store_false", help="skip the k-means equality check"
    )
    check.add_argument(
        "--check-only", action="store_true", help="only the k-means equality check (no timing)"
    )
    p.add_argument(
        "--time-budget",
        type=_cli.positive_float,
        help="seconds: a case that would not finish in what is left is skipped",
    )
    p.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Runs the steps and writes the files; returns the exit status (1 when a k-means
    equality check failed, 2 for bad arguments).

    Example:
        python benchmarks/multi_gpu.py --out /tmp/scaling --gpus 1,2,4 --time-budget 240
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    p = parser()
    opts = p.parse_args(argv)
    # NVLink multicast off here too, before jax starts NCCL (docs/sharding.md says why).
    os.environ.update(jax_tsm2.launch.NO_MULTICAST)
    launched = jax_tsm2.launch.initialize()
    available = jax.device_count()
    if launched and opts.gpus:
        p.error("--gpus: one process per device runs on all their devices (and on 1)")
    if opts.gpus and max(opts.gpus) > available:
        p.error(f"--gpus {max(opts.gpus)}: only {available} devices here ({jax.devices()})")
    # One process per device: all of them, or one (the baseline, on process 0's device).
    counts = _device_counts([available] if launched else opts.gpus, available)
    opts.repeats, opts.calls = (min(opts.repeats, 3), 2) if opts.quick else (opts.repeats, 10)
    opts.kmeans_repeats = 2 if opts.quick else 3
    opts.iters = KMEANS_ITERS["quick" if opts.quick else "full"]
    opts.first_step_s = 5.0 if opts.quick else 30.0  # before a workload's first step is timed

    stem = opts.out / ("scaling-processes" if launched else "scaling")
    if jax.process_index() == 0:
        opts.out.mkdir(parents=True, exist_ok=True)
    doc = {
        "title": "Scaling over devices"
        + (f", one process per device ({jax.process_count()})" if launched else ", one process"),
        "provenance": provenance(argv),
        "device_counts": counts,
        "sizes": SIZES["quick" if opts.quick else "full"],
        "full_problem_devices": FULL_DEVICES,
        "records": [],
    }
    run = Run(opts, doc, stem)
    if run.writer:
        print(
            f"devices: {doc['provenance']['device_summary']}; processes {jax.process_count()}; "
            f"device counts {counts}",
            flush=True,
        )
    try:
        run_all(opts, run, counts)
    finally:
        run.write(plot=True)
    if run.writer:
        print(f"\nwrote {stem}.json, .md and .png\n", flush=True)
        print(scaling_report.brief(doc), flush=True)
    if launched:
        jax.distributed.shutdown()
    # A failed equality check is a wrong result, not a slow one: the run fails.
    checks = [r for r in doc["records"] if r.get("kind") == "check"]
    failed = [r["label"] for r in checks if r.get("error") or r.get("passes") is False]
    if failed and run.writer:
        print(f"k-means equality FAILED: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

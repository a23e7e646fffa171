"""One Lloyd iteration of jax_tsm2 against flash-kmeans and plain JAX, over a grid of shapes.

For each point (n, d, k) of the grid (f32 data; default: k in {8, 16, 64, 256, 1024, 4096,
16384}, d in {64, 128, 256, 1024}, n in {1e6, 1e7}, cheapest first), in one process, on the
same data and the same initial centroids:

* ``jax_tsm2`` (f32-accurate distances) and ``jax_tsm2_tf32`` (``precision=
  "tensorfloat32"``): the iteration ``jax_tsm2.kmeans`` runs (a kernel step, the centroid
  update with the empty-cluster rule), ``m`` of them in a ``lax.fori_loop``;
* ``flash_kmeans``: flash-kmeans' own Euclidean iteration (``_euclid_iter``: Triton
  assignment in TF32, a sort, the sorted centroid update), ``m`` calls from Python with no
  host synchronisation between them (its ``batch_kmeans_Euclid`` synchronises on the
  centroid shift every iteration; this leaves that out, in its favour);
* ``plain_jax``: the iteration as a JAX user writes it (``jnp.dot`` at highest precision,
  ``argmin``, ``segment_sum``), where its ``n x k`` distances fit in memory.

Per-iteration time is the difference of two run lengths, ``(t(m2) - t(m1)) / (m2 - m1)``,
each ``t`` the median of ``--repeats`` timed runs (host clock around a synchronised run),
the implementations taking turns; setup (``||x||^2``, dispatch, compile: warmed before)
cancels. Beside each time: reads of X per iteration (time over one read of X at the read
ceiling ``tsm2_stream_read`` measured at the start), and the final inertia of the ``m2``
run's centroids, all evaluated alike (jax_tsm2's f32-accurate assignment, distances summed
in f64), relative to that of a float64 reference run (plain Lloyd in f64 over row chunks,
empty clusters keep their centroid as flash-kmeans does) from the same centroids for the
same ``m2`` iterations, where that reference costs at most ``--ref-budget`` seconds.

Points or implementations that do not fit in memory are skipped and say so; so are points
the ``--time-budget`` cannot cover (a crude cost model orders and gates them). JSON and a
markdown table are rewritten after every point, so an interrupted run keeps what it has.

Usage (GPU machine; ``pip install --no-deps flash_kmeans-*.whl`` for flash-kmeans)::

    python benchmarks/kmeans_vs_flash.py --out benchmarks/results/h200/kmeans_vs_flash \\
        [--points 1e6,256,16 ...] [--time-budget 420] [--repeats 3] \\
        [--methods jax_tsm2 flash_kmeans ...]
"""

from __future__ import annotations

import os

# Before jax: allocate as needed (torch shares the GPU), f64 for the reference.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import argparse
import importlib.metadata
import itertools
import json
import math
import statistics
import time
from pathlib import Path
from typing import Any

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

import jax_tsm2  # noqa: E402
from jax_tsm2 import _cli, _ffi  # noqa: E402
from jax_tsm2.bench.ceilings import measure_bandwidth  # noqa: E402
from jax_tsm2.clustering import core, tiled  # noqa: E402

GRID_K = (8, 16, 64, 256, 1024, 4096, 16384)
GRID_D = (64, 128, 256, 1024)
GRID_N = (10**6, 10**7)
METHODS = ("jax_tsm2", "jax_tsm2_tf32", "flash_kmeans", "plain_jax")
F32 = jnp.float32


def _point(text: str) -> tuple[int, int, int]:
    """``N,D,K`` with N as ``1e6`` or ``1000000``."""
    try:
        parts = [_cli.integer(p) for p in text.split(",")]
    except ValueError:
        parts = []
    if len(parts) != 3 or min(parts) < 1:
        raise argparse.ArgumentTypeError(f"expected N,D,K (three integers >= 1), got {text!r}")
    return parts[0], parts[1], parts[2]


# ------------------------------------------------------------------ data and methods


def _divisor_at_most(n: int, most: int) -> int:
    """The largest divisor of n that is at most ``most`` (1 at worst)."""
    return next(c for c in range(min(n, most), 0, -1) if n % c == 0)


def make_data(n: int, d: int, k: int, seed: int = 0) -> tuple[jax.Array, jax.Array]:
    """Blobs around k centres, f32 on the device, and the initial centroids: the first k
    points, one in each blob (so clusters stay filled and the iterations time Lloyd's steps,
    not the empty-cluster rule). Made a block of rows at a time (``lax.map``), so that the
    device holds X and one block, not X three times over."""
    most = max(1, (1 << 28) // (4 * d))
    rows = _divisor_at_most(n, most)
    if rows < most // 64:  # n with no divisor near a block: one block
        rows = n

    @jax.jit
    def gen(key):
        kc, kb = jax.random.split(key)
        centres = 4.0 * jax.random.normal(kc, (k, d), F32)

        def block(i):
            kl, kn = jax.random.split(jax.random.fold_in(kb, i))
            row = i * rows + jnp.arange(rows)
            # Point i < k belongs to blob i: x[:k] starts one centroid in each blob.
            lab = jnp.where(row < k, row % k, jax.random.randint(kl, (rows,), 0, k))
            return centres[lab] + jax.random.normal(kn, (rows, d), F32)

        return lax.map(block, jnp.arange(n // rows)).reshape(n, d)

    x = gen(jax.random.key(seed))
    return x, x[:k]


def _ours(precision: str):
    def iteration(x, x_sq, w, c):
        return core._iteration(x, x_sq, w, c, c.shape[0], None, "auto", precision)[3]

    return iteration


def _plain(x, x_sq, w, c):
    """Lloyd's iteration with jnp.dot, argmin and segment_sum (empty clusters keep theirs)."""
    k = c.shape[0]
    dist = x_sq[:, None] - 2 * jnp.dot(x, c.T, precision="highest") + jnp.sum(c * c, 1)[None]
    labels = jnp.argmin(dist, 1)
    sums = jax.ops.segment_sum(w[:, None] * x, labels, k)
    counts = jax.ops.segment_sum(w, labels, k)
    return jnp.where((counts > 0)[:, None], sums / jnp.where(counts > 0, counts, 1)[:, None], c)


def jax_runner(iteration):
    """A runner of m iterations from c0 in one jitted call; m is an operand (a while loop),
    so both run lengths share one compile."""

    @jax.jit
    def run(x, x_sq, w, c0, m):
        return lax.fori_loop(0, m, lambda _, c: iteration(x, x_sq, w, c), c0)

    return lambda m: lambda ops: jax.block_until_ready(run(*ops, jnp.int32(m)))


class Flash:
    """flash-kmeans on the same device buffers (DLPack), its iteration called m times."""

    def __init__(self) -> None:
        import torch
        from flash_kmeans.kmeans_triton_impl import _euclid_iter

        self.torch, self.iter = torch, _euclid_iter
        self.version = importlib.metadata.version("flash-kmeans")

    def operands(self, x: jax.Array, x_sq: jax.Array, c0: jax.Array):
        t = self.torch
        xt = t.from_dlpack(x).unsqueeze(0)  # (1, n, d), no copy
        xsq = t.from_dlpack(x_sq).unsqueeze(0)  # the same ||x||^2 as ours
        return xt, xsq, t.from_dlpack(c0).unsqueeze(0).clone()

    def runner(self, m: int):
        def run(ops):
            xt, xsq, c = ops
            self.torch.cuda.synchronize()
            for _ in range(m):
                c, _, _ = self.iter(xt, xsq, c)
            self.torch.cuda.synchronize()
            return c[0]

        return run


# ------------------------------------------------------------------ accuracy


@jax.jit
def _eval_inertia(x, x_sq, c):
    _, mind = tiled.ffi_assign(x, x_sq, c.astype(F32))
    return jnp.sum(mind.astype(jnp.float64))


def final_inertia(x, x_sq, c) -> float:
    """The inertia of x against c (a JAX array or a torch tensor), every method's centroids
    evaluated alike."""
    c = c if isinstance(c, jax.Array) else jnp.from_dlpack(c.contiguous())
    return float(_eval_inertia(x, x_sq, c))


def f64_reference(x, c0, m: int, chunk: int):
    """m Lloyd iterations in float64 over row chunks from c0 (empty clusters keep theirs)."""
    n, d = x.shape
    k = c0.shape[0]
    # A chunk that divides n reshapes X without a copy; padding copies it (41 GB at 1e7 x 1024).
    fits = next((c for c in range(chunk, max(chunk // 8, 1) - 1, -1) if n % c == 0), None)
    chunk = fits or chunk
    pad = (-n) % chunk
    xs = (jnp.pad(x, ((0, pad), (0, 0))) if pad else x).reshape(-1, chunk, d)
    valid = (jnp.arange(n + pad) < n).reshape(-1, chunk)

    @jax.jit
    def one(xs, valid, c):
        c_sq = jnp.sum(c * c, 1)

        def body(carry, inp):
            sums, counts = carry
            xb, vb = inp
            xb = xb.astype(jnp.float64)
            dist = jnp.sum(xb * xb, 1)[:, None] - 2 * jnp.dot(xb, c.T, precision="highest")
            lab = jnp.argmin(dist + c_sq[None], 1)
            wb = vb.astype(jnp.float64)
            sums = sums + jax.ops.segment_sum(wb[:, None] * xb, lab, k)
            return (sums, counts + jax.ops.segment_sum(wb, lab, k)), None

        zero = (jnp.zeros((k, d), jnp.float64), jnp.zeros((k,), jnp.float64))
        (sums, counts), _ = lax.scan(body, zero, (xs, valid))
        safe = jnp.where(counts > 0, counts, 1)
        return jnp.where((counts > 0)[:, None], sums / safe[:, None], c), jnp.min(counts)

    c = c0.astype(jnp.float64)
    smallest = None
    for _ in range(m):
        c, low = one(xs, valid, c)
        smallest = float(low) if smallest is None else min(smallest, float(low))
    return c, smallest


# ------------------------------------------------------------------ cost and memory


def methods_for(n: int, d: int, k: int) -> tuple[str, ...]:
    """The methods a point can hold in memory (an H200's 141 GB: plain JAX's n x k
    distances up to ~40 GB)."""
    return tuple(m for m in METHODS if m != "plain_jax" or 4 * n * k <= 40e9)


def run_lengths(n: int, d: int, k: int, read_bps: float) -> tuple[int, int]:
    """m1 = 1, and m2 such that the difference spans ~0.1 s of the slowest method."""
    slowest = max(est_iter_seconds(m, n, d, k, read_bps) for m in methods_for(n, d, k))
    return 1, 1 + int(min(16, max(2, math.ceil(0.1 / slowest))))


def est_point_seconds(pt: tuple[int, int, int], read_bps: float, args) -> float:
    """Generation and compiles, then warm, timed and final runs of each method, and the
    reference: what a point costs, roughly."""
    m1, m2 = run_lengths(*pt, read_bps)
    runs = (args.repeats + 1) * (m1 + m2) + m2
    each = sum(est_iter_seconds(m, *pt, read_bps) for m in methods_for(*pt) if m in args.methods)
    ref = ref_seconds(*pt, m2)
    return 15.0 + runs * each + (ref if ref <= args.ref_budget else 0.0)


def ref_seconds(n: int, d: int, k: int, m: int) -> float:
    """The float64 reference's m iterations at ~50 TFLOP/s."""
    return m * 2.0 * n * d * k / 5e13


def est_iter_seconds(method: str, n: int, d: int, k: int, read_bps: float) -> float:
    """A crude model, only to order and gate points: two reads of X or the product's
    arithmetic at a round rate per method, whichever is larger."""
    flops = 2.0 * n * d * k
    rate = {"jax_tsm2": 1.5e14, "jax_tsm2_tf32": 3.5e14, "flash_kmeans": 3e14,
            "plain_jax": 4e13}[method]  # fmt: skip
    return max(2 * 4.0 * n * d / read_bps, flops / rate) + 1e-4


def need_bytes(method: str, n: int, d: int, k: int) -> int:
    """Device bytes a method needs beyond X itself (its largest temporaries)."""
    if method == "plain_jax":
        return 4 * n * k + 4 * n * d + 16 * n
    if method == "flash_kmeans":
        return 32 * n + 8 * k * d
    return 24 * n + 16 * k * d + (1 << 26)


def free_bytes() -> int:
    """What the device still holds for JAX (the allocator's limit minus what is in use)."""
    stats = jax.devices()[0].memory_stats() or {}
    limit = stats.get("bytes_limit") or 0
    return int(limit - stats.get("bytes_in_use", 0)) if limit else 1 << 60


# ------------------------------------------------------------------ one point


def run_point(n, d, k, args, read_bps, flash) -> dict[str, Any]:
    res: dict[str, Any] = {"n": n, "d": d, "k": k, "dtype": "float32", "x_bytes": 4 * n * d}
    if 4 * n * d * 1.1 > free_bytes():
        res["skipped"] = f"X ({4 * n * d / 1e9:.1f} GB) does not fit in device memory"
        return res
    x, c0 = make_data(n, d, k, seed=args.seed)
    x_sq = jax.jit(core._sq_norms)(x)
    w = jnp.ones((n,), F32)
    jax_ops = (x, x_sq, w, c0)

    runners: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    for name in args.methods:
        if name not in methods_for(n, d, k):
            skipped[name] = f"its {4 * n * k / 1e9:.0f} GB of n x k distances do not fit"
            continue
        if name == "flash_kmeans" and flash is None:
            skipped[name] = "flash-kmeans is not installed"
            continue
        if need_bytes(name, n, d, k) > 0.9 * free_bytes():
            skipped[name] = f"needs ~{need_bytes(name, n, d, k) / 1e9:.0f} GB more device memory"
            continue
        if name == "flash_kmeans":
            ops = flash.operands(x, x_sq, c0)
            runners[name] = (flash.runner, ops)
        else:
            it = {"jax_tsm2": _ours("float32"), "jax_tsm2_tf32": _ours("tensorfloat32"),
                  "plain_jax": _plain}[name]  # fmt: skip
            runners[name] = (jax_runner(it), jax_ops)

    m1, m2 = run_lengths(n, d, k, read_bps)
    res["run_lengths"] = [m1, m2]
    compiled: dict[str, dict[int, Any]] = {}
    for name, (make, ops) in list(runners.items()):
        try:
            t0 = time.perf_counter()
            compiled[name] = {m: make(m) for m in (m1, m2)}
            for m in (m1, m2):
                compiled[name][m](ops)  # compile and warm
            res.setdefault("compile_and_warm_seconds", {})[name] = time.perf_counter() - t0
        except Exception as err:  # a failing peer is reported, not fatal
            skipped[name] = f"{type(err).__name__}: {str(err)[:300]}"
            runners.pop(name)
    samples: dict[str, dict[int, list[float]]] = {name: {m1: [], m2: []} for name in runners}
    for _ in range(args.repeats):
        for name, (_, ops) in runners.items():
            for m in (m1, m2):
                t0 = time.perf_counter()
                compiled[name][m](ops)
                samples[name][m].append(time.perf_counter() - t0)
    per_iter = {
        name: (statistics.median(s[m2]) - statistics.median(s[m1])) / (m2 - m1)
        for name, s in samples.items()
    }
    res["seconds_per_iteration"] = per_iter
    res["samples"] = {name: {str(m): v for m, v in s.items()} for name, s in samples.items()}
    res["skipped_methods"] = skipped
    read_s = 4.0 * n * d / read_bps
    res["reads_of_x"] = {name: t / read_s for name, t in per_iter.items() if t > 0}

    # Accuracy: every method's m2-run centroids, evaluated alike.
    finals = {name: compiled[name][m2](ops) for name, (_, ops) in runners.items()}
    res["final_inertia"] = {name: final_inertia(x, x_sq, c) for name, c in finals.items()}
    ref_cost = ref_seconds(n, d, k, m2)
    if ref_cost <= args.ref_budget:
        chunk = int(max(1024, min(n, (1 << 27) // max(k, d))))
        c_ref, smallest = f64_reference(x, c0, m2, chunk)
        ref = final_inertia(x, x_sq, c_ref)
        res["reference_inertia"] = ref
        res["reference_smallest_cluster"] = smallest
        res["inertia_rel_diff"] = {
            name: abs(v - ref) / abs(ref) for name, v in res["final_inertia"].items()
        }
    else:
        res["reference_inertia"] = None
        res["reference_note"] = f"float64 reference skipped: ~{ref_cost:.0f} s > --ref-budget"
    return res


# ------------------------------------------------------------------ report


def _size(n: int) -> str:
    """1e6 for powers of ten, the number otherwise."""
    e = round(math.log10(n)) if n > 0 else 0
    return f"1e{e}" if 10**e == n and e >= 4 else str(n)


def _where(r: dict[str, Any]) -> str:
    return f"{_size(r['n'])} x {r['d']}, {r['k']}"


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e3:.3f}"


def markdown(doc: dict[str, Any]) -> str:
    lines = [
        f"# jax_tsm2 k-means against flash-kmeans on {doc['gpu']}",
        "",
        f"jax {doc['jax']}, flash-kmeans {doc.get('flash_kmeans') or 'absent'}, read ceiling "
        f"{(doc['read_bytes_per_s'] or 0) / 1e12:.2f} TB/s ({doc['read_method']}). f32 data, "
        "per-iteration ms as the difference of two run lengths; `reads`: jax_tsm2's time "
        "over one read of X; `rel`: final inertia relative to a float64 run from the same "
        "centroids (`-`: reference skipped).",
        "",
        "| n x d, k | jax_tsm2 | jax_tsm2 tf32 | flash-kmeans | plain JAX | ours / flash "
        "(f32, tf32) | reads | rel (ours, tf32, flash) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["points"]:
        head = f"| {_where(r)} "
        if "skipped" in r:
            lines.append(head + f"| skipped: {r['skipped']} | | | | | | |")
            continue
        t = r.get("seconds_per_iteration", {})
        flash = t.get("flash_kmeans")

        def ratio(a: str, t: dict = t, flash: float | None = flash) -> str:
            return "-" if not (t.get(a) and flash) else f"{t[a] / flash:.2f}"

        rel = r.get("inertia_rel_diff", {})
        rels = ", ".join("-" if m not in rel else f"{rel[m]:.1e}"
                         for m in ("jax_tsm2", "jax_tsm2_tf32", "flash_kmeans"))  # fmt: skip
        reads = r.get("reads_of_x", {}).get("jax_tsm2")
        lines.append(
            head + f"| {_ms(t.get('jax_tsm2'))} | {_ms(t.get('jax_tsm2_tf32'))} | {_ms(flash)} "
            f"| {_ms(t.get('plain_jax'))} | {ratio('jax_tsm2')}, {ratio('jax_tsm2_tf32')} "
            f"| {'-' if reads is None else f'{reads:.2f}'} | {rels} |"
        )
    notes = [
        f"- {_where(r)}: {m} skipped: {why}"
        for r in doc["points"]
        for m, why in r.get("skipped_methods", {}).items()
    ]
    notes += [f"- {p}: not run: {why}" for p, why in doc.get("not_run", {}).items()]
    if notes:
        lines += ["", "Skipped:", "", *notes]
    return "\n".join(lines) + "\n"


def write(out: Path | None, doc: dict[str, Any]) -> None:
    if out is None:
        return
    out.mkdir(parents=True, exist_ok=True)
    for name, text in (("kmeans_vs_flash.json", json.dumps(doc, indent=1, default=str)),
                       ("kmeans_vs_flash.md", markdown(doc))):  # fmt: skip
        tmp = out / (name + ".tmp")
        tmp.write_text(text)
        tmp.replace(out / name)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--points", nargs="+", type=_point, metavar="N,D,K",
                   help="grid points (default: the whole grid)")  # fmt: skip
    p.add_argument("--time-budget", type=_cli.positive_float, default=420.0,
                   help="seconds for the run; points that would pass it are not run")  # fmt: skip
    p.add_argument("--ref-budget", type=_cli.positive_float, default=20.0,
                   help="most seconds (estimated) of a point's float64 reference")  # fmt: skip
    p.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS),
                   help="the implementations to time (default: all)")  # fmt: skip
    p.add_argument("--repeats", type=_cli.positive_int, default=3)
    p.add_argument("--seed", type=_cli.non_negative_int, default=0)
    p.add_argument("--read-buffer-mb", type=_cli.positive_int, default=1024,
                   help="size of each buffer the read ceiling streams")  # fmt: skip
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    start = time.perf_counter()

    points = args.points or list(itertools.product(GRID_N, GRID_D, GRID_K))
    try:
        flash = Flash()
    except Exception as err:  # reported in the results
        flash, flash_error = None, f"{type(err).__name__}: {err}"
    else:
        flash_error = None
    dev = jax.devices()[0]
    bw = measure_bandwidth(
        buffer_bytes=args.read_buffer_mb << 20, buffers=4, sm_count=_ffi._sm_count(), repeats=5
    )
    read_bps = bw["read_bytes_per_s"] or 3e12
    doc: dict[str, Any] = {
        "gpu": dev.device_kind,
        "jax": jax.__version__,
        "build": jax_tsm2.build_info(),
        "flash_kmeans": flash.version if flash else None,
        "flash_error": flash_error,
        "read_bytes_per_s": bw["read_bytes_per_s"],
        "read_method": bw["read_method"],
        "points": [],
        "not_run": {},
    }
    cost = lambda pt: est_point_seconds(pt, read_bps, args)
    points.sort(key=cost)
    print(f"device {dev.device_kind}, read ceiling {read_bps / 1e12:.2f} TB/s, "
          f"{len(points)} points, budget {args.time_budget:.0f} s")  # fmt: skip
    for pt in points:
        guess = cost(pt)
        elapsed = time.perf_counter() - start
        if elapsed + guess > args.time_budget:
            where = _where({"n": pt[0], "d": pt[1], "k": pt[2]})
            doc["not_run"][where] = (
                f"time budget (~{guess:.0f} s estimated, {args.time_budget - elapsed:.0f} s left)"
            )
            write(args.out, doc)
            continue
        t0 = time.perf_counter()
        try:
            r = run_point(*pt, args, read_bps, flash)
        except Exception as err:
            r = {"n": pt[0], "d": pt[1], "k": pt[2], "skipped": f"{type(err).__name__}: {err}"}
        r["wall_seconds"] = time.perf_counter() - t0
        doc["points"].append(r)
        write(args.out, doc)
        t = r.get("seconds_per_iteration", {})
        print(f"{_where(r)}: "
              + (r["skipped"] if "skipped" in r else
                 ", ".join(f"{m} {_ms(v)} ms" for m, v in t.items()))
              + f" ({r['wall_seconds']:.0f} s)", flush=True)  # fmt: skip
    if args.out is None:
        print(markdown(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

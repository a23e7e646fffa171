"""One Lloyd iteration against one read of X, and against plain JAX, on the device.

For each case (default: n = 1e6, d = 256, k = 16 and n = 2.5e5, d = 4096,
k = 16, f32) this times, in the same process and the same way:

* ``read``: one read of X by our streaming-read kernel (``tsm2_stream_read``,
  the harness's ceiling; ``jnp.sum(x)`` if the target is missing);
* ``fused``: one k-means iteration as ``jax_tsm2.kmeans`` runs it (labels,
  distances, sums, counts, inertia, new centroids with the empty-cluster rule),
  through the fused kernel when it takes the shape (``fused_eligible``);
* ``fused_step``: the kernel's FFI call alone (when eligible);
* ``unfused``: the same iteration through the jnp path (``jax_tsm2.matmul``
  for the distance and one-hot products);
* ``plain``: the same algorithm as a JAX user writes it: ``jnp.dot``,
  ``argmin``, ``jax.ops.segment_sum``, ``sums / counts``.

Timing is the benchmark harness's (``jax_tsm2.bench.timing``): each jitted
call does ``--calls`` iterations on distinct copies of X, calls run back to
back, and the implementations take turns, one sample of each per round, median
of ``--repeats`` rounds. Taking turns matters here: under sustained load the
H100 slows (the d = 4096 step went from ~1.44 to ~1.60 ms within ~50 ms of
back-to-back calls, and nvidia-smi reported the software power cap during such
runs), so timing one implementation after another favoured whichever ran
first.

By default the iterations of a call are chained, as Lloyd's iterations run:
each starts from the centroids the one before returned. ``--independent``
starts them all from the same centroids instead; being independent they may
then overlap on the device, which no k-means run can. Timed that way the fused
step, whose persistent grid expects the GPU to itself, took 30-110 us more an
iteration at d = 4096 on an H100.

The data are blobs around k centres, and the initial centroids are the first
k points, one from each blob (so the clusters stay filled and chained
iterations time Lloyd's steps, not the empty-cluster rule; the counts after a
chain of plain iterations are reported as ``min_count``). Before timing, the
fused and plain results are compared (label agreement, centroid difference).

Targets: ``fused / read <= 1.3`` and ``plain / fused >= 3``. With
``--sklearn``, scikit-learn's Lloyd iteration on this machine's CPU is timed
beside them (slow: seconds per iteration).

Usage (GPU machine, after ``pip install --no-build-isolation -e .``)::

    python benchmarks/kmeans_iter.py --out DIR [--sklearn] [--case N,D,K,DTYPE ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import jax_tsm2
from jax_tsm2 import _ffi
from jax_tsm2.bench import timing
from jax_tsm2.clustering import core, fused

DEFAULT_CASES = ("1000000,256,16,float32", "250000,4096,16,float32")


def _plain_iteration(x, x_sq, w, c):
    """Lloyd's iteration with jnp.dot, argmin and segment_sum (no empty-cluster rule)."""
    k = c.shape[0]
    dist = x_sq[:, None] - 2 * jnp.dot(x, c.T, precision="highest") + jnp.sum(c * c, 1)[None]
    dist = jnp.maximum(dist, 0)
    labels = jnp.argmin(dist, 1)
    mind = jnp.take_along_axis(dist, labels[:, None], 1)[:, 0]
    sums = jax.ops.segment_sum(w[:, None] * x, labels, k)
    counts = jax.ops.segment_sum(w, labels, k)
    c_new = jnp.where((counts > 0)[:, None], sums / jnp.where(counts > 0, counts, 1)[:, None], c)
    return labels, mind, jnp.sum(w * mind), c_new


def _ours(impl: str):
    def iteration(x, x_sq, w, c):
        return core._iteration(x, x_sq, w, c, c.shape[0], None, impl)

    return iteration


def _fused_step(x, x_sq, w, c):
    del x_sq
    return fused.ffi_step(x, c, w)


def _read(nblocks: int):
    if _ffi.cuda_targets_available() and _ffi.cuda_backend_present():
        call = jax.ffi.ffi_call("tsm2_stream_read", jax.ShapeDtypeStruct((nblocks,), jnp.uint32))
        return "ffi:tsm2_stream_read", lambda x, x_sq, w, c: call(x)
    return "jnp.sum(x) (tsm2_stream_read not built)", lambda x, x_sq, w, c: jnp.sum(x)


def _data(n: int, d: int, k: int, dtype: Any, copies: int, seed: int = 0):
    """``copies`` distinct draws (n x d) of one blobs distribution, with weights, norms and
    k initial centroids (a copy's first k points, one in each blob). The blob centres are
    shared, so centroids that one copy's iteration returns still fit the next copy."""
    centres = 4.0 * jax.random.normal(jax.random.key(seed), (k, d), jnp.float32)
    # Point i < k belongs to blob i: x[:k] starts one centroid in each blob.
    gen = jax.jit(
        lambda kl, kn, centres: (
            centres[jax.random.randint(kl, (n,), 0, k).at[:k].set(jnp.arange(min(n, k)))]
            + jax.random.normal(kn, (n, d), jnp.float32)
        ).astype(dtype)
    )
    out = []
    for i in range(copies):
        kl, kn = jax.random.split(jax.random.key(seed + 1 + i))
        x = gen(kl, kn, centres)
        acc = fused.acc_dtype(dtype)
        x_sq = jax.jit(core._sq_norms)(x)
        out.append((x, x_sq, jnp.ones((n,), acc), x[:k].astype(acc)))
    return out


def _next_centroids(out: Any, c: jax.Array) -> jax.Array:
    """The centroids the next iteration starts from: an iteration's own, the step's
    ``sums / counts``, or ``c`` for the read (which has none)."""
    if isinstance(out, fused.LloydStep):
        filled = out.counts > 0
        mean = out.sums / jnp.where(filled, out.counts, 1)[:, None]
        return jnp.where(filled[:, None], mean, c).astype(c.dtype)
    if isinstance(out, tuple) and len(out) == 4:
        return out[3].astype(c.dtype)
    return c


def _chained(fn, calls: int):
    """``calls`` iterations back to back on distinct copies of X, each starting from the
    centroids the one before returned, as Lloyd's iterations run (the default)."""

    def products(x, x_sq, w, c):
        outs, cur = [], c[0]
        for r in range(calls):
            outs.append(fn(x[r], x_sq[r], w[r], cur))
            cur = _next_centroids(outs[-1], cur)
        return tuple(outs)

    return products


def _min_count(data: list, k: int) -> int:
    """The smallest cluster over a chain of plain iterations through the copies of X
    (0: the empty-cluster rule would run in a chained timing)."""
    step, c, smallest = jax.jit(_plain_iteration), data[0][3], None
    for x, x_sq, w, _ in data:
        labels, _, _, c = step(x, x_sq, w, c)
        size = int(jnp.min(jnp.bincount(labels, length=k)))
        smallest = size if smallest is None else min(smallest, size)
    return smallest


def _compile(fn, data, chained: bool):
    """``fn`` jitted over the copies (chained or not), compiled, warmed; with its operands."""
    copies = [list(col) for col in zip(*data, strict=True)]
    if not chained:
        compiled, _ = timing.compile_jax(fn, copies)
    else:
        clock = timing.device_clock_available()
        products = _chained(fn, len(data))
        lowered = jax.jit(timing.clocked(products) if clock else products).lower(
            *[tuple(col) for col in copies]
        )
        compiled = timing.JaxProgram(lowered.compile(), clock)
    timing.run_jax(compiled, copies)
    return compiled, copies


def _time_in_turns(programs: dict, per_sample: int, repeats: int) -> dict[str, list[float]]:
    """``repeats`` rounds of one sample of each program: the GPU's drift under sustained load
    lands on every implementation alike (module docstring)."""
    samples: dict[str, list[float]] = {name: [] for name in programs}
    for _ in range(repeats):
        for name, (compiled, copies) in programs.items():
            samples[name] += timing.time_jax(compiled, copies, per_sample=per_sample, repeats=1)
    return samples


def _time(fn, data, per_sample: int, repeats: int, chained: bool = False) -> float:
    """Median seconds per iteration of ``fn`` timed alone (for probes that import this
    module, e.g. ``kmeans_update_probe.py``)."""
    samples = _time_in_turns({"fn": _compile(fn, data, chained)}, per_sample, repeats)
    return statistics.median(samples["fn"])


def _sklearn_iteration(x: np.ndarray, init: np.ndarray, iters: int) -> float | None:
    try:
        from sklearn.cluster import KMeans
    except ImportError:
        return None
    t0 = time.perf_counter()
    km = KMeans(init.shape[0], init=init, n_init=1, max_iter=iters, tol=0.0, algorithm="lloyd")
    km.fit(x)
    return (time.perf_counter() - t0) / max(1, km.n_iter_)


def run_case(spec: str, args: argparse.Namespace, nblocks: int) -> dict[str, Any]:
    n, d, k, dtype_name = spec.split(",")
    n, d, k, dtype = int(n), int(d), int(k), jnp.dtype(dtype_name)
    data = _data(n, d, k, dtype, args.calls)
    x_bytes = n * d * dtype.itemsize
    eligible = (
        fused.fused_supported(dtype, d, k)
        and _ffi.cuda_kmeans_available()
        and _ffi.cuda_backend_present()
    )
    res: dict[str, Any] = {"n": n, "d": d, "k": k, "dtype": dtype.name, "x_bytes": x_bytes,
                           "fused_eligible": eligible}  # fmt: skip

    x, x_sq, w, c = data[0]
    labels_f, _, inertia_f, c_f = jax.jit(_ours("auto"))(x, x_sq, w, c)
    labels_p, _, inertia_p, c_p = jax.jit(_plain_iteration)(x, x_sq, w, c)
    res["check"] = {
        "labels_agree": float(jnp.mean(labels_f == labels_p.astype(jnp.int32))),
        "centroids_max_rel_diff": float(
            jnp.max(jnp.abs(c_f - c_p)) / jnp.maximum(jnp.max(jnp.abs(c_p)), 1e-30)
        ),
        "inertia_rel_diff": float(jnp.abs(inertia_f - inertia_p) / jnp.abs(inertia_p)),
    }

    res["timing"] = "chained" if args.chained else "independent"
    res["min_count"] = _min_count(data, k)

    read_method, read_fn = _read(nblocks)
    res["read_method"] = read_method
    impls = {"read": read_fn, "fused": _ours("auto"), "unfused": _ours("jnp"),
             "plain": _plain_iteration}  # fmt: skip
    if eligible:
        impls["fused_step"] = _fused_step
    seconds, programs = {}, {}
    for name, fn in impls.items():
        try:
            programs[name] = _compile(fn, data, args.chained)
        except Exception as err:  # a failing peer is reported, not fatal
            seconds[name] = None
            res.setdefault("errors", {})[name] = f"{type(err).__name__}: {err}"
    samples = _time_in_turns(programs, args.per_sample, args.repeats)
    seconds.update({name: statistics.median(s) for name, s in samples.items()})
    res["seconds"] = seconds
    res["samples"] = samples
    t = seconds
    ratio = lambda a, b: t[a] / t[b] if t.get(a) and t.get(b) else None
    res["fused_over_read"] = ratio("fused", "read")
    res["unfused_over_read"] = ratio("unfused", "read")
    res["plain_over_fused"] = ratio("plain", "fused")
    res["read_bytes_per_s"] = x_bytes / t["read"] if t.get("read") else None
    if args.sklearn:
        res["sklearn_seconds_per_iteration"] = _sklearn_iteration(
            np.asarray(x, np.float32 if dtype.itemsize <= 4 else np.float64),
            np.asarray(c, np.float64),
            args.sklearn_iters,
        )
    return res


def _fmt(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e3:8.3f} ms"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", action="append", help="N,D,K,DTYPE (repeatable)")
    p.add_argument("--calls", type=int, default=2, help="iterations per call (copies of X)")
    p.add_argument(
        "--independent",
        action="store_true",
        help="all iterations of a call start from the same centroids (default: chained)",
    )
    p.add_argument("--per-sample", type=int, default=5)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--sklearn", action="store_true", help="also time scikit-learn on the CPU")
    p.add_argument("--sklearn-iters", type=int, default=3)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    args.chained = not args.independent
    specs = args.case or DEFAULT_CASES
    if any("float64" in spec for spec in specs):
        jax.config.update("jax_enable_x64", True)

    dev = jax.devices()[0]
    nblocks = int(getattr(dev, "core_count", 132)) * 8
    print(f"device: {dev.device_kind}, jax {jax.__version__}, jax_tsm2 build "
          f"{jax_tsm2.build_info().get('cuda_version')}")  # fmt: skip
    results = []
    for spec in specs:
        r = run_case(spec, args, nblocks)
        results.append(r)
        s = r["seconds"]
        how = "used" if r["fused_eligible"] else "NOT eligible: jnp path"
        print(f"n={r['n']} d={r['d']} k={r['k']} {r['dtype']} "
              f"(X {r['x_bytes'] / 1e9:.3g} GB, fused kernel {how}; {r['timing']} "
              f"iterations, smallest cluster {r['min_count']})")  # fmt: skip
        for name in ("read", "fused", "fused_step", "unfused", "plain"):
            if name in s:
                got = r["samples"].get(name)
                spread = f"  (samples {_fmt(min(got))} .. {_fmt(max(got))})" if got else ""
                print(f"  {name:<10} {_fmt(s[name])}{spread}")
        reads, speedup = r["fused_over_read"], r["plain_over_fused"]
        print(f"  fused / read  = {reads:.3f} (target <= 1.3: {'PASS' if reads <= 1.3 else 'FAIL'})"
              if reads else "  fused / read  = -")  # fmt: skip
        print(f"  plain / fused = {speedup:.2f} (target >= 3: {'PASS' if speedup >= 3 else 'FAIL'})"
              if speedup else "  plain / fused = -")  # fmt: skip
        if r.get("unfused_over_read"):
            print(f"  unfused / read = {r['unfused_over_read']:.3f}")
        print(f"  check vs plain: {r['check']}")
        if "sklearn_seconds_per_iteration" in r:
            print(f"  scikit-learn (CPU) per iteration: {_fmt(r['sklearn_seconds_per_iteration'])}")
        if r.get("errors"):
            print(f"  errors: {r['errors']}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        doc = {"gpu": dev.device_kind, "jax": jax.__version__, "build": jax_tsm2.build_info(),
               "cases": results}  # fmt: skip
        (args.out / "kmeans_iter.json").write_text(json.dumps(doc, indent=1, default=str))


if __name__ == "__main__":
    main()

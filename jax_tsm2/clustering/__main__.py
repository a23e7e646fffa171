"""``python -m jax_tsm2.clustering``: cluster a real or generated dataset, iteration by iteration.

Loads one of scikit-learn's bundled datasets (``--dataset digits|iris|wine|
breast_cancer``, needs scikit-learn) or generates Gaussian blobs with NumPy
(``--generate N,D,K``), seeds with greedy k-means++ (or ``--init random``), then
runs Lloyd's iterations from a plain Python loop over a jitted step, ``--n-init``
restarts of them, with a progress bar over the restarts and the iterations that shows
the inertia and centroid shift as they come (``--verbose`` prints a line per
iteration too). The step is the same code :func:`jax_tsm2.clustering.kmeans` runs inside
its ``lax.while_loop``; the best restart is checked against one call of ``kmeans`` from
the same initial centroids. The report keeps the step's compile time apart from its
time per iteration.

``--compare-sklearn`` runs ``sklearn.cluster.KMeans(algorithm="lloyd", n_init=1)``
from the same initial centroids and reports label agreement, inertia, and its time
per iteration apart from its fixed cost (validation and setup: it compiles nothing),
the two taken from fits of one iteration and of the full run.

Example::

    python -m jax_tsm2.clustering --dataset digits --compare-sklearn
    python -m jax_tsm2.clustering --generate 200000,64,1000 --dtype float32 --n-init 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from jax_tsm2 import _cli
from jax_tsm2.clustering import core, tiled

DATASETS = ("digits", "iris", "wine", "breast_cancer")


def _need_sklearn(what: str) -> Any:
    try:
        import sklearn
    except ImportError:
        sys.exit(
            f"error: {what} needs scikit-learn, which is not installed here "
            "(pip install scikit-learn), or use --generate N,D,K for NumPy-generated blobs"
        )
    import sklearn.cluster
    import sklearn.datasets

    return sklearn


def load(args: argparse.Namespace) -> tuple[np.ndarray, int, str]:
    """The data (float64 NumPy array), the number of clusters and a description."""
    if args.generate:
        n, d, k = args.generate
        rng = np.random.default_rng(args.seed)
        centers = rng.normal(scale=10.0, size=(k, d))
        x = centers[rng.integers(0, k, n)] + rng.normal(size=(n, d))
        return x, args.k or k, f"blobs N={n} D={d} K={k} (NumPy, seed {args.seed})"
    sk = _need_sklearn(f"--dataset {args.dataset}")
    bunch = getattr(sk.datasets, f"load_{args.dataset}")()
    k = args.k or len(np.unique(bunch.target))
    return np.asarray(bunch.data, np.float64), k, f"scikit-learn {args.dataset}"


def _generate(text: str) -> tuple[int, int, int]:
    """``N,D,K``: three integers >= 1."""
    sizes = _cli.comma_list(_cli.positive_int, "N,D,K")(text)
    if len(sizes) != 3:
        raise argparse.ArgumentTypeError(f"expected N,D,K (three integers >= 1), got {text!r}")
    return sizes[0], sizes[1], sizes[2]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m jax_tsm2.clustering", description=__doc__.split("\n")[0]
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--dataset", choices=DATASETS, default="digits")
    src.add_argument(
        "--generate", metavar="N,D,K", type=_generate, help="Gaussian blobs made with NumPy"
    )
    p.add_argument(
        "--k",
        type=_cli.positive_int,
        default=None,
        help="clusters (default: the dataset's classes)",
    )
    p.add_argument("--init", choices=("k-means++", "random"), default="k-means++")
    p.add_argument("--n-init", type=_cli.positive_int, default=1, help="restarts; the best wins")
    p.add_argument("--max-iter", type=_cli.positive_int, default=300)
    p.add_argument("--tol", type=_cli.non_negative_float, default=1e-4)
    p.add_argument("--seed", type=_cli.non_negative_int, default=0)
    p.add_argument("--dtype", choices=("float64", "float32", "bfloat16"), default="float64")
    p.add_argument(
        "--precision",
        choices=tiled.PRECISIONS,
        default="float32",
        help="f32 distances: f32-accurate (default) or one TF32 product (faster at large k, d)",
    )
    p.add_argument("--verbose", action="store_true", help="a line per iteration as well")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--compare-sklearn", action="store_true")
    return p


def _seconds(fn, *args) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return out, time.perf_counter() - t0


def _fmt_ms(seconds: float) -> str:
    return f"{1e3 * seconds:.3f} ms"


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    p = parser()
    args = p.parse_args(argv)
    if args.dtype == "float64":  # before any array exists
        jax.config.update("jax_enable_x64", True)
    x_np, k, what = load(args)
    if k > x_np.shape[0]:
        p.error(f"{k} clusters for {x_np.shape[0]} points: --k must be at most the points")
    x = jnp.asarray(x_np, args.dtype)
    print(f"data: {what}: {x.shape[0]} x {x.shape[1]} {args.dtype}, k={k}, device {x.device}")

    # Compile everything first, timed apart from seeding and iterating.
    t0 = time.perf_counter()
    keys = jax.random.split(jax.random.key(args.seed), args.n_init)
    prepare = jax.jit(core._prepare, static_argnums=(1, 2)).lower(x, None, None).compile()
    xc, x_sq, w, mu, mean_var = jax.block_until_ready(prepare(x))
    if args.init == "k-means++":
        seed_fn = jax.jit(core._kmeans_plusplus_centered, static_argnums=(4, 5, 6))
        seed_fn = seed_fn.lower(keys[0], xc, x_sq, w, k, None, None).compile()
        seed = lambda key: seed_fn(key, xc, x_sq, w)
    else:
        seed_fn = jax.jit(core._random_centered, static_argnums=(3, 4))
        seed_fn = seed_fn.lower(keys[0], xc, w, k, None).compile()
        seed = lambda key: seed_fn(key, xc, w)

    def step(c, labels_old):
        labels, _, inertia, c_new = core._iteration(
            xc, x_sq, w, c, k, None, precision=args.precision
        )
        return c_new, labels, inertia, jnp.sum((c_new - c) ** 2), jnp.sum(labels != labels_old)

    acc = core._acc_dtype(x.dtype)
    labels0 = jnp.full(x.shape[0], -1, jnp.int32)
    step_c = jax.jit(step).lower(jax.ShapeDtypeStruct((k, x.shape[1]), acc), labels0).compile()
    compile_s = time.perf_counter() - t0
    tol_abs = float(args.tol * mean_var)

    bars = not args.no_progress
    best: dict[str, Any] | None = None
    times: list[float] = []
    restarts = tqdm(
        range(args.n_init), desc="restarts", unit="run", disable=not bars or args.n_init == 1
    )
    seeding = 0.0
    for r in restarts:
        c, dt = _seconds(seed, keys[r])
        seeding += dt
        c0 = c
        labels = labels0
        bar = tqdm(total=args.max_iter, desc=f"run {r + 1}/{args.n_init}", unit="it",
                   leave=args.n_init == 1, disable=not bars)  # fmt: skip
        n_iter, inertia = 0, float("nan")
        for i in range(args.max_iter):
            (c, labels, inertia_a, shift_a, changed_a), dt = _seconds(step_c, c, labels)
            times.append(dt)
            inertia, shift, changed = float(inertia_a), float(shift_a), int(changed_a)
            n_iter = i + 1
            bar.update(1)
            bar.set_postfix(inertia=f"{inertia:.6g}", shift=f"{shift:.3g}", changed=changed)
            if args.verbose:
                tqdm.write(
                    f"run {r + 1} iter {n_iter:4d}  inertia {inertia:16.6f}  "
                    f"shift^2 {shift:12.4e}  changed {changed:8d}  {_fmt_ms(dt)}"
                )
            if changed == 0 or shift <= tol_abs:
                break
        bar.close()
        run = {"c0": c0, "c": c, "n_iter": n_iter, "last_inertia": inertia}
        run["labels"], mind = core._assign(xc, x_sq, c, args.precision)
        run["inertia"] = float(jnp.sum(w * mind))
        if best is None or run["inertia"] < best["inertia"]:
            best = run
        restarts.set_postfix(best=f"{best['inertia']:.6g}")
    restarts.close()

    per_iter = statistics.median(times)
    print(f"done: {args.n_init} run(s), best {best['n_iter']} iterations, inertia "
          f"{best['inertia']:.6f}; compile {compile_s:.2f} s, seeding {seeding:.3f} s, "
          f"{_fmt_ms(per_iter)} per iteration (median of {len(times)})")  # fmt: skip

    c0_np = np.asarray(best["c0"] + mu, np.float64)
    state = core.kmeans(
        keys[0], x, k, init=jnp.asarray(c0_np), max_iter=args.max_iter, tol=args.tol,
        precision=args.precision,
    )  # fmt: skip
    same = float(np.mean(np.asarray(state.labels) == np.asarray(best["labels"])))
    print(f"kmeans() from the same seeds: {int(state.n_iter)} iterations, "
          f"inertia {float(state.inertia):.6f}, labels equal on {100 * same:.3f}%")  # fmt: skip

    if args.compare_sklearn:
        compare_sklearn(args, x_np, k, c0_np, best)
    return 0


def compare_sklearn(args, x_np, k, c0_np, best) -> None:
    """scikit-learn's Lloyd from the same initial centroids: agreement, and its time per
    iteration apart from its fixed cost, from fits of one iteration and of the full run
    (median of three each, after a warm-up fit)."""
    sk = _need_sklearn("--compare-sklearn")
    data = np.asarray(x_np, np.float64 if args.dtype == "float64" else np.float32)
    fit = lambda iters: sk.cluster.KMeans(
        k, init=c0_np, n_init=1, max_iter=iters, tol=args.tol, algorithm="lloyd"
    ).fit(data)
    fit(1)  # warm: imports, thread pools

    def timed(iters: int) -> tuple[Any, float]:
        runs = []
        for _ in range(3):
            t0 = time.perf_counter()
            model = fit(iters)
            runs.append(time.perf_counter() - t0)
        return model, statistics.median(runs)

    one, t_one = timed(1)
    ref, t_full = timed(args.max_iter)
    extra = ref.n_iter_ - one.n_iter_
    per_iter = (t_full - t_one) / extra if extra > 0 and t_full > t_one else None
    fixed = t_one - one.n_iter_ * per_iter if per_iter is not None else t_one
    agree = float(np.mean(ref.labels_ == np.asarray(best["labels"])))
    rel = abs(best["inertia"] - ref.inertia_) / abs(ref.inertia_)
    timing = (f"{_fmt_ms(per_iter)} per iteration, fixed cost {max(fixed, 0.0):.3f} s "
              "(nothing to compile)" if per_iter is not None else
              f"{t_full:.3f} s in all (its iterations below the timer's noise)")  # fmt: skip
    print(f"scikit-learn {sk.__version__} (same initial centroids): {ref.n_iter_} iterations, "
          f"inertia {ref.inertia_:.6f}, {timing}; labels agree on {100 * agree:.3f}%, inertia "
          f"relative difference {rel:.2e}")  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())

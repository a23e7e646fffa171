"""``python -m jax_tsm2.clustering``: cluster a real or generated dataset, iteration by iteration.

Loads one of scikit-learn's bundled datasets (``--dataset digits|iris|wine|
breast_cancer``, needs scikit-learn) or generates Gaussian blobs with NumPy
(``--generate N,D,K``), seeds with greedy k-means++ (or ``--init random``), then
runs Lloyd's iterations from a plain Python loop over a jitted step so that each
iteration's inertia, centroid shift and wall time are printed as it finishes.
The step is the same code :func:`jax_tsm2.clustering.kmeans` runs inside its
``lax.while_loop``; the final result is checked against one call of ``kmeans``
from the same initial centroids. ``--compare-sklearn`` runs
``sklearn.cluster.KMeans(algorithm="lloyd", n_init=1)`` from the same initial
centroids and reports label agreement, inertia and time.

Example::

    python -m jax_tsm2.clustering --dataset digits --compare-sklearn
    python -m jax_tsm2.clustering --generate 200000,64,16 --dtype float32
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_tsm2 import _cli
from jax_tsm2.clustering import core

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
    p.add_argument("--max-iter", type=_cli.positive_int, default=300)
    p.add_argument("--tol", type=_cli.non_negative_float, default=1e-4)
    p.add_argument("--seed", type=_cli.non_negative_int, default=0)
    p.add_argument("--dtype", choices=("float64", "float32", "bfloat16"), default="float64")
    p.add_argument("--compare-sklearn", action="store_true")
    return p


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

    key = jax.random.key(args.seed)
    xc, x_sq, w, mu, mean_var = core._prepare(x, None, None)
    tol_abs = args.tol * mean_var
    if args.init == "k-means++":
        init_fn = jax.jit(core._kmeans_plusplus_centered, static_argnums=(4, 5, 6))
        c = init_fn(key, xc, x_sq, w, k, None, None)
    else:
        c = jax.jit(core._random_centered, static_argnums=(3, 4))(key, xc, w, k, None)
    c0 = np.asarray(c + mu, np.float64)

    @jax.jit
    def step(c, labels_old):
        labels, _, inertia, c_new = core._iteration(xc, x_sq, w, c, k, None)
        return c_new, labels, inertia, jnp.sum((c_new - c) ** 2), jnp.sum(labels != labels_old)

    labels = jnp.full(x.shape[0], -1, jnp.int32)
    jax.block_until_ready(step(c, labels))  # compile outside the timings
    times = []
    print(f"{'iter':>5} {'inertia':>16} {'shift^2':>12} {'changed':>8} {'ms':>9}")
    for i in range(args.max_iter):
        t0 = time.perf_counter()
        c, labels, inertia, shift, changed = jax.block_until_ready(step(c, labels))
        times.append(time.perf_counter() - t0)
        print(f"{i + 1:5d} {float(inertia):16.6f} {float(shift):12.4e} {int(changed):8d} "
              f"{1e3 * times[-1]:9.3f}")  # fmt: skip
        if int(changed) == 0 or float(shift) <= float(tol_abs):
            break
    labels, mind = core._assign_sq(xc, x_sq, c)
    inertia = float(jnp.sum(mind))
    n_iter = len(times)
    print(f"done: {n_iter} iterations, inertia {inertia:.6f}, "
          f"{1e3 * float(np.median(times)):.3f} ms per iteration (median)")  # fmt: skip

    state = core.kmeans(key, x, k, init=jnp.asarray(c0), max_iter=args.max_iter, tol=args.tol)
    same = float(np.mean(np.asarray(state.labels) == np.asarray(labels)))
    print(f"kmeans() from the same seeds: {int(state.n_iter)} iterations, "
          f"inertia {float(state.inertia):.6f}, labels equal on {100 * same:.3f}%")  # fmt: skip

    if args.compare_sklearn:
        sk = _need_sklearn("--compare-sklearn")
        t0 = time.perf_counter()
        ref = sk.cluster.KMeans(
            k, init=c0, n_init=1, max_iter=args.max_iter, tol=args.tol, algorithm="lloyd"
        ).fit(np.asarray(x_np, np.float64 if args.dtype == "float64" else np.float32))
        t_sk = time.perf_counter() - t0
        agree = float(np.mean(ref.labels_ == np.asarray(labels)))
        rel = abs(inertia - ref.inertia_) / abs(ref.inertia_)
        print(f"scikit-learn {sk.__version__} (same initial centroids): {ref.n_iter_} iterations, "
              f"inertia {ref.inertia_:.6f}, {1e3 * t_sk / ref.n_iter_:.3f} ms per iteration "
              f"(incl. setup); labels agree on {100 * agree:.3f}%, inertia relative "
              f"difference {rel:.2e}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What the tiled step's cluster sums (``tsm2_kmeans_sums``) cost against one read of X.

Times, the way ``kmeans_iter.py`` does (device clock, ``--calls`` calls a sample on
distinct copies of X, median of rounds), for each case ``N,D,K,DTYPE``:

* ``read``: one read of X (``tsm2_stream_read``, or ``jnp.sum(x)`` without it);
* ``sums``: ``tiled.ffi_sums`` with the plan of this GPU (its path: ``piece`` 0 is
  one bucket of clusters, else rows sorted by label), labels spread evenly;
* ``sums_skewed``: the same with 90% of the rows in one cluster.

    python benchmarks/kmeans_sums_probe.py [--case 1000000,64,4096,float32 ...] [--calls 2]
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import kmeans_iter as ki  # benchmarks/ is the script's directory

from jax_tsm2 import _ffi
from jax_tsm2.clustering import fused, tiled

DEFAULT_CASES = (
    "1000000,64,4096,float32",
    "1000000,64,16384,float32",
    "1000000,256,64,float32",
    "1000000,128,1024,float32",
    "1000000,64,65536,float32",
)


def _copies(n: int, d: int, k: int, dtype, calls: int, skew: bool) -> list:
    """``calls`` copies of (x, labels, w, mind): the slots ``kmeans_iter._compile`` passes."""
    acc = fused.acc_dtype(dtype)
    out = []
    for i in range(calls):
        kx, kl, ks = jax.random.split(jax.random.key(i), 3)
        x = jax.random.normal(kx, (n, d), jnp.float32).astype(dtype)
        labels = jax.random.randint(kl, (n,), 0, k)
        if skew:
            labels = jnp.where(jax.random.uniform(ks, (n,)) < 0.9, k // 3, labels)
        out.append((x, labels.astype(jnp.int32), jnp.ones((n,), acc), jnp.ones((n,), acc)))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", action="append", help="N,D,K,DTYPE (repeatable)")
    p.add_argument("--calls", type=int, default=2)
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args()
    print(f"{jax.devices()[0].device_kind}: us per call (median)")
    for spec in args.case or DEFAULT_CASES:
        n, d, k, dt = spec.split(",")
        n, d, k, dtype = int(n), int(d), int(k), jnp.dtype(dt)
        plan = _ffi.kmeans_tiled_plan(dtype, n, d, k)
        sums = lambda x, labels, w, mind, k=k: tiled.ffi_sums(x, w, labels, mind, k)
        _, read = ki._read(int(getattr(jax.devices()[0], "core_count", 132)) * 8)
        row = {}
        for name, fn, skew in (("read", read, False), ("sums", sums, False),
                               ("sums_skewed", sums, True)):  # fmt: skip
            data = _copies(n, d, k, dtype, args.calls, skew)
            row[name] = ki._time(fn, data, 5, args.repeats) * 1e6
        path = f"sorted (piece {plan['piece']})" if plan["piece"] else "one bucket"
        print(
            f"  {spec:<26} {path:<18} read {row['read']:8.1f}  sums {row['sums']:8.1f}"
            f"  skewed {row['sums_skewed']:8.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()

"""Session 23 diagnostic (run as build/labs/kmdiag.py from the repository root; this copy
has its lint mended, same statements).

Per-iteration time of jax_tsm2.kmeans itself (a while_loop, each iteration from the
last one's centroids) on benchmarks/kmeans_iter.py's blobs data, and the cluster sizes
after the first two chained plain iterations.
"""

import sys
import time

import jax
import jax.numpy as jnp

import jax_tsm2

sys.path.insert(0, "benchmarks")
import kmeans_iter as ki

for n, d in ((1000000, 256), (250000, 4096)):
    k = 16
    x, x_sq, w, c0 = ki._data(n, d, k, jnp.float32, 1)[0]
    per = {}
    for m in (2, 12):
        f = jax.jit(
            lambda x, c0, m=m, k=k: jax_tsm2.kmeans(
                jax.random.key(1), x, k, init=c0, max_iter=m, tol=0.0
            )
        )
        s = jax.block_until_ready(f(x, c0))
        ts = []
        for _ in range(3):
            t0 = time.perf_counter()
            s = jax.block_until_ready(f(x, c0))
            ts.append(time.perf_counter() - t0)
        per[m] = min(ts)
        sizes = jnp.bincount(s.labels, length=k).tolist()
        nan = bool(jnp.isnan(s.centroids).any())
        print(
            f"n={n} d={d} max_iter={m}: {per[m] * 1e3:.3f} ms, n_iter {int(s.n_iter)}, "
            f"nan centroids {nan}, sizes {sizes}"
        )
    print(f"  per iteration (12 - 2 iterations): {(per[12] - per[2]) / 10 * 1e3:.3f} ms")
    it = jax.jit(ki._plain_iteration)
    l1, _, _, c1 = it(x, x_sq, w, c0)
    l2, _, _, c2 = it(x, x_sq, w, c1)
    print("  plain sizes it1", jnp.bincount(l1, length=k).tolist())
    print(
        "  plain sizes it2",
        jnp.bincount(l2, length=k).tolist(),
        "nan c1",
        bool(jnp.isnan(c1).any()),
    )

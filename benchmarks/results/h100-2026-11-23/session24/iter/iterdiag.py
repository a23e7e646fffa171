# Session 24 diagnostic: where the chained fused iteration at d = 4096 spends the ~110 us
# it takes over the chained step alone. Variants of one iteration, chained as kmeans_iter
# does (2 per call), timed by the harness; the compiled HLO of the fused chain is saved.
import os
import sys
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, "benchmarks")
import kmeans_iter as ki

from jax_tsm2.clustering import fused

out = os.environ.get("OUT", "/tmp/out")
n, d, k = int(sys.argv[1]), int(sys.argv[2]), 16
data = ki._data(n, d, k, jnp.float32, 2)


def step_update(x, x_sq, w, c):
    s = fused.ffi_step(x, c, w)
    return (
        s.labels,
        s.mind,
        s.inertia,
        fused.ffi_update(s.sums, s.counts, x, w, s.labels, s.mind, c),
    )


def step_mean(x, x_sq, w, c):
    s = fused.ffi_step(x, c, w)
    ok = s.counts > 0
    return (
        s.labels,
        s.mind,
        s.inertia,
        jnp.where(ok[:, None], s.sums / jnp.where(ok, s.counts, 1)[:, None], c),
    )


def update_only(x, x_sq, w, c):
    labels = jnp.zeros((n,), jnp.int32)
    mind = x_sq
    return fused.ffi_update(c * 3.0, jnp.ones((k,), c.dtype), x, w, labels, mind, c)


variants = {
    "fused": ki._ours("auto"),
    "fused_step": ki._fused_step,
    "step+ffi_update": step_update,
    "step+jnp mean": step_mean,
    "update alone": update_only,
}
for name, fn in variants.items():
    ts = [ki._time(fn, data, 5, 7, True) for _ in range(2)]
    print(
        f"n={n} d={d} {name:<16} chained: {' '.join(f'{t * 1e3:.3f}' for t in ts)} ms", flush=True
    )
for name in ("fused", "fused_step"):
    t = ki._time(variants[name], data, 5, 7, False)
    print(f"n={n} d={d} {name:<16} independent: {t * 1e3:.3f} ms", flush=True)
copies = [tuple(col) for col in zip(*data, strict=False)]
txt = jax.jit(ki._chained(variants["fused"], 2)).lower(*copies).compile().as_text()
Path(f"{out}/hlo-fused-chained-{d}.txt").write_text(txt)

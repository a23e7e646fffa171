"""What the end of a k-means iteration costs on the GPU: the empty-cluster rule.

Times, the way ``kmeans_iter.py`` does (device clock, ``--calls`` iterations a
call on distinct copies of X), at one shape:

* ``step``: the fused step's FFI call alone;
* ``iteration``: the iteration as ``kmeans`` runs it (on CUDA the centroids
  come from ``tsm2_kmeans_update``, which checks for empty clusters on the
  device);
* ``iteration_cond``: the same with the jnp rule (``core._new_centroids_jnp``:
  a ``lax.cond`` around a top-k, whose predicate XLA reads on the host);
* ``iteration_no_rule``: the same with no rule at all (``sums / counts``);
* ``iteration_rule_always``: the jnp rule's branch taken every time (what
  ``vmap`` of the cond does).

    python benchmarks/kmeans_update_probe.py [--case N,D,K,DTYPE] [--calls 2]
"""

from __future__ import annotations

import argparse
import contextlib
import types

import jax
import jax.numpy as jnp
import kmeans_iter as ki  # benchmarks/ is the script's directory

from jax_tsm2.clustering import core, fused


@contextlib.contextmanager
def _patched(obj, name, value):
    saved = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, saved)


def _variant(kind: str):
    """An iteration whose centroid update is ``kind``."""
    jnp_rule = lambda *a, fallback: fallback(*a)  # fused.update without the kernel
    cond = {
        "no_rule": lambda pred, t, f, ops: f(ops),
        "rule_always": lambda pred, t, f, ops: t(ops),
    }.get(kind)
    lax_ns = types.SimpleNamespace(**{a: getattr(jax.lax, a) for a in dir(jax.lax) if a[0] != "_"})
    if cond is not None:
        lax_ns.cond = cond

    def iteration(x, x_sq, w, c):
        with contextlib.ExitStack() as stack:
            if kind != "kernel":
                stack.enter_context(_patched(fused, "update", jnp_rule))
                stack.enter_context(_patched(core, "lax", lax_ns))
            return core._iteration(x, x_sq, w, c, c.shape[0], None, "auto")

    return iteration


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", default="1000000,256,16,float32")
    p.add_argument("--calls", type=int, default=2)
    args = p.parse_args()
    n, d, k, dt = args.case.split(",")
    data = ki._data(int(n), int(d), int(k), jnp.dtype(dt), args.calls)
    fns = {
        "step": ki._fused_step,
        "iteration": _variant("kernel"),
        "iteration_cond": _variant("cond"),
        "iteration_no_rule": _variant("no_rule"),
        "iteration_rule_always": _variant("rule_always"),
    }
    print(f"{args.case} ({jax.devices()[0].device_kind}), us per iteration:")
    for name, fn in fns.items():
        print(f"  {name:<22} {ki._time(fn, data, 5, 7) * 1e6:9.1f}", flush=True)


if __name__ == "__main__":
    main()

"""How many rows the refined f32 assignment ranks again, and what each step costs.

On sm_90a the default f32 mode of the tiled assignment ranks with one TF32 product and
ranks again, with exact f32 dots, the rows whose two lowest TF32 keys lie within the
rounding bound of each other (ffi/kmeans/kernels/kmeans_assign_refine.cuh): rows with
two such keys by one more exact dot, rows with three or more against every centroid. That
list's length sets the refinement's cost. This probe calls ``tsm2_kmeans_assign``
directly, reads the list's length from the call's workspace, counts the rows whose label
differs from the TF32 mode's, and times the call in the default mode and in the TF32
mode, on clustered data (``blobs``: points around ``k`` centres)
and on unclustered Gaussian data, against centroids after a few Lloyd iterations (the
harder case: centroids of unclustered data lie close together)::

    python benchmarks/lab/kmeans_refine_rate.py [--n 1000000] [--case 64,1024 ...]
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

import jax_tsm2
from jax_tsm2 import _cli, _ffi
from jax_tsm2.bench.timing import median_call_seconds
from jax_tsm2.clustering import tiled


def _ceil16(b: int) -> int:
    return -(-b // 16) * 16


def assign_with_workspace(x, x_sq, c, precision: str):
    """``tsm2_kmeans_assign`` as :func:`jax_tsm2.clustering.tiled.ffi_assign` calls it,
    returning its workspace too."""
    n, d = x.shape
    k = c.shape[0]
    plan = _ffi.kmeans_tiled_plan(x.dtype, n, d, k)
    extra = "assign_tf32_copy_bytes" if precision == "tensorfloat32" else "assign_refine_bytes"
    workspace = plan["assign_workspace_bytes"] + plan.get(extra, 0)
    call = jax.ffi.ffi_call(
        _ffi.KMEANS_ASSIGN_TARGET,
        (
            jax.ShapeDtypeStruct((n,), jnp.int32),
            jax.ShapeDtypeStruct((n,), jnp.float32),
            jax.ShapeDtypeStruct((workspace,), jnp.uint8),
        ),
    )
    return call(x, x_sq, c, precision=np.int32(tiled.PRECISIONS.index(precision)))


def listed_rows(workspace, n: int, d: int, k: int) -> int | None:
    """How many rows the refinement ranked again against every centroid: its list's
    length, from the workspace layout of tiled_plan.h (KmeansRefineLayoutOf, after the
    TF32 copy); None where the call took the split products."""
    plan = _ffi.kmeans_tiled_plan("float32", n, d, k)
    if "assign_refine_bytes" not in plan or plan["splits"] > 1 or plan["centroid_tiles"] < 2:
        return None  # no refinement (or not this call's): the split products ran
    at = _ceil16(plan["assign_workspace_bytes"]) + plan["assign_tf32_copy_bytes"]
    at += 4 * _ceil16(4 * n)
    return int(np.asarray(workspace[at : at + 4]).view(np.int32)[0])


def data(kind: str, n: int, d: int, k: int, seed: int = 0) -> jax.Array:
    key = jax.random.key(seed)
    kc, kl, kx = jax.random.split(key, 3)
    if kind == "blobs":
        centres = 3.0 * jax.random.normal(kc, (k, d))
        return centres[jax.random.randint(kl, (n,), 0, k)] + jax.random.normal(kx, (n, d))
    return jax.random.normal(kx, (n, d))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=_cli.positive_int, default=1_000_000)
    p.add_argument("--case", nargs="+", default=["64,1024", "128,256", "256,1024", "1024,1024"],
                   metavar="D,K", help="(d, k) pairs")  # fmt: skip
    p.add_argument("--lloyd", type=_cli.non_negative_int, default=5,
                   help="Lloyd iterations before the assignment is probed")  # fmt: skip
    args = p.parse_args(argv)
    print(f"{jax.devices()[0].device_kind}, jax_tsm2 {jax_tsm2.__version__}")
    print("kind    n x d, k          ranked again  labels unlike TF32's  default ms  tf32 ms")
    for case in args.case:
        d, k = (int(v) for v in case.split(","))
        for kind in ("blobs", "gauss"):
            x = data(kind, args.n, d, k)
            x = x - x.mean(0)  # as kmeans centres its data
            state = jax_tsm2.kmeans(jax.random.key(1), x, k, init="random",
                                    max_iter=max(args.lloyd, 1), tol=0.0)  # fmt: skip
            c = state.centroids
            x_sq = jnp.sum(x * x, axis=1)
            f32 = jax.jit(lambda x, s, c: assign_with_workspace(x, s, c, "float32"))
            tf32 = jax.jit(lambda x, s, c: assign_with_workspace(x, s, c, "tensorfloat32"))
            labels, _, workspace = f32(x, x_sq, c)
            listed = listed_rows(workspace, args.n, d, k)
            unlike = int(jnp.sum(labels != tf32(x, x_sq, c)[0]))
            t32 = median_call_seconds(f32, x, x_sq, c)
            t19 = median_call_seconds(tf32, x, x_sq, c)
            again = "-" if listed is None else f"{listed / args.n:.4%}"
            print(f"{kind:6s}  {args.n:.0e} x {d}, {k:<6d} {again:>12s}  {unlike / args.n:20.4%}"
                  f"  {t32 * 1e3:10.3f}  {t19 * 1e3:7.3f}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

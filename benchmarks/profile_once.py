"""One warmed-up call of a workload between cudaProfilerStart/Stop, for Nsight tools.

Compilation, autotuning and warm-up run outside the profiled range, so
``ncu --profile-from-start off`` (or ``nsys --capture-range=cudaProfilerApi``)
sees exactly the kernels of one call::

    ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum \
        python benchmarks/profile_once.py abft --size 8192
    ncu --profile-from-start off --clock-control none --set full \
        python benchmarks/profile_once.py kmeans --case 1000000,256,16,float32

Workloads: ``abft`` (``jax_tsm2.abft.abft_matmul`` on n x n x n) and ``matmul``
(the plain product it is measured against); ``kmeans`` (the fused step's FFI
call, ``jax_tsm2.clustering.fused.ffi_step``); ``product`` (``a @ b`` on ``--case
M,K,N,DTYPE`` three ways in one profiled range: ``jax_tsm2.matmul`` with the
custom call forced, ``jnp.matmul``, then torch's ``matmul`` if torch is there).
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import glob
import os

import jax
import jax.numpy as jnp

import jax_tsm2
from jax_tsm2 import abft
from jax_tsm2.clustering import fused


def _cudart():
    """The CUDA runtime library of this process (torch's or the nvidia wheels'), or None."""
    names = [ctypes.util.find_library("cudart")]
    for root in {os.path.dirname(os.path.dirname(jax.__file__))}:
        names += glob.glob(os.path.join(root, "nvidia", "**", "libcudart.so*"), recursive=True)
    for name in names:
        if name:
            try:
                return ctypes.CDLL(name)
            except OSError:
                continue
    return None


def _workload(args):
    key = jax.random.key(0)
    if args.what in ("abft", "matmul"):
        n = args.size
        ka, kb = jax.random.split(key)
        a = jax.random.normal(ka, (n, n), jnp.float32)
        b = jax.random.normal(kb, (n, n), jnp.float32)
        fn = jax.jit(abft.abft_matmul if args.what == "abft" else jax_tsm2.matmul)
        return fn, (a, b)
    if args.what == "product":
        return _products(args.case)
    n, d, k, dtype = args.case.split(",")
    n, d, k = int(n), int(d), int(k)
    x = jax.random.normal(key, (n, d), jnp.float32).astype(dtype)
    acc = fused.acc_dtype(jnp.dtype(dtype))
    return jax.jit(fused.ffi_step), (x, x[:k].astype(acc), jnp.ones((n,), acc))


def _products(case: str):
    """``a @ b`` forced onto our kernel, by XLA's dot and by torch, one after another."""
    m, k, n, dtype = case.split(",")
    ka, kb = jax.random.split(jax.random.key(0))
    a = jax.random.normal(ka, (int(m), int(k)), jnp.float32).astype(dtype)
    b = jax.random.normal(kb, (int(k), int(n)), jnp.float32).astype(dtype)
    with jax_tsm2.custom_call_mode("always"):
        ours = jax.jit(jax_tsm2.matmul).lower(a, b).compile()
    xla = jax.jit(jnp.matmul).lower(a, b).compile()
    calls = [lambda: ours(a, b), lambda: xla(a, b)]
    try:
        import torch

        ta, tb = (torch.from_dlpack(v) for v in (a, b))
        calls.append(lambda: torch.matmul(ta, tb))
    except ImportError:
        pass

    def fn():
        out = [call() for call in calls]
        if len(calls) > 2:
            torch.cuda.synchronize()
        return out[:2]

    return fn, ()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("abft", "matmul", "kmeans", "product"))
    p.add_argument("--size", type=int, default=8192)
    p.add_argument(
        "--case",
        default="1000000,256,16,float32",
        help="N,D,K,DTYPE (kmeans) or M,K,N,DTYPE (product)",
    )
    args = p.parse_args()
    fn, operands = _workload(args)
    for _ in range(3):
        jax.block_until_ready(fn(*operands))
    rt = _cudart()
    if rt is None:
        print("no libcudart found: the whole run is profiled")
    else:
        rt.cudaProfilerStart()
    jax.block_until_ready(fn(*operands))
    if rt is not None:
        rt.cudaProfilerStop()
    print(f"profiled one call of {args.what}")


if __name__ == "__main__":
    main()

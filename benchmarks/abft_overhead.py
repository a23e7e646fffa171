"""Issue 8's bar: what ABFT costs on top of the plain product, measured on the device.

Times ``jax.jit(jax_tsm2.abft.abft_matmul)`` against ``jax.jit(jax_tsm2.matmul)``
on the same operands (8192 x 8192 x 8192 f32, default precision, unless told
otherwise): each sample queues ``--calls`` calls back to back and syncs once;
the median of ``--repeats`` samples is reported. The bar is an overhead of at
most 10%, detection and correction included (``abft_matmul`` always runs its
verification and its repair path's selects; no fault is injected).

Usage (GPU machine, after ``pip install --no-build-isolation -e .``)::

    python benchmarks/abft_overhead.py --out DIR [--size 8192] [--dtype float32]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp

import jax_tsm2
from jax_tsm2.abft import abft_matmul


def _seconds_per_call(fn, args, repeats: int, calls: int) -> list[float]:
    jax.block_until_ready(fn(*args))  # compile and warm up
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = [fn(*args) for _ in range(calls)]
        jax.block_until_ready(res)
        out.append((time.perf_counter() - t0) / calls)
        del res
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=8192)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()

    n, dtype = args.size, jnp.dtype(args.dtype)
    ka, kb = jax.random.split(jax.random.key(0))
    a = jax.random.uniform(ka, (n, n), dtype, -1, 1)
    b = jax.random.uniform(kb, (n, n), dtype, -1, 1)
    plain = jax.jit(jax_tsm2.matmul)
    checked = jax.jit(abft_matmul)
    _, verdict = checked(a, b)
    t_plain = _seconds_per_call(plain, (a, b), args.repeats, args.calls)
    t_abft = _seconds_per_call(checked, (a, b), args.repeats, args.calls)
    mp, ma = statistics.median(t_plain), statistics.median(t_abft)
    overhead = ma / mp - 1
    line = (
        f"{n}^3 {dtype.name}: matmul {mp * 1e3:.3f} ms, abft_matmul {ma * 1e3:.3f} ms, "
        f"overhead {overhead:+.1%} (bar <= +10%: {'PASS' if overhead <= 0.10 else 'FAIL'}); "
        f"clean verdict: {int(verdict.errors_detected)} errors detected"
    )
    print(line)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        doc = {
            "gpu": jax.devices()[0].device_kind,
            "jax": jax.__version__,
            "size": n,
            "dtype": dtype.name,
            "matmul_s": t_plain,
            "abft_matmul_s": t_abft,
            "overhead": overhead,
            "errors_detected_on_clean_product": int(verdict.errors_detected),
            "summary": line,
        }
        (args.out / "abft_overhead.json").write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()

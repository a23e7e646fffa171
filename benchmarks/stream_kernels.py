"""The kernels forced, beside XLA's dot, as fractions of each product's floor.

For each shape: a TSM2 kernel (R, L, T or S) forced through the ``tsm2_matmul`` target
(``jax_tsm2.kernel_call.kernel_product``: routing never sees the product), and XLA's dot
at default precision and, for f32, at ``"highest"`` (the same f32 arithmetic as the
kernels), timed as the autotuner and the harness time (``jax_tsm2.tune.timing``: a buffer
set per product, unrolled under jit, the GPU's clock, median of samples). The floor is
``max(minimal bytes / read ceiling, empty launch)``, both measured first in the same run
(``jax_tsm2.tune.ceilings``); minimal bytes are every operand read once and C written once.
Each forced result is checked against XLA's dot at highest precision before it is timed.

    python benchmarks/stream_kernels.py                       # the default shapes (SHAPES)
    python benchmarks/stream_kernels.py --shape r:f32:nn:7460x24553x51 \\
        --shape l:bf16:nt:5684707x4x9 --json out.json
    python benchmarks/stream_kernels.py --kernel-only --shape t:f32:tn:89x135015x20

A shape is ``KERNEL:DTYPE:LAYOUT:MxKxN`` with KERNEL ``r`` (tsm2r), ``l`` (tsm2l; k <= 64),
``t`` (tsm2t) or ``s`` (tsm2s), DTYPE f32/f64/bf16/f16, and LAYOUT ``nn`` (A stored m x k,
B k x n), ``nt`` (B stored n x k) or ``tn`` (A stored k x m: ``A.T @ B``); each kernel takes
the layouts ``jax_tsm2.problem.KERNEL_LAYOUTS`` gives it. ``C`` is always m x n.
Needs a GPU and a CUDA build of jax_tsm2. With the install, about 3 minutes for the
default shapes on an H200.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
import zlib
from dataclasses import asdict, dataclass
from typing import Any

import jax
import jax.numpy as jnp

from jax_tsm2 import kernel_call
from jax_tsm2.model.prediction import S_MAX_M
from jax_tsm2.problem import KERNEL_LAYOUTS, Problem
from jax_tsm2.tune import ceilings, timing

DTYPES = {"f32": jnp.float32, "f64": jnp.float64, "bf16": jnp.bfloat16, "f16": jnp.float16}
KERNELS = {"r": "tsm2r", "l": "tsm2l", "t": "tsm2t", "s": "tsm2s"}
SPECS = {"nn": "mk,kn->mn", "nt": "mk,nk->mn", "tn": "km,kn->mn"}
#: Relative error (against |A| |B|) a forced result may have against XLA's dot at highest.
TOLERANCE = {"f32": 1e-4, "f64": 1e-10, "bf16": 2e-2, "f16": 4e-3}

#: Shapes from the calibration's worst cases and from real programs (randomized SVD,
#: block power iteration, LoRA, k-means distances); both kernels where k <= 64.
SHAPES = [
    "r:f32:nn:7460x24553x51",
    "r:f32:nn:25811x1618x27",
    "r:f32:nn:15862x21056x8",
    "r:bf16:nn:15650x16184x16",
    "r:f32:nn:7492x1893x33",
    "r:bf16:nn:14615x1504x56",
    "r:f32:nn:1454x1371x51",
    "r:f32:nn:3729x8811x26",
    "r:f32:nt:3644x23872x41",
    "r:bf16:nt:19064x19759x20",
    "r:f32:nt:1395107x42x10",
    "l:f32:nt:1395107x42x10",
    "l:bf16:nt:5684707x4x9",
    "l:f32:nn:6875800x9x5",
    "r:f32:nn:6875800x9x5",
    "l:bf16:nn:6944711x10x42",
    "l:f32:nn:7500442x54x1",
    "r:f32:nn:7500442x54x1",
    "l:f32:nn:1014153x11x56",
    "l:f32:nn:596292x7x30",
    "l:f32:nn:3503939x37x5",
    "r:f32:nn:3503939x37x5",
    "r:f32:nn:20000x20000x8",
    "r:f32:nn:100000x2000x32",
    "r:f32:nn:32768x4096x16",
    "r:f32:nt:1000000x128x64",
    "r:bf16:nn:32768x4096x16",
    "l:f32:nn:10000000x16x16",
    "l:f32:nn:10000000x64x64",
]


@dataclass(frozen=True)
class Shape:
    kernel: str  # "tsm2r", "tsm2l", "tsm2t" or "tsm2s"
    dtype: str  # "f32", ...
    layout: str  # "nn", "nt" or "tn"
    m: int
    k: int
    n: int

    @property
    def name(self) -> str:
        return f"{self.kernel} {self.dtype} {self.layout} {self.m}x{self.k}x{self.n}"

    def min_bytes(self) -> int:
        isz = jnp.dtype(DTYPES[self.dtype]).itemsize
        return (self.m * self.k + self.k * self.n + self.m * self.n) * isz


def parse_shape(text: str) -> Shape:
    """``KERNEL:DTYPE:LAYOUT:MxKxN`` as a Shape, or ValueError naming the part that is wrong.

    Example:
        >>> parse_shape("r:f32:nt:3644x23872x41").kernel
        'tsm2r'
    """
    parts = text.split(":")
    if len(parts) != 4:
        raise ValueError(f"{text!r}: expected KERNEL:DTYPE:LAYOUT:MxKxN")
    kernel, dtype, layout, dims = parts
    if kernel not in KERNELS:
        raise ValueError(f"{text!r}: kernel must be one of {sorted(KERNELS)}")
    if dtype not in DTYPES:
        raise ValueError(f"{text!r}: dtype must be one of {sorted(DTYPES)}")
    if layout not in KERNEL_LAYOUTS[KERNELS[kernel]]:
        takes = " or ".join(sorted(KERNEL_LAYOUTS[KERNELS[kernel]]))
        raise ValueError(f"{text!r}: kernel {kernel} takes layout {takes}")
    try:
        m, k, n = (int(x) for x in dims.split("x"))
    except ValueError:
        raise ValueError(f"{text!r}: sizes must be MxKxN integers") from None
    if min(m, k, n) < 1:
        raise ValueError(f"{text!r}: sizes must be >= 1")
    if kernel == "l" and k > 64:
        raise ValueError(f"{text!r}: tsm2l takes k <= 64")
    if kernel == "s" and m > S_MAX_M:
        raise ValueError(f"{text!r}: tsm2s takes m <= {S_MAX_M}")
    return Shape(KERNELS[kernel], dtype, layout, m, k, n)


def operands(s: Shape, copies: int, seed: int) -> list[list[Any]]:
    """``copies`` random (a, b) pairs as stored in the layout, made on the device."""
    dt = DTYPES[s.dtype]
    a_shape, b_shape = kernel_call.stored_shapes(Problem(None, s.m, s.k, s.n), s.layout)
    keys = jax.random.split(jax.random.key(seed), 2 * copies)
    make = jax.jit(
        lambda key, shape: jax.random.uniform(key, shape, jnp.float32, -1.0, 1.0).astype(dt),
        static_argnums=1,
    )
    a = [make(keys[2 * i], a_shape) for i in range(copies)]
    b = [make(keys[2 * i + 1], b_shape) for i in range(copies)]
    return [a, b]


def time_product(apply: Any, copies: list[list[Any]], per_sample: int, repeats: int) -> float:
    """Median seconds per product (tune.timing's method)."""
    compiled, _ = timing.compile_jax(apply, copies)
    timing.run_jax(compiled, copies)
    return statistics.median(
        timing.time_jax(compiled, copies, per_sample=per_sample, repeats=repeats)
    )


def max_error(s: Shape, got: Any, a: Any, b: Any) -> float:
    """max |got - ref| / (|A| |B|) against XLA's dot at highest precision, in f32 (f64).

    The scale is floored at the smallest normal number of the output's dtype: below it the
    output keeps an absolute, not a relative, precision (an f16 product of 2e-7 rounds to a
    subnormal up to 15% away, as XLA's own f16 result does)."""
    acc = jnp.float64 if s.dtype == "f64" else jnp.float32
    spec = SPECS[s.layout]
    tiny = jnp.finfo(got.dtype).tiny
    a, b = a.astype(acc), b.astype(acc)
    ref = jnp.einsum(spec, a, b, precision="highest")
    scale = jnp.einsum(spec, jnp.abs(a), jnp.abs(b), precision="highest")
    err = jnp.abs(got.astype(acc) - ref) / jnp.maximum(scale, tiny)
    return float(jnp.max(err))


def run_shape(s: Shape, ceil: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    read, launch = ceil["read_bytes_per_s"], ceil["launch_seconds"]
    nbytes = s.min_bytes()
    floor = max(nbytes / read, launch)
    est = max(floor, 5e-6)
    isz = jnp.dtype(DTYPES[s.dtype]).itemsize
    plan = timing.make_plan(
        nbytes - s.m * s.n * isz,
        s.m * s.n * isz,
        est,
        budget_bytes=int(args.budget_gb * 1e9),
        l2_bytes=args.l2_mb * 10**6,
        target_call_s=0.005,
        target_sample_s=0.02,
        max_calls=64,
    )
    row: dict[str, Any] = {**asdict(s), "bytes": nbytes, "floor_us": floor * 1e6}
    if plan.reason:
        row["skipped"] = plan.reason
        return row
    copies = operands(s, plan.calls, seed=zlib.crc32(s.name.encode()))
    problem = Problem(None, s.m, s.k, s.n)
    forced = kernel_call.kernel_product(s.kernel, problem, DTYPES[s.dtype], s.layout)
    impls = {"kernel": forced}
    if not args.kernel_only:
        impls["xla"] = kernel_call.xla_product(s.layout)
    if s.dtype == "f32" and not args.kernel_only:
        spec = SPECS[s.layout]
        impls["xla_highest"] = lambda a, b: jnp.einsum(spec, a, b, precision="highest")
    a0, b0 = copies[0][0], copies[1][0]
    row["max_rel_error"] = max_error(s, jax.jit(forced)(a0, b0), a0, b0)
    row["error_ok"] = row["max_rel_error"] <= TOLERANCE[s.dtype]
    for name, apply in impls.items():
        try:
            sec = time_product(apply, copies, plan.per_sample, args.repeats)
        except Exception as err:  # a failed implementation is reported, not fatal
            row[f"{name}_error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
            continue
        row[f"{name}_us"] = sec * 1e6
        row[f"{name}_floor_pct"] = 100 * floor / sec
    del copies
    return row


def fmt(row: dict[str, Any]) -> str:
    def col(name: str) -> str:
        us = row.get(f"{name}_us")
        return f"{us:9.1f} {row[f'{name}_floor_pct']:5.1f}%" if us else f"{'-':>16}"

    has_xla = "xla_us" in row and row.get("kernel_us")
    ratio = row["xla_us"] / row["kernel_us"] if has_xla else math.nan
    name = f"{row['kernel']} {row['dtype']:4} {row['layout']} {row['m']}x{row['k']}x{row['n']}"
    err = "" if row.get("error_ok", True) else f"  WRONG (err {row['max_rel_error']:.1e})"
    return (
        f"{name:38} {row['bytes'] / 1e6:9.1f} {row['floor_us']:9.1f} {col('kernel')} {col('xla')} "
        f"{col('xla_highest')} {ratio:6.2f}{err}"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python benchmarks/stream_kernels.py",
        description="Forced TSM2 kernels and XLA's dot as % of each product's floor.",
    )
    p.add_argument("--shape", action="append", default=[], help="KERNEL:DTYPE:LAYOUT:MxKxN")
    p.add_argument("--repeats", type=int, default=5, help="samples per timing (median)")
    p.add_argument("--budget-gb", type=float, default=40.0, help="operand memory per shape")
    p.add_argument("--l2-mb", type=int, default=50, help="L2 size the buffer sets defeat")
    p.add_argument("--json", default=None, help="also write the rows and ceilings here")
    p.add_argument(
        "--kernel-only",
        action="store_true",
        help="time the forced kernel alone (A/B runs of two builds: XLA's dot is the same in both)",
    )
    args = p.parse_args(argv)
    try:
        shapes = [parse_shape(t) for t in (args.shape or SHAPES)]
    except ValueError as err:
        p.print_usage(sys.stderr)
        print(f"{p.prog}: error: {err}", file=sys.stderr)
        return 2
    if jax.default_backend() != "gpu":
        print("needs a GPU (jax.default_backend() is not 'gpu')", file=sys.stderr)
        return 1
    jax.config.update("jax_enable_x64", True)
    t0 = time.time()
    sms = jax.devices()[0].core_count
    ceil = ceilings.measure_bandwidth(buffer_bytes=2**30, buffers=3, sm_count=sms, repeats=5)
    ceil.update(ceilings.measure_launch(calls=64, per_sample=8, repeats=15))
    print(
        f"{jax.devices()[0].device_kind}: read ceiling {ceil['read_bytes_per_s'] / 1e9:.0f} GB/s,"
        f" empty launch {ceil['launch_seconds'] * 1e6:.2f} us"
    )
    print(
        f"{'shape':38} {'MB':>9} {'floor us':>9} {'kernel us  %floor':>16} "
        f"{'xla us  %floor':>16} {'highest us %floor':>16} {'xla/kernel':>6}"
    )
    rows: list[dict[str, Any]] = []
    ceil_out = {k: v for k, v in ceil.items() if isinstance(v, (int, float, str, type(None)))}
    for s in shapes:
        row = run_shape(s, ceil, args)
        rows.append(row)
        print(fmt(row) if "kernel_us" in row else f"{s.name}: {row}", flush=True)
        if args.json:  # after every shape, so that a run cut short keeps what it timed
            partial = f"{args.json}.partial"
            with open(partial, "w") as f:
                json.dump({"ceilings": ceil_out, "rows": rows}, f, indent=1)
            os.replace(partial, args.json)  # a cut mid-write leaves the last whole file
    print(f"{len(rows)} shapes in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What the fused row check costs over the same product without checks, on the device.

For each suite case of family R of at least ``--min-mb`` MB (operands and result) that
``jax_tsm2.abft.decide_fused`` sends to the fused check, times in turn:

- ``stream``: the same kernel without checks (``tsm2_matmul`` with TSM2R forced, which runs
  the row stream for these shapes): the product the check is fused into;
- ``routed``: ``jax_tsm2.matmul``, as routing picks it;
- ``fused``: ``jax_tsm2.abft.abft_matmul(..., fused=True)`` (``tsm2_abft_rows``: the product,
  the check of every row, and the repair kernel, which returns at once on a clean product);
- ``passes``: ``abft_matmul`` as it is by default: the checksum passes beside the routed
  product, for comparison.

Each sample queues ``--calls`` calls and syncs once; samples of the four alternate, and the
report gives each one's median and the paired medians of ``fused / stream``,
``fused / routed`` and ``passes / routed`` (samples taken next to each other). The bar: the
fused check within 3% of the product it is fused into.

Usage (GPU machine)::

    python benchmarks/abft_fused_overhead.py --out DIR [--dtypes f32,f64] [--min-mb 256]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import jax_tsm2
from jax_tsm2 import abft, kernel_call
from jax_tsm2.bench import env
from jax_tsm2.bench.suite import DTYPES, FAMILIES, Case
from jax_tsm2.problem import Problem

jax.config.update("jax_enable_x64", True)  # the f64 cases


def _sample(fn, args, calls: int) -> float:
    t0 = time.perf_counter()
    res = [fn(*args) for _ in range(calls)]
    jax.block_until_ready(res)
    return (time.perf_counter() - t0) / calls


def _cases(dtypes: list[str], min_mb: float) -> list[Case]:
    fam = FAMILIES["R"]
    out = []
    for dtype in dtypes:
        for m, k, n in fam.shapes:
            case = Case("R", dtype, m, k, n)
            if fam.min_bytes(case) < min_mb * 1e6:
                continue
            a = jax.ShapeDtypeStruct((m, k), DTYPES[dtype])
            b = jax.ShapeDtypeStruct((k, n), DTYPES[dtype])
            if abft.decide_fused(a, b).target == "kernels":
                out.append(case)
    return out


def _measure(case: Case, repeats: int, calls: int) -> dict:
    dtype = jnp.dtype(DTYPES[case.dtype])
    rng = np.random.default_rng(case.m + case.n)
    a = jnp.asarray(rng.standard_normal((case.m, case.k), np.float32), dtype)
    b = jnp.asarray(rng.standard_normal((case.k, case.n), np.float32), dtype)
    stream = kernel_call.kernel_product("tsm2r", Problem(None, case.m, case.k, case.n), dtype, "nn")
    fns = {
        "stream": jax.jit(stream),
        "routed": jax.jit(jax_tsm2.matmul),
        "fused": jax.jit(lambda a, b: abft.abft_matmul(a, b, fused=True)),
        "passes": jax.jit(abft.abft_matmul),
    }
    for fn in fns.values():
        jax.block_until_ready(fn(a, b))  # compile and warm up
    _, verdict = fns["fused"](a, b)
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            samples[name].append(_sample(fn, (a, b), calls))
    paired = lambda x, y: statistics.median(
        p / q for p, q in zip(samples[x], samples[y], strict=True)
    )
    return {
        "case": case.label,
        "dtype": case.dtype,
        "mb": FAMILIES["R"].min_bytes(case) / 1e6,
        "median_us": {name: statistics.median(s) * 1e6 for name, s in samples.items()},
        "fused_over_stream": paired("fused", "stream"),
        "fused_over_routed": paired("fused", "routed"),
        "passes_over_routed": paired("passes", "routed"),
        "clean_verdict": int(verdict.errors_detected) == 0,
        "samples_us": {name: [t * 1e6 for t in s] for name, s in samples.items()},
    }


def _markdown(rows: list[dict], device: str) -> str:
    lines = [
        f"# Fused row check against the same product ({device})",
        "",
        "Median us per call; paired medians of the ratios (samples taken next to each other).",
        "",
        "| case | dtype | MB | stream | routed | fused | passes | fused / stream | "
        "fused / routed | passes / routed |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        t = r["median_us"]
        lines.append(
            f"| {r['case']} | {r['dtype']} | {r['mb']:.0f} | {t['stream']:.1f} | "
            f"{t['routed']:.1f} | {t['fused']:.1f} | {t['passes']:.1f} | "
            f"{r['fused_over_stream']:.3f} | {r['fused_over_routed']:.3f} | "
            f"{r['passes_over_routed']:.3f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dtypes", default="f32,f64,bf16,f16", help="comma-separated: f32,f64,...")
    p.add_argument("--min-mb", type=float, default=256.0)
    p.add_argument("--repeats", type=int, default=11)
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    unknown = [d for d in dtypes if d not in DTYPES]
    if unknown:
        p.error(f"unknown dtypes {unknown} (known: {', '.join(DTYPES)})")
    if args.repeats < 1 or args.calls < 1:
        p.error("--repeats and --calls must be >= 1")
    args.out.mkdir(parents=True, exist_ok=True)
    device = jax.devices()[0].device_kind
    made = env.made(sys.argv)
    rows = []
    for case in _cases(dtypes, args.min_mb):
        rows.append(_measure(case, args.repeats, args.calls))
        r = rows[-1]
        print(
            f"{r['case']} {r['dtype']}: fused/stream {r['fused_over_stream']:.3f}, "
            f"fused/routed {r['fused_over_routed']:.3f}, passes/routed "
            f"{r['passes_over_routed']:.3f}",
            flush=True,
        )
        (args.out / "abft_fused_overhead.json").write_text(
            json.dumps({"device": device, "made": made, "records": rows}, indent=1, default=str)
        )
    (args.out / "abft_fused_overhead.md").write_text(_markdown(rows, device))
    print(_markdown(rows, device))


if __name__ == "__main__":
    sys.exit(main())

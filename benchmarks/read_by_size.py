"""How close to the floor can any kernel come, by size: our streaming read of exactly the
bytes of a product, against the floor ``max(bytes / read ceiling, empty launch)``.

A product's floor counts its bytes at the read ceiling (measured over buffers of 1 GiB) or
one empty launch, whichever is longer. A kernel that reads ``b`` bytes and does nothing
else also pays the DRAM latency of its first loads and the ramp of its last wave, which
neither term holds; below a few tens of MB that gap is most of its time. This script
measures it: ``tsm2_stream_read`` over one buffer of each size per launch, timed as the
harness times a case (``jax_tsm2.tune.timing``: a buffer per launch, enough buffers for 4x
the L2, the GPU's clock, median of samples), at the best of several grid sizes. The
fraction ``floor / time`` it reaches is what a product of those bytes can reach at most,
whatever its arithmetic.

    python benchmarks/read_by_size.py --out read_by_size.json        # GPU: 1 MB .. 1 GiB
    python benchmarks/read_by_size.py --report read_by_size.json \\
        --grid benchmarks/results/h200/grid_seed8123.json             # CPU: against a grid

``--report`` puts every shape of the grid runs at the read's fraction for its bytes
(interpolated in log size) beside the routed path's and the fastest implementation's.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import math
import pathlib
import statistics
import sys
from typing import Any

ITEMSIZE = {"f32": 4, "f64": 8, "bf16": 2, "f16": 2}


def measure(
    sizes: list[int], block_factors: list[int], repeats: int, save: Any = None
) -> dict[str, Any]:
    """Seconds per read of each size (best grid), the ceiling and the empty launch;
    ``save(doc)`` after each size, so that a run cut short keeps what it measured."""
    import jax

    from jax_tsm2.tune import ceilings

    dev = jax.devices()[0]
    sms = getattr(dev, "core_count", 132)
    l2 = 60 * 2**20  # above the L2 of the GPUs we run on (50-60 MB)
    bw = ceilings.measure_bandwidth(buffer_bytes=2**30, buffers=4, sm_count=sms, repeats=5)
    ceiling = bw["read_bytes_per_s"]
    launch = ceilings.measure_launch(calls=64, per_sample=25, repeats=15)["launch_seconds"]
    print(f"{dev.device_kind}: ceiling {ceiling / 1e12:.3f} TB/s, launch {launch * 1e6:.3f} us")
    rows: list[dict[str, Any]] = []
    doc = {
        "device": dev.device_kind,
        "jax": jax.__version__,
        "read_bytes_per_s": ceiling,
        "launch_seconds": launch,
        "block_factors": block_factors,
        "rows": rows,
    }
    for size in sizes:
        count = size // 4
        calls = max(2, min(64, math.ceil(4 * l2 / size)))
        keys = jax.random.split(jax.random.key(1), calls)
        xs = [ceilings._words(k, count) for k in keys]
        best = None
        for f in block_factors:
            s = ceilings._time(ceilings._stream_read(f * sms), [xs], max(1, 2000 // calls), repeats)
            if best is None or s < best[0]:
                best = (s, f * sms)
        del xs
        floor = max(count * 4 / ceiling, launch)
        row = {"bytes": count * 4, "seconds": best[0], "blocks": best[1], "floor_seconds": floor}
        row["fraction"] = floor / best[0]
        rows.append(row)
        print(
            f"{row['bytes'] / 1e6:10.2f} MB {best[0] * 1e6:9.2f} us ({best[1]:5d} blocks)"
            f"  floor {floor * 1e6:8.2f} us  {row['fraction']:.3f}",
            flush=True,
        )
        if save is not None:
            save(doc)
    return doc


def fraction_at(rows: list[dict[str, Any]], nbytes: float) -> float:
    """The read's floor fraction at ``nbytes``, linear in log size between measured sizes
    (the nearest end outside them)."""
    pts = sorted((math.log(r["bytes"]), r["fraction"]) for r in rows)
    x = math.log(nbytes)
    if x <= pts[0][0]:
        return pts[0][1]
    for (x0, y0), (x1, y1) in itertools.pairwise(pts):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return pts[-1][1]


def _quantiles(xs: list[float]) -> str:
    xs = sorted(xs)
    p10 = xs[max(0, math.ceil(0.1 * len(xs)) - 1)]
    return f"median {statistics.median(xs):.2f}, p10 {p10:.2f}"


def report(curve: dict[str, Any], grids: list[pathlib.Path]) -> None:
    """Per grid: the read's fraction at each shape's bytes beside the routed path's and the
    fastest implementation's (median and 10th percentile)."""
    for path in grids:
        doc = json.loads(path.read_text())
        by = collections.defaultdict(dict)
        for r in doc["records"]:
            if r.get("status") == "ok" and r.get("floor_seconds"):
                by[(r["case"], r["dtype"])][r["impl"]] = r
        read, routed, best = [], [], []
        for (_, dtype), impls in by.items():
            if "tsm2" not in impls:
                continue
            (m, k), (_, n) = impls["tsm2"]["operand_shapes"][:2]
            nbytes = (m * k + k * n + m * n) * ITEMSIZE[dtype]
            floor = impls["tsm2"]["floor_seconds"]
            read.append(fraction_at(curve["rows"], nbytes))
            routed.append(floor / impls["tsm2"]["seconds"])
            best.append(floor / min(x["seconds"] for x in impls.values()))
        print(
            f"{path.stem}: {len(read)} shapes; a read of their bytes {_quantiles(read)}; "
            f"routed {_quantiles(routed)}; fastest {_quantiles(best)}"
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python benchmarks/read_by_size.py", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--out", type=pathlib.Path, help="measure on the GPU and write JSON here")
    p.add_argument("--min-mb", type=float, default=1.0, help="smallest size (MiB)")
    p.add_argument("--max-mb", type=float, default=1024.0, help="largest size (MiB)")
    p.add_argument("--per-octave", type=int, default=2, help="sizes per doubling")
    p.add_argument("--blocks", default="2,4,8,16", help="grids to try, in SMs (best is kept)")
    p.add_argument("--repeats", type=int, default=3, help="samples per timing (median)")
    p.add_argument("--report", type=pathlib.Path, help="a JSON this script wrote")
    p.add_argument("--grid", type=pathlib.Path, nargs="*", default=[], help="harness grid runs")
    args = p.parse_args(argv)
    if (args.out is None) == (args.report is None):
        p.print_usage(sys.stderr)
        print(f"{p.prog}: error: give one of --out (measure) and --report", file=sys.stderr)
        return 2
    if args.report is not None:
        if not args.grid:
            p.print_usage(sys.stderr)
            print(f"{p.prog}: error: --report needs --grid FILE ...", file=sys.stderr)
            return 2
        report(json.loads(args.report.read_text()), args.grid)
        return 0
    try:
        factors = [int(x) for x in args.blocks.split(",")]
    except ValueError:
        p.print_usage(sys.stderr)
        print(f"{p.prog}: error: --blocks takes integers, got {args.blocks!r}", file=sys.stderr)
        return 2
    lo, hi = math.log2(args.min_mb * 2**20), math.log2(args.max_mb * 2**20)
    steps = round((hi - lo) * args.per_octave)
    sizes = [int(2 ** (lo + i / args.per_octave)) // 16 * 16 for i in range(steps + 1)]
    command = "python benchmarks/read_by_size.py " + " ".join(argv or sys.argv[1:])
    save = lambda doc: args.out.write_text(json.dumps({"command": command, **doc}, indent=1))
    measure(sizes, factors, args.repeats, save)
    return 0


if __name__ == "__main__":
    sys.exit(main())

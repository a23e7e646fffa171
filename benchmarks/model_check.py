"""Predicted beside measured, per case, for a benchmark result file (issue 5's bar 1).

    python benchmarks/model_check.py benchmarks/results/h100-2026-11-22b/bench.json

For every record of a forced kernel (impl ``tsm2_kernel``, or ``tsm2[...]``
names such as ``tsm2[prefer]``: the kernel comes from the record's ``route``)
and of XLA's dot (``jnp``, ``jnp_highest``, and the routed ``tsm2`` when it
went to XLA), prints the model's time (``jax_tsm2.model``) beside the
measured median and the relative error, then the median |error| per group.
The device is the H100 preset with the file's measured read ceiling
(``ceilings.read_bytes_per_s``) as its bandwidth, unless ``--preset`` says
otherwise. ``--json`` writes the table for other tools. Exits 1 when the
median error of the forced kernels exceeds ``--bar`` (default 0.20).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Any

from jax_tsm2 import model

_DTYPES = {"f32": "float32", "f64": "float64", "bf16": "bfloat16", "f16": "float16"}
XLA_IMPLS = ("jnp", "jnp_highest")


def _group(rec: dict[str, Any]) -> tuple[str, str] | None:
    """("kernel", kernel name) or ("xla", "xla") for the records the model covers."""
    impl, route = rec.get("impl", ""), rec.get("route")
    if impl == "tsm2_kernel" or (impl.startswith("tsm2[") and impl.endswith("]")):
        if route in model.KERNEL_IDS:
            return ("kernel", route)
        return None
    if impl in XLA_IMPLS or (impl == "tsm2" and route == "xla"):
        return ("xla", "xla")
    if impl == "tsm2" and route in model.KERNEL_IDS:
        return ("routed", route)
    return None


def check(doc: dict[str, Any], device: model.Device) -> list[dict[str, Any]]:
    rows = []
    for rec in doc.get("records", []):
        group = _group(rec)
        if group is None or rec.get("status") != "ok" or not rec.get("seconds"):
            continue
        dtype = _DTYPES.get(rec["dtype"], rec["dtype"])
        layout = rec.get("layout", "nn")
        batch = rec.get("batch")
        shape = (batch, rec["m"], rec["k"], rec["n"]) if batch else (rec["m"], rec["k"], rec["n"])
        precision = "highest" if rec["impl"] == "jnp_highest" else "default"
        pred = model.predict(shape, dtype, layout, group[1], device=device, xla_precision=precision)
        err = (pred.seconds - rec["seconds"]) / rec["seconds"]
        rows.append(
            {
                "group": group[0],
                "case": rec["case"],
                "dtype": rec["dtype"],
                "impl": rec["impl"],
                "kernel": group[1],
                "measured_s": rec["seconds"],
                "predicted_s": pred.seconds,
                "rel_error": err,
                "bound": pred.bound,
            }
        )
    return rows


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    out = {}
    for g in ("kernel", "xla", "routed"):
        errs = [abs(r["rel_error"]) for r in rows if r["group"] == g]
        if errs:
            out[g] = {
                "cases": len(errs),
                "median_abs_rel_error": statistics.median(errs),
                "within_20pct": sum(e <= 0.2 for e in errs) / len(errs),
                "max_abs_rel_error": max(errs),
            }
    return out


def routing_check(doc: dict[str, Any], device: model.Device) -> list[dict[str, Any]]:
    """Per case with both a forced kernel and ``jnp`` measured: the model's choice
    (``model.choose``) and how much slower it measured than the better of the two."""
    by_case: dict[tuple, dict[str, dict[str, Any]]] = {}
    for rec in doc.get("records", []):
        if rec.get("status") == "ok" and rec.get("seconds"):
            by_case.setdefault((rec["case"], rec["dtype"]), {})[rec["impl"]] = rec
    out = []
    for (case, dt), recs in sorted(by_case.items()):
        kern = recs.get("tsm2_kernel")
        xla = recs.get("jnp")
        if kern is None or xla is None or kern.get("route") not in model.KERNEL_IDS:
            continue
        shape = (kern["m"], kern["k"], kern["n"])
        choice = model.choose(
            shape,
            _DTYPES.get(dt, dt),
            kern.get("layout", "nn"),
            device=device,
            kernels=(kern["route"],),
        )
        chosen = kern if choice.target != "xla" else xla
        best = min(kern["seconds"], xla["seconds"])
        out.append(
            {
                "case": case,
                "dtype": dt,
                "target": choice.target,
                "slowdown": chosen["seconds"] / best - 1.0,
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bench_json")
    ap.add_argument("--preset", default="h100-sxm", help="device preset (model.PRESETS)")
    ap.add_argument(
        "--theoretical", action="store_true", help="no measured bandwidth: the driver's figure"
    )
    ap.add_argument("--bar", type=float, default=0.20)
    ap.add_argument("--json", help="write the per-case table here")
    ap.add_argument("--quiet", action="store_true", help="summary only")
    args = ap.parse_args(argv)
    with open(args.bench_json) as f:
        doc = json.load(f)
    dev = model.PRESETS[args.preset]
    ceiling = (doc.get("ceilings") or {}).get("read_bytes_per_s")
    if args.theoretical:
        dev = dev.with_bandwidth(None)  # theoretical DRAM bandwidth * stream_fraction
    elif ceiling:
        dev = dev.with_bandwidth(float(ceiling))
    if doc.get("gpu") and doc["gpu"] != dev.name:
        print(f"note: file's GPU is {doc['gpu']!r}, model device {dev.name!r}", file=sys.stderr)
    rows = check(doc, dev)
    if not args.quiet:
        print(
            f"{'case':24} {'dtype':5} {'impl':12} {'kernel':6} {'measured':>10} "
            f"{'predicted':>10} {'error':>7}  bound"
        )
        for r in sorted(rows, key=lambda r: (r["group"], r["case"], r["dtype"], r["impl"])):
            print(
                f"{r['case']:24} {r['dtype']:5} {r['impl']:12} {r['kernel']:6} "
                f"{r['measured_s'] * 1e3:8.4f}ms {r['predicted_s'] * 1e3:8.4f}ms "
                f"{r['rel_error']:+7.1%}  {r['bound']}"
            )
    summary = summarize(rows)
    for g, s in summary.items():
        print(
            f"{g:7} {s['cases']:3d} cases: median |error| {s['median_abs_rel_error']:.1%}, "
            f"{s['within_20pct']:.0%} within 20%, max {s['max_abs_rel_error']:.0%}"
        )
    routes = routing_check(doc, dev)
    if routes:
        worst = max(routes, key=lambda r: r["slowdown"])
        over = [r for r in routes if r["slowdown"] > 0.10]
        print(
            f"routing {len(routes):3d} cases (model.choose, kernel vs jnp): "
            f"{len(over)} more than 10% slower than the better; worst {worst['slowdown']:+.1%} "
            f"({worst['case']} {worst['dtype']} -> {worst['target']})"
        )
        for r in over:
            print(f"  over 10%: {r['case']} {r['dtype']} -> {r['target']} {r['slowdown']:+.1%}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"device": dev.name, "summary": summary, "rows": rows, "routing": routes},
                f,
                indent=1,
            )
    kern = summary.get("kernel")
    return 0 if kern is None or kern["median_abs_rel_error"] <= args.bar else 1


if __name__ == "__main__":
    sys.exit(main())

"""Routing on the validation grid (``--grid``): the routed path against the better of our
best kernel and XLA's dot, measured in the same run; with the grid's table and misses.

A shape is a miss when the routed ``tsm2`` time exceeds ``MAX_RATIO`` times the fastest
of XLA's dot (``jnp``) and every forced kernel that passed its check, or when the routed
implementation itself failed. A shape where neither XLA's dot nor any kernel was timed is not
judged (and listed). Forced kernels that fail their float64 check are listed too: a kernel
that computes a wrong answer is a bug whatever its speed.

Where the routed path compiled to exactly the program of a reference (the records' ``program``
digests match: routed to XLA's dot, or to the kernel that was also forced), the two are one
program timed twice, and their medians differ only by noise (on an H100, L 150977x4x4 f16:
samples of 6.1-13.9 us against 6.1-22.1 us, medians 9.2 and 7.5; L 35969x6x32 f32, routed and
forced TSM2L: medians 17.5 and 14.3 us). Both then count as the median of their pooled
samples. Without digests (older records, or a jaxlib that does not expose the HLO) nothing is
pooled.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

#: The grid-routing check: the routed path at most this many times the better reference ...
MAX_RATIO = 1.10
#: ... on a grid of at least this many shapes.
MIN_SHAPES = 100
ROUTED, XLA = "tsm2", "jnp"


def _ok(rec: dict[str, Any] | None) -> bool:
    return rec is not None and rec["status"] == "ok" and bool(rec.get("seconds"))


def _shapes(records: Sequence[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for rec in records:
        if rec.get("grid"):
            out.setdefault((rec["case"], rec["dtype"]), {})[rec["impl"]] = rec
    return out


def verdict(recs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One shape's comparison: routed and reference times, the ratio, and whether it misses."""
    any_rec = next(iter(recs.values()))
    routed, xla = recs.get(ROUTED), recs.get(XLA)
    kernels = {r["kernel"]: r for r in recs.values() if r.get("kernel") and _ok(r)}
    best_kernel = min(kernels, key=lambda k: kernels[k]["seconds"]) if kernels else None
    timed = {**kernels, **({"xla": xla} if _ok(xla) else {})}
    refs = {name: r["seconds"] for name, r in timed.items()}
    pooled, pooled_with = None, None
    program = routed.get("program") if _ok(routed) else None
    for name, r in timed.items():
        if program and r.get("program") == program:
            pooled = statistics.median([*routed["samples"], *r["samples"]])
            pooled_with, refs[name] = name, pooled
            break
    best = min(refs, key=refs.__getitem__) if refs else None
    out: dict[str, Any] = {
        "case": any_rec["case"],
        "dtype": any_rec["dtype"],
        "family": any_rec["family"],
        "bytes": any_rec["bytes"],
        "route": routed.get("route") if routed else None,
        "tsm2_seconds": routed["seconds"] if _ok(routed) else None,
        "xla_seconds": xla["seconds"] if _ok(xla) else None,
        "best_kernel": best_kernel,
        "best_kernel_seconds": kernels[best_kernel]["seconds"] if best_kernel else None,
        "best": best,
        "ratio": None,
        "judged": best is not None and routed is not None,
        "pooled_seconds": pooled,
        "pooled_with": pooled_with,
        "miss": False,
        "why": None,
    }
    if not out["judged"]:
        out["why"] = "no reference timed" if routed is not None else "routed not run"
        return out
    if not _ok(routed):
        out["miss"], out["why"] = True, f"routed: {routed['status']}"
        return out
    out["ratio"] = (pooled if pooled is not None else routed["seconds"]) / refs[best]
    if out["ratio"] > MAX_RATIO:
        out["miss"], out["why"] = True, f"{out['ratio']:.3f}x of {best}"
    return out


def grid_routing(records: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The grid-routing check over the grid's records; None when the run has no grid records."""
    shapes = _shapes(records)
    if not shapes:
        return None
    results = [verdict(recs) for recs in shapes.values()]
    judged = [r for r in results if r["judged"]]
    misses = [r for r in judged if r["miss"]]
    ratios = [r["ratio"] for r in judged if r["ratio"] is not None]
    failures = [
        {"case": r["case"], "dtype": r["dtype"], "kernel": r["kernel"], "status": r["status"]}
        for recs in shapes.values()
        for r in recs.values()
        if r.get("kernel") and r["status"] != "ok" and not r["status"].startswith("skipped")
    ]
    routes: dict[str, int] = {}
    for r in judged:
        routes[r["route"] or "?"] = routes.get(r["route"] or "?", 0) + 1
    return {
        "rule": f"routed tsm2 <= {MAX_RATIO:.2f} x min(best forced kernel, XLA's dot), "
        f"on >= {MIN_SHAPES} shapes",
        "max_ratio": MAX_RATIO,
        "min_shapes": MIN_SHAPES,
        "shapes": len(results),
        "judged": len(judged),
        "misses": misses,
        "not_judged": [r for r in results if not r["judged"]],
        "kernel_failures": failures,
        "worst_ratio": max(ratios) if ratios else None,
        "routes": routes,
        "pooled": sum(r["pooled_seconds"] is not None for r in judged),
        "pooled_with_xla": sum(r.get("pooled_with") == "xla" for r in judged),
        "pass": len(judged) >= MIN_SHAPES and not misses,
        "results": results,
    }


def summary_lines(b: dict[str, Any] | None) -> list[str]:
    """The grid-routing check's lines for the text and markdown summaries."""
    if not b:
        return []
    n, misses = b["judged"], b["misses"]
    worst = f"; worst {b['worst_ratio']:.3f}x" if b["worst_ratio"] is not None else ""
    short = f"; fewer than {b['min_shapes']} shapes" if n < b["min_shapes"] else ""
    out = [
        f"grid routing (routed <= {b['max_ratio']:.2f}x min(best kernel, XLA's dot)): "
        f"{n - len(misses)}/{n} shapes within{worst}{short}; {'pass' if b['pass'] else 'MISS'}",
        "grid routes: " + ", ".join(f"{k} {v}" for k, v in sorted(b["routes"].items())),
    ]
    if b.get("pooled"):
        on_xla = b.get("pooled_with_xla", b["pooled"])
        out.append(
            f"grid: {b['pooled']} shapes compiled to a reference's own program ({on_xla} XLA's "
            f"dot's, {b['pooled'] - on_xla} a forced kernel's), timed as one (pooled samples)"
        )
    if b["not_judged"]:
        out.append(f"grid: {len(b['not_judged'])} shapes not judged (nothing to compare with)")
    if b["kernel_failures"]:
        out.append(
            f"grid: {len(b['kernel_failures'])} forced-kernel records failed: "
            + ", ".join(f"{f['kernel']} {f['case']} {f['dtype']}" for f in b["kernel_failures"])
        )
    return out


def _us(seconds: float | None) -> str:
    return f"{seconds * 1e6:.1f}" if seconds else "-"


def table_rows(records: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the grid's table: one row per shape."""
    shapes = _shapes(records)
    model = any("predicted_seconds" in r for recs in shapes.values() for r in recs.values())
    header = ["family", "case", "dtype", "MB", "floor us", "route", "tsm2 us", "% floor"]
    header += ["model us", "err %"] if model else []
    header += ["xla us", "best kernel", "kernel us", "tsm2/best"]
    rows = []
    for recs in shapes.values():
        v = verdict(recs)
        routed = recs.get(ROUTED) or {}
        rec = next(iter(recs.values()))
        frac = routed.get("floor_fraction")
        row = [v["family"], f"{rec['m']}x{rec['k']}x{rec['n']}", v["dtype"]]
        row += [f"{v['bytes'] / 1e6:.1f}", _us(rec.get("floor_seconds")), v["route"] or "-"]
        row += [_us(v["tsm2_seconds"]), f"{100 * frac:.0f}" if frac is not None else "-"]
        if model:
            err = routed.get("model_error")
            row += [
                _us(routed.get("predicted_seconds")),
                f"{100 * err:+.0f}" if err is not None else "-",
            ]
        row += [_us(v["xla_seconds"]), v["best_kernel"] or "-", _us(v["best_kernel_seconds"])]
        ratio = f"{v['ratio']:.2f}" if v["ratio"] is not None else "-"
        rows.append([*row, ratio + (" MISS" if v["miss"] else "")])
    return header, rows


def misses_markdown(b: dict[str, Any] | None) -> list[str]:
    """The grid-routing misses as a markdown table (empty when there are none)."""
    if not b or not b["misses"]:
        return []
    lines = [
        "",
        "## Grid routing misses",
        "",
        "| case | dtype | routed target | tsm2 us | xla us | best kernel | kernel us | why |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for x in b["misses"]:
        lines.append(
            f"| {x['case']} | {x['dtype']} | {x['route'] or '-'} | {_us(x['tsm2_seconds'])} | "
            f"{_us(x['xla_seconds'])} | {x['best_kernel'] or '-'} | "
            f"{_us(x['best_kernel_seconds'])} | {x['why']} |"
        )
    return lines


def progress(records: Sequence[dict[str, Any]]) -> str:
    """A short verdict for the progress line of one grid case."""
    shapes = _shapes(records)
    if not shapes:
        return ""
    v = verdict(next(iter(shapes.values())))
    if v["ratio"] is None:
        return f"  [{v['why'] or 'not judged'}]"
    return (
        f"  [routed {v['route']}: {v['ratio']:.2f}x of {v['best']}{' MISS' if v['miss'] else ''}]"
    )

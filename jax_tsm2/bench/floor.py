"""How far each product runs from its floor, and from ``jnp.matmul``: the summary's ``floor``.

The floor of a product is ``max(minimal bytes / read ceiling, empty launch)``, both measured in
the run (``ceilings.py``; docs/benchmarking.md); every record carries it (``floor_seconds``)
and the fraction of it an implementation reached (``floor_fraction``, floor / seconds: 1 at
the floor). Here the records of a run are summarized per group (the validation grid, the
suite, the APP products), one entry per shape:

- ``routed``: the floor fraction of the routed path (``tsm2``, the default mode);
- ``best``: the floor over the fastest implementation timed on the shape (every peer, every
  forced kernel);
- each as the median and the 10th percentile, overall, per family and over shapes of more
  than ``BIG_BYTES``;
- the geometric mean speed-up over ``jnp.matmul`` (jnp / routed, and jnp / best);
- the shapes where the routed path is more than ``MAX_SLOWDOWN`` times slower than jnp.

Where the routed path compiled to exactly the program of another implementation (the records'
``program`` digests match: routed to XLA's dot, or to the kernel also forced), the two are one
program timed twice, and both count as the median of their pooled samples, as in the grid's
routing check (``grid_report.py``): otherwise noise between two timings of one program would
read as a loss or a win.

Percentiles interpolate linearly between the closest ranks (numpy's default): the 10th
percentile of 11 sorted values is the second.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

ROUTED, JNP = "tsm2", "jnp"
#: Shapes of more than this many minimal bytes (decimal) are also summarized apart.
BIG_BYTES = 64_000_000
#: A shape where the routed path takes more than this times jnp's time is listed.
MAX_SLOWDOWN = 1.05
#: The grid-floor check: on at least MIN_SHAPES grid shapes, the routed path's floor fraction
#: reaches MIN_MEDIAN at the median and MIN_P10 at the 10th percentile, its geometric mean
#: speed-up over jnp is at least MIN_GEOMEAN, and no shape is listed as slower than jnp.
MIN_SHAPES = 120
MIN_MEDIAN = 0.80
MIN_P10 = 0.60
MIN_GEOMEAN = 2.0
GROUPS = ("grid", "suite", "app")


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile of ``values``, linear between the closest ranks; None if empty."""
    return float(np.percentile(np.asarray(values, float), q, method="linear")) if values else None


def geomean(values: Iterable[float]) -> float | None:
    """Geometric mean of the positive values; None if there are none."""
    vals = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def group_of(rec: dict[str, Any]) -> str:
    """``"grid"``, ``"app"`` (a product from a real program) or ``"suite"``."""
    return "grid" if rec.get("grid") else "app" if rec.get("app") else "suite"


def _ok(rec: dict[str, Any] | None) -> bool:
    return rec is not None and rec["status"] == "ok" and bool(rec.get("seconds"))


def twin(recs: dict[str, dict[str, Any]]) -> str | None:
    """The implementation that ran the routed path's very program (equal digests, both with
    samples), if one did."""
    routed = recs.get(ROUTED)
    program = routed.get("program") if _ok(routed) else None
    if not program or not routed.get("samples"):
        return None
    for name, r in recs.items():
        if name != ROUTED and _ok(r) and r.get("program") == program and r.get("samples"):
            return name
    return None


def shape_seconds(recs: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Seconds of every implementation timed on one shape; the routed path and its ``twin``
    both at the median of their pooled samples."""
    times = {name: r["seconds"] for name, r in recs.items() if _ok(r)}
    other = twin(recs)
    if other is not None:
        pooled = statistics.median([*recs[ROUTED]["samples"], *recs[other]["samples"]])
        times[ROUTED] = times[other] = pooled
    return times


def shapes_of(records: Iterable[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Records grouped by shape: ``{(group, case, dtype, app): {impl: record}}``."""
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for rec in records:
        key = (group_of(rec), rec["case"], rec["dtype"], rec.get("app"))
        out.setdefault(key, {})[rec["impl"]] = rec
    return out


def shape_entry(recs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One shape: its floor, the routed and best times and their floor fractions, jnp's."""
    any_rec = next(iter(recs.values()))
    times = shape_seconds(recs)
    floor = any_rec.get("floor_seconds")
    routed, jnp = times.get(ROUTED), times.get(JNP)
    best = min(times, key=times.__getitem__) if times else None
    best_s = times[best] if best else None
    return {
        "case": any_rec["case"],
        "dtype": any_rec["dtype"],
        "family": any_rec["family"],
        "app": any_rec.get("app"),
        "bytes": any_rec["bytes"],
        "floor_seconds": floor,
        "floor_bound": any_rec.get("floor_bound"),
        "route": (recs.get(ROUTED) or {}).get("route"),
        "tsm2_status": (recs.get(ROUTED) or {}).get("status"),
        "tsm2_seconds": routed,
        "jnp_seconds": jnp,
        "best": best,
        "best_seconds": best_s,
        "routed_fraction": floor / routed if floor and routed else None,
        "best_fraction": floor / best_s if floor and best_s else None,
        "speedup_over_jnp": jnp / routed if jnp and routed else None,
        "best_speedup_over_jnp": jnp / best_s if jnp and best_s else None,
        "slower_than_jnp": bool(jnp and routed and routed > MAX_SLOWDOWN * jnp),
    }


def _failed(status: str | None) -> bool:
    return status is not None and status != "ok" and not status.startswith("skipped")


def _stats(values: list[float]) -> dict[str, Any]:
    return {
        "shapes": len(values),
        "median": statistics.median(values) if values else None,
        "p10": percentile(values, 10),
    }


def _fractions(entries: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """Median and 10th percentile of ``key`` overall, over ``BIG_BYTES`` and per family."""
    have = [e for e in entries if e[key] is not None]
    return {
        "all": _stats([e[key] for e in have]),
        "over_64mb": _stats([e[key] for e in have if e["bytes"] > BIG_BYTES]),
        "by_family": {
            fam: _stats([e[key] for e in have if e["family"] == fam])
            for fam in sorted({e["family"] for e in have})
        },
    }


def summarize_group(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The floor summary of one group's shapes (``shape_entry`` each)."""
    return {
        "shapes": len(entries),
        "with_floor": sum(e["floor_seconds"] is not None for e in entries),
        "routed": _fractions(entries, "routed_fraction"),
        "best": _fractions(entries, "best_fraction"),
        "geomean_over_jnp": {
            "routed": geomean(e["speedup_over_jnp"] for e in entries),
            "best": geomean(e["best_speedup_over_jnp"] for e in entries),
            "shapes": sum(e["speedup_over_jnp"] is not None for e in entries),
        },
        "max_slowdown": MAX_SLOWDOWN,
        "slower_than_jnp": [e for e in entries if e["slower_than_jnp"]],
        "routed_failed": [e for e in entries if _failed(e["tsm2_status"])],
        "results": entries,
    }


def summarize(records: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """``summary.floor``: ``{group: summarize_group(...)}`` for the groups the run has
    (shapes with a routed record only); None when it has none."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for (group, *_), recs in shapes_of(records).items():
        if ROUTED in recs:
            groups.setdefault(group, []).append(shape_entry(recs))
    if not groups:
        return None
    return {g: summarize_group(groups[g]) for g in GROUPS if g in groups}


def grid_check(floor: dict[str, Any] | None) -> dict[str, Any] | None:
    """``summary.checks.grid_floor`` from the grid's floor summary; None without a grid."""
    grid = (floor or {}).get("grid")
    if not grid:
        return None
    routed = grid["routed"]["all"]
    geo = grid["geomean_over_jnp"]["routed"]
    median, p10 = routed["median"], routed["p10"]
    misses = []
    if routed["shapes"] < MIN_SHAPES:
        misses.append(f"{routed['shapes']} shapes with a floor, fewer than {MIN_SHAPES}")
    if median is None or median < MIN_MEDIAN:
        misses.append(f"median {_pct(median)} of the floor")
    if p10 is None or p10 < MIN_P10:
        misses.append(f"10th percentile {_pct(p10)} of the floor")
    if geo is None or geo < MIN_GEOMEAN:
        misses.append(f"geomean {geo:.2f}x over jnp" if geo else "no geomean over jnp")
    if grid["slower_than_jnp"]:
        misses.append(f"{len(grid['slower_than_jnp'])} shapes over {MAX_SLOWDOWN:.2f}x jnp")
    if grid["routed_failed"]:
        misses.append(f"{len(grid['routed_failed'])} shapes where the routed path did not run")
    return {
        "rule": f">= {MIN_SHAPES} shapes, routed: median >= {MIN_MEDIAN:.0%} and 10th "
        f"percentile >= {MIN_P10:.0%} of the floor, geomean over jnp >= {MIN_GEOMEAN}x, no "
        f"shape over {MAX_SLOWDOWN:.2f}x jnp",
        "shapes": routed["shapes"],
        "median": median,
        "p10": p10,
        "geomean_over_jnp": geo,
        "slower_than_jnp": len(grid["slower_than_jnp"]),
        "misses": misses,
        "pass": not misses,
    }


def _pct(x: float | None) -> str:
    return f"{100 * x:.0f}%" if x is not None else "-"


def _x(x: float | None) -> str:
    return f"{x:.2f}x" if x is not None else "-"


def _us(seconds: float | None) -> str:
    return f"{seconds * 1e6:.1f}" if seconds else "-"


def summary_lines(floor: dict[str, Any] | None) -> list[str]:
    """Per group: the floor fractions (where measured), the geomean over jnp, the count of
    shapes routed slower than jnp."""
    out = []
    for group, g in (floor or {}).items():
        r, b, geo = g["routed"], g["best"], g["geomean_over_jnp"]
        if r["all"]["shapes"]:
            fams = ", ".join(f"{f} {_pct(s['median'])}" for f, s in r["by_family"].items())
            big = r["over_64mb"]
            out.append(
                f"floor ({group}): routed median {_pct(r['all']['median'])}, 10th percentile "
                f"{_pct(r['all']['p10'])} over {r['all']['shapes']} shapes (over 64 MB: "
                f"median {_pct(big['median'])} of {big['shapes']}; by family {fams}); best of "
                f"every implementation: median {_pct(b['all']['median'])}, 10th percentile "
                f"{_pct(b['all']['p10'])}"
            )
        else:
            out.append(f"floor ({group}): not measured (no read ceiling or empty launch)")
        out.append(
            f"geomean over jnp ({group}, {geo['shapes']} shapes): routed {_x(geo['routed'])}, "
            f"best of every implementation {_x(geo['best'])}; {len(g['slower_than_jnp'])} "
            f"shapes routed over {g['max_slowdown']:.2f}x jnp"
        )
    return out


def check_lines(check: dict[str, Any] | None) -> list[str]:
    """The grid-floor check's line."""
    if not check:
        return []
    verdict = "pass" if check["pass"] else "MISS (" + "; ".join(check["misses"]) + ")"
    return [f"grid floor ({check['rule']}): {verdict}"]


def markdown(floor: dict[str, Any] | None) -> list[str]:
    """The floor summary as markdown: a table per group, then the shapes slower than jnp."""
    if not floor:
        return []
    lines = [
        "",
        "## Distance to the floor",
        "",
        "Floor = max(minimal bytes / read ceiling, empty launch); a fraction of 100% is at the "
        "floor. `routed` is `jax_tsm2.matmul` as routed, `best` the fastest implementation "
        "timed on the shape; median and 10th percentile over the shapes.",
    ]
    for group, g in floor.items():
        r, b = g["routed"], g["best"]
        rows = [("all", r["all"], b["all"]), ("over 64 MB", r["over_64mb"], b["over_64mb"])]
        rows += [(f, s, b["by_family"].get(f, {})) for f, s in r["by_family"].items()]
        geo = g["geomean_over_jnp"]
        lines += [
            "",
            f"### {group}: {g['shapes']} shapes; geomean over jnp: routed {_x(geo['routed'])}, "
            f"best {_x(geo['best'])}",
            "",
        ]
        if not g["with_floor"]:
            lines.append("No floor: the read ceiling or the empty launch was not measured.")
        else:
            lines += [
                "| shapes | n | routed median | routed p10 | best median | best p10 |",
                "|---|---|---|---|---|---|",
            ]
            lines += [
                f"| {name} | {rs['shapes']} | {_pct(rs['median'])} | {_pct(rs['p10'])} | "
                f"{_pct(bs.get('median'))} | {_pct(bs.get('p10'))} |"
                for name, rs, bs in rows
            ]
        slow = g["slower_than_jnp"]
        if slow:
            lines += [
                "",
                f"Routed more than {g['max_slowdown']:.2f}x slower than jnp:",
                "",
                "| case | dtype | route | tsm2 us | jnp us | tsm2 / jnp | floor us |",
                "|---|---|---|---|---|---|---|",
            ]
            lines += [
                f"| {e['case']} | {e['dtype']} | {e['route'] or '-'} | {_us(e['tsm2_seconds'])} | "
                f"{_us(e['jnp_seconds'])} | {e['tsm2_seconds'] / e['jnp_seconds']:.3f} | "
                f"{_us(e['floor_seconds'])} |"
                for e in slow
            ]
    return lines

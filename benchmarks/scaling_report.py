"""The report of ``benchmarks/multi_gpu.py``: scaling against one device, a markdown page, a plot.

A *series* is one workload (``row``, ``contraction``, ``kmeans``) in one kind of
scaling (``strong``: the same total problem on every device count; ``weak``: the
same problem per device), dtype and custom-call mode. Each record of a series
is compared with the series' one-device record:

- speedup: how much more work per second than one device, ``work_N / t_N`` over
  ``work_1 / t_1`` (strong: ``t_1 / t_N``; weak: ``N t_1 / t_N``), where ``t`` is
  a product's time or a k-means iteration's time;
- efficiency: speedup / N (1 is perfect scaling).

Targets, where a series has one (``TARGETS``): the row-sharded f32 product in
weak scaling at least 0.9 x N times one device's throughput, and f32 k-means in
strong scaling at least 6.5 / 8 of perfect (on 8 devices, an iteration in at
most 1/6.5 of one device's time).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# (workload, scaling, dtype) -> least efficiency on more than one device
TARGETS = {("row", "weak", "f32"): 0.9, ("kmeans", "strong", "f32"): 6.5 / 8}

SERIES_KEYS = ("bench", "scaling", "dtype", "mode")


def series_key(rec: dict[str, Any]) -> tuple[str, ...]:
    return tuple(rec[k] for k in SERIES_KEYS)


def target(rec: dict[str, Any]) -> float | None:
    """The least efficiency the record's series must reach, or None."""
    return TARGETS.get((rec["bench"], rec["scaling"], rec["dtype"]))


def seconds(rec: dict[str, Any]) -> float | None:
    """The time the record compares: per product, or per k-means iteration."""
    return rec.get("per_iter_s") if rec["bench"] == "kmeans" else rec.get("time_s")


def summarize(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per timed record with its speedup and efficiency against the one-device
    record of its series (None where that is missing), in a stable order."""
    ones = {series_key(r): r for r in records if r.get("n_devices") == 1 and seconds(r) is not None}
    rows = []
    for r in records:
        t = seconds(r)
        if t is None or "n_devices" not in r:
            continue
        n = r["n_devices"]
        one = ones.get(series_key(r))
        speedup = eff = None
        if one is not None and t > 0:
            speedup = seconds(one) / t * (n if r["scaling"] == "weak" else 1)
            eff = speedup / n
        goal = target(r) if n > 1 else None
        rows.append(
            {
                **{k: r[k] for k in SERIES_KEYS},
                "n_devices": n,
                "processes": r.get("processes", 1),
                "seconds": t,
                "speedup": speedup,
                "efficiency": eff,
                "target": goal,
                "passes": None if goal is None or eff is None else eff >= goal,
                # > 1: better than the target by that factor (throughput / (target x N x one's))
                "of_target": None if goal is None or eff is None else eff / goal,
                "problem": r.get("problem"),
                "per_device": r.get("per_device"),
                "throughput": r.get("throughput"),
                "collectives": r.get("collectives"),
            }
        )
    order = {"row": 0, "contraction": 1, "kmeans": 2}
    rows.sort(
        key=lambda x: (
            order.get(x["bench"], 9),
            x["scaling"],
            x["dtype"] != "f32",
            x["mode"],
            x["n_devices"],
        )
    )
    return rows


def _fmt_time(s: float) -> str:
    return f"{s * 1e3:.3f} ms" if s < 1 else f"{s:.2f} s"


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def collectives_text(c: dict[str, int] | None) -> str:
    """``{"all-reduce": 1, "all-gather": 0}`` as ``1 all-reduce``; ``none`` when all are 0."""
    if c is None:
        return "-"
    named = [f"{n} {op}" for op, n in c.items() if n]
    return ", ".join(named) or "none"


def markdown(doc: dict[str, Any]) -> str:
    """The result document as a markdown page: provenance, the scaling table, the k-means
    equality checks, skipped and failed cases."""
    prov = doc["provenance"]
    rows = summarize(doc["records"])
    lines = [
        f"# {doc['title']}",
        "",
        f"- devices: {prov['device_summary']}",
        f"- processes: {prov['processes']}",
        f"- date: {prov['date']}",
        f"- commit: {prov.get('commit') or '-'} (jax_tsm2 {prov['versions'].get('jax_tsm2')})",
        f"- jax {prov['versions'].get('jax')}, jaxlib {prov['versions'].get('jaxlib')}",
        f"- command: `{prov['command']}`",
    ]
    if prov.get("launcher"):
        lines.append(f"- launched by: `{prov['launcher']}`")
    lines.append(f"- environment: {', '.join(f'{k}={v}' for k, v in prov['env'].items())}")
    lines += [
        "",
        "Speedup: work per second against one device (strong scaling: the same problem; weak: "
        "N times one device's problem). Efficiency: speedup / N. Time: per product, or per "
        "k-means iteration (difference of two run lengths).",
        "",
        "| workload | scaling | dtype | mode | devices | problem | per device | time "
        "| throughput | speedup | efficiency | target | collectives |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        goal = "-"
        if r["target"] is not None:
            verdict = "" if r["passes"] is None else (" PASS" if r["passes"] else " FAIL")
            verdict += "" if r["of_target"] is None else f" ({r['of_target']:.2f}x)"
            goal = f">= {r['target']:.3f}{verdict}"
        lines.append(
            f"| {r['bench']} | {r['scaling']} | {r['dtype']} | {r['mode']} | {r['n_devices']} "
            f"| {r['problem']} | {r['per_device']} | {_fmt_time(r['seconds'])} "
            f"| {r['throughput'] or '-'} | {_fmt(r['speedup'], '.2f')} "
            f"| {_fmt(r['efficiency'], '.3f')} | {goal} | {collectives_text(r['collectives'])} |"
        )
    gathered = [r for r in doc["records"] if r.get("a_gathered")]
    sharded_rows = [r for r in rows if r["bench"] == "row" and r["n_devices"] > 1]
    if gathered:
        lines += ["", "Row-sharded programs with an all-gather (A copied between devices):", ""]
        lines += [f"- {r['label']}: {', '.join(r['all_gather_shapes'])}" for r in gathered]
    elif sharded_rows:
        lines += ["", "No all-gather in any row-sharded program: A stays where it is."]
    checks = [r for r in doc["records"] if r.get("kind") == "check" and "passes" in r]
    if checks:
        lines += [
            "",
            "k-means on N devices against one device, same data (separated clusters) and "
            "initial centroids:",
            "",
            "| dtype | devices | processes | problem | iterations | centroids max rel. diff "
            "| inertia rel. diff | labels that differ | tolerance | result |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for c in checks:
            lines.append(
                f"| {c['dtype']} | {c['n_devices']} | {c['processes']} | {c['problem']} "
                f"| {c['n_iter']} (1 device: {c['n_iter_one']}) "
                f"| {c['centroids_rel_diff']:.2e} | {c['inertia_rel_diff']:.2e} "
                f"| {c['labels_differ']} | {c['rtol']:.0e} | {'PASS' if c['passes'] else 'FAIL'} |"
            )
    other = [r for r in doc["records"] if r.get("skipped") or r.get("error")]
    if other:
        lines += ["", "Not measured:", ""]
        for r in other:
            why = r.get("skipped") or r.get("error")
            lines.append(f"- {r['label']}: {why}")
    lines.append("")
    return "\n".join(lines)


def brief(doc: dict[str, Any]) -> str:
    """A few lines for a terminal: per series, the one-device time and the efficiency on each
    device count (with the target's verdict), the collectives of the sharded products, the
    equality checks and what was not measured.

    Example:
        >>> rec = {"bench": "row", "scaling": "weak", "dtype": "f32", "mode": "auto"}
        >>> recs = [{**rec, "n_devices": n, "time_s": t} for n, t in ((1, 1e-3), (4, 1.25e-3))]
        >>> print(brief({"title": "t", "records": recs}))
        t
        row weak f32 [auto]: 1 device 1.000 ms; efficiency 4: 0.800 (target 0.9: FAIL)
    """
    lines = [doc["title"]]
    series: dict[tuple, list[dict[str, Any]]] = {}
    for r in summarize(doc["records"]):
        series.setdefault(tuple(r[k] for k in SERIES_KEYS), []).append(r)
    for key, rows in series.items():
        one = [r for r in rows if r["n_devices"] == 1]
        more = [r for r in rows if r["n_devices"] > 1]
        text = f"{key[0]} {key[1]} {key[2]} [{key[3]}]: "
        text += f"1 device {_fmt_time(one[0]['seconds'])}" if one else "no 1-device run"
        effs = [f"{r['n_devices']}: {_fmt(r['efficiency'], '.3f')}" for r in more]
        if effs:
            text += "; efficiency " + ", ".join(effs)
        goals = [r for r in more if r["passes"] is not None]
        if goals:
            verdicts = ", ".join(
                f"{'PASS' if r['passes'] else 'FAIL'}"
                + (f" on {r['n_devices']}" if len(goals) > 1 else "")
                for r in goals
            )
            text += f" (target {goals[0]['target']:.3g}: {verdicts})"
        sharded = {collectives_text(r["collectives"]) for r in more if r["collectives"] is not None}
        if sharded:
            text += f"; sharded: {' / '.join(sorted(sharded))}"
        lines.append(text)
    for c in doc["records"]:
        if c.get("kind") == "check" and "passes" in c:
            lines.append(
                f"kmeans check {c['dtype']} on {c['n_devices']} devices ({c['processes']} "
                f"processes): centroids {c['centroids_rel_diff']:.1e}, inertia "
                f"{c['inertia_rel_diff']:.1e}, {c['labels_differ']} labels differ: "
                f"{'PASS' if c['passes'] else 'FAIL'}"
            )
    missing = [r for r in doc["records"] if r.get("skipped") or r.get("error")]
    for r in missing:
        lines.append(f"not measured: {r['label']}: {r.get('skipped') or r.get('error')}")
    return "\n".join(lines)


def plot(doc: dict[str, Any], path: str | Path) -> Path | None:
    """Strong-scaling speedup and weak-scaling efficiency against devices into ``path``
    (PNG); None when matplotlib is not installed or nothing scales."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in summarize(doc["records"]) if r["speedup"] is not None]
    if not rows:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4))
    colors = {"row": "C0", "contraction": "C1", "kmeans": "C2"}
    styles = {"f32": "-", "bf16": "--"}
    n_max = max(r["n_devices"] for r in rows)
    xs = [n for n in (1, 2, 4, 8, 16) if n <= n_max] or [1]
    for ax, scaling in zip(axes, ("strong", "weak"), strict=True):
        series: dict[tuple, list] = {}
        for r in rows:
            if r["scaling"] == scaling:
                series.setdefault((r["bench"], r["dtype"], r["mode"]), []).append(r)
        for (bench, dtype, mode), pts in sorted(series.items()):
            pts.sort(key=lambda r: r["n_devices"])
            y = [r["speedup"] if scaling == "strong" else r["efficiency"] for r in pts]
            ax.plot(
                [r["n_devices"] for r in pts],
                y,
                styles.get(dtype, ":"),
                marker="o",
                color=colors.get(bench, "C7"),
                label=f"{bench} {dtype} {mode}",
            )
        if scaling == "strong":
            ax.plot(xs, xs, "k:", lw=0.8, label="perfect")
            goal = TARGETS[("kmeans", "strong", "f32")]
            ax.plot(
                xs,
                [goal * x for x in xs],
                color="C2",
                ls=":",
                lw=0.6,
                label=f"kmeans f32 target {goal:.3f} N",
            )
            ax.set_ylabel("speedup over 1 device")
            ax.set_title("strong scaling (same total problem)")
        else:
            ax.axhline(1.0, color="k", ls=":", lw=0.8, label="perfect")
            goal = TARGETS[("row", "weak", "f32")]
            ax.axhline(goal, color="C0", ls=":", lw=0.6, label=f"row f32 target {goal}")
            ax.set_ylabel("efficiency (speedup / devices)")
            ax.set_ylim(0, 1.15)
            ax.set_title("weak scaling (same problem per device)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.set_xlabel("devices")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    prov = doc["provenance"]
    fig.suptitle(f"{prov['device_summary']}, {prov['processes']} process(es), {prov['date']}")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def across(docs: list[dict[str, Any]]) -> list[str]:
    """The one-device k-means references of several runs (one process; one per device) against
    each other: the same program on the same data, so their inertia should agree to rounding.

    Example:
        >>> one = {"kind": "check", "dtype": "f32", "inertia_one": 2.0, "passes": True}
        >>> across([{"records": [one]}, {"records": [{**one, "inertia_one": 2.0000002}]}])
        ['kmeans f32 one-device reference across runs: inertia 2 / 2.0000002, rel. diff 1.0e-07']
    """
    refs: dict[str, list[float]] = {}
    for doc in docs:
        seen = set()
        for r in doc["records"]:
            if r.get("kind") == "check" and "inertia_one" in r and r["dtype"] not in seen:
                seen.add(r["dtype"])
                refs.setdefault(r["dtype"], []).append(r["inertia_one"])
    lines = []
    for dtype, values in refs.items():
        if len(values) > 1:
            diff = (max(values) - min(values)) / max(abs(max(values)), 1e-30)
            shown = " / ".join(f"{v:.9g}" for v in values)
            lines.append(
                f"kmeans {dtype} one-device reference across runs: inertia {shown}, "
                f"rel. diff {diff:.1e}"
            )
    return lines


if __name__ == "__main__":  # python benchmarks/scaling_report.py DIR/scaling.json ...
    import json
    import sys

    docs = [json.loads(Path(name).read_text()) for name in sys.argv[1:]]
    for doc in docs:
        print(brief(doc), end="\n\n")
    print("\n".join(across(docs)))

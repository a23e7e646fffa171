"""Fits the grid-driven calibration constants on half of a validation grid, tests on the other.

    python benchmarks/grid_fit.py                          # the committed H100 grid (seed 0)
    python benchmarks/grid_fit.py path/to/grid/bench.json [--margin 0.10]

The shapes are split by ``grid_index`` parity: the even half fits, the odd
half tests, then the halves swap. Each constant of ``FITTED`` is chosen from a
short list of values to minimise the median |error| of the records it acts on
(XLA's dot for ``xla_slow_passes``, the forced kernels for the scalar copy
rates) on the fitting half, one constant at a time, the others at their
committed values. The test half gets, per family, the median |error| of the
forced kernels and of ``jnp``, and issue 5's bar 2: how many shapes the
routing decision (``routing.MEASURED_WINS``, else ``model.choose`` with the
fitted constants) puts within 1.10x of the better of the best forced kernel
and ``jnp``, measured. Last, the same constants fitted on the whole grid, for
comparison with ``calibration.py``'s committed values.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import statistics
import sys
from collections import defaultdict
from typing import Any

import jax.numpy as jnp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import model_check

from jax_tsm2 import model, routing

GRID = model_check.RESULTS / "h100-2026-11-23/grid-seed0/bench.json"
# (field, entry of a tuple field or None, candidate values, which records it acts on)
FITTED: tuple[tuple[str, str | None, tuple[float, ...], tuple[str, ...]], ...] = (
    ("xla_slow_passes", None, (2.5, 2.8, 3.0, 3.3, 3.6, 4.0), ("jnp",)),
    ("scalar_elems_per_clk", "tile", (0.8, 1.0, 1.2, 1.4, 1.7, 2.0), ("tsm2r", "tsm2l")),
    ("scalar_elems_per_clk", "tsm2s", (0.8, 1.0, 1.3, 1.6, 2.0, 2.5), ("tsm2s",)),
    ("scalar_elems_per_clk", "tsm2t", (0.4, 0.5, 0.65, 0.8, 1.0), ("tsm2t",)),
)


def _with(cal: model.Calibration, field: str, key: str | None, value: float) -> model.Calibration:
    if key is None:
        return dataclasses.replace(cal, **{field: value})
    entries = tuple((k, value if k == key else v) for k, v in getattr(cal, field))
    return dataclasses.replace(cal, **{field: entries})


def _cases(doc: dict[str, Any]) -> dict[tuple, dict[str, dict[str, Any]]]:
    """Grid records per (case, dtype): impl -> record."""
    out: dict[tuple, dict[str, dict[str, Any]]] = defaultdict(dict)
    for r in doc["records"]:
        if r.get("grid") and r.get("status") == "ok" and r.get("seconds"):
            out[(r["case"], r["dtype"])][r["impl"]] = r
    return out


def _predict(rec: dict[str, Any], target: str, dev: model.Device, cal: model.Calibration):
    ((layout, shape),) = model_check.products(rec)
    dtype = model_check._DTYPES[rec["dtype"]]
    return model.predict(shape, dtype, layout, target, device=dev, calibration=cal)


def _err(rec: dict[str, Any], dev: model.Device, cal: model.Calibration) -> float:
    target = "xla" if rec["impl"] == "jnp" else rec["impl"]
    return abs(_predict(rec, target, dev, cal).seconds / rec["seconds"] - 1.0)


def fit(cases: list[dict], dev: model.Device, cal: model.Calibration) -> model.Calibration:
    """Each FITTED constant, one at a time, to the median |error| of its records in ``cases``."""
    out = cal
    for field, key, values, impls in FITTED:
        recs = [c[i] for c in cases for i in impls if i in c]
        if not recs:
            continue
        best = min(
            values,
            key=lambda v: statistics.median(_err(r, dev, _with(cal, field, key, v)) for r in recs),
        )
        out = _with(out, field, key, best)
    return out


def _route(rec: dict[str, Any], dev: model.Device, cal: model.Calibration, margin: float) -> str:
    """Mode "auto" without a tune cache: ``routing.MEASURED_WINS``, else ``model.choose``
    with ``cal`` (``routing.route`` itself always uses the committed calibration)."""
    ((layout, shape),) = model_check.products(rec)
    p = model.problem_from(shape)
    dt = model_check._DTYPES[rec["dtype"]]
    names, _ = routing.candidates(p, layout)
    for name in names:
        if any(w.covers(name, jnp.dtype(dt), p, layout) for w in routing.MEASURED_WINS):
            return name
    if not names:
        return "xla"
    c = model.choose(p, dt, layout, device=dev, kernels=names, margin=margin, calibration=cal)
    return c.target


def evaluate(cases: list[dict], dev: model.Device, cal: model.Calibration, margin: float) -> dict:
    """Per family median |error| (kernels, jnp) and bar 2 on ``cases``."""
    errs: dict[tuple[str, str], list[float]] = defaultdict(list)
    within, misses = 0, []
    for c in cases:
        xla = c["jnp"]
        fam = xla["family"]
        kernels = {i: r for i, r in c.items() if i in model.KERNEL_IDS}
        for i, r in kernels.items():
            errs[(fam, i)].append(_err(r, dev, cal))
        errs[(fam, "jnp")].append(_err(xla, dev, cal))
        target = _route(xla, dev, cal, margin)
        best = min([xla["seconds"]] + [r["seconds"] for r in kernels.values()])
        chosen = xla if target == "xla" else kernels.get(target)
        ratio = chosen["seconds"] / best if chosen else float("nan")
        if ratio <= 1.10:
            within += 1
        else:
            misses.append((xla["case"], xla["dtype"], target, ratio))
    med = {f"{f} {i}": (statistics.median(v), len(v)) for (f, i), v in sorted(errs.items())}
    return {"median_error": med, "within": within, "shapes": len(cases), "misses": misses}


def _report(title: str, ev: dict) -> None:
    print(title)
    for k, (m, n) in ev["median_error"].items():
        print(f"  {k:12} {n:3d} records  median |error| {m:6.1%}")
    print(f"  bar 2: {ev['within']}/{ev['shapes']} shapes within 1.10x")
    for case, dt, target, ratio in sorted(ev["misses"], key=lambda x: -x[3]):
        print(f"    miss: {case} {dt} -> {target} {ratio:.2f}x")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bench_json", nargs="?", default=str(GRID))
    ap.add_argument("--margin", type=float, default=model.ROUTE_MARGIN)
    args = ap.parse_args(argv)
    doc = json.loads(pathlib.Path(args.bench_json).read_text())
    dev = model_check.device_for(doc)
    cases = [c for c in _cases(doc).values() if "jnp" in c]
    halves = [[c for c in cases if c["jnp"]["grid_index"] % 2 == parity] for parity in (0, 1)]
    held_within = held_shapes = 0
    for fit_half, test_half, name in (
        (0, 1, "even fits, odd tests"),
        (1, 0, "odd fits, even tests"),
    ):
        cal = fit(halves[fit_half], dev, model.CALIBRATION)
        fitted = {
            f"{f}[{k}]" if k else f: dict(getattr(cal, f)).get(k) if k else getattr(cal, f)
            for f, k, _, _ in FITTED
        }
        print(f"{name}: fitted {fitted}")
        ev = evaluate(halves[test_half], dev, cal, args.margin)
        _report(f"held-out half ({name})", ev)
        held_within += ev["within"]
        held_shapes += ev["shapes"]
    print(f"held-out bar 2 over both halves: {held_within}/{held_shapes} within 1.10x")
    cal = fit(cases, dev, model.CALIBRATION)
    fitted = {
        f"{f}[{k}]" if k else f: dict(getattr(cal, f)).get(k) if k else getattr(cal, f)
        for f, k, _, _ in FITTED
    }
    print(f"whole grid: fitted {fitted}")
    _report(
        "whole grid, committed calibration (in-sample)",
        evaluate(cases, dev, model.CALIBRATION, args.margin),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

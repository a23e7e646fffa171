"""Predicted beside measured, per case, for benchmark result files: the model's error.

    python benchmarks/model_check.py                  # every committed H100 file (COMMITTED)
    python benchmarks/model_check.py path/to/bench.json [more.json ...] [--quiet]

For every record of a forced kernel (impl ``tsm2_kernel``, or ``tsm2[...]``
names such as ``tsm2[prefer]``: the kernel comes from the record's ``route``;
or the validation grid's ``tsm2r`` ... ``tsm2t``, one impl per kernel),
of XLA's dot (``jnp``; ``jnp_highest`` apart) and of the routed path
(``tsm2``), prints the model's time (``jax_tsm2.model``) beside the measured
median and the relative error, then the median |error| per family and
kernel, each marked ``in`` (the calibration was fitted to that family in that
file), ``repeat`` (the same shapes as a fitted family, another run) or
``out`` (nothing was fitted to it: a real test). A record is read in its
family's layout: NT ``A @ B.T`` is layout nt; TN ``A.T @ B`` (A m x k, B m x
n) is layout tn with the model's m, k, n = the record's k, m, n; GRAD is two
products, the forward ``A @ x`` (nn) and the backward ``A.T @ r`` (tn),
predicted as their sum; records that name a ``layout`` are read in it.

The device is the H100 preset with the file's measured read ceiling
(``ceilings.read_bytes_per_s``) as its bandwidth, unless ``--preset`` or
``--theoretical`` says otherwise. Then, per case with both a forced kernel and
``jnp`` measured, what ``routing.route`` picks in mode "auto" on that device
and how much slower that measured than the better of the two.

For validation grids (``--grid`` runs), ``benchmarks/grid_fit.py`` fits the
grid constants on one grid and reports the per-family error and routing on
the other (``--simulate NEW.json``: routing with the committed constants).

``--json`` writes the tables for other tools. Exits 1 when the median error
of a family's forced kernels or of its ``jnp`` records exceeds ``--max-error``
(default 0.20), over at least ``--min-records`` records (default 4: a median of
fewer says little).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
from typing import Any

import jax

from jax_tsm2 import model, routing
from jax_tsm2._ffi import _tsm2_ext

_DTYPES = {"f32": "float32", "f64": "float64", "bf16": "bfloat16", "f16": "float16"}
_ITEMSIZE = {"f32": 4, "f64": 8, "bf16": 2, "f16": 2}
XLA_IMPLS = ("jnp", "jnp_highest")
RESULTS = pathlib.Path(__file__).resolve().parent / "results"
# The committed H100 runs the model is checked against (benchmarks/results/h100/README.md):
# the R and L suites the row-tile constants were fitted to, the first NT/TN/S run (its NT
# kernels and every XLA record still count), and the current NT/TN/S/GRAD run.
COMMITTED = (
    "h100/calibration-r-l/bench.json",
    "h100/calibration-layouts/bench.json",
    "h100/suite-layouts/bench.json",
)
# Families ("S") or a family's dtype ("S:bf16") whose kernel records in a
# file measured a kernel since rewritten (TSM2T's staging and its tensor-core
# tiles, TSM2S's cluster and tensor-map kernels): the model describes the
# current kernel, so only those files' XLA records still count.
SUPERSEDED: dict[str, frozenset[str]] = {
    # Its GRAD records (forward XLA, backward an earlier TSM2T) still count: the kernel
    # path measured faster than XLA's dot there, as the current one does.
    "h100/calibration-layouts": frozenset({"TN", "S"}),
}

# What the calibration (jax_tsm2/model/calibration.py) was fitted to, per file:
# those families' figures are in-sample.
IN_SAMPLE: dict[str, frozenset[str]] = {
    "h100/calibration-r-l": frozenset({"R", "L"}),
    "h100/calibration-layouts": frozenset({"S", "TN"}),
    # The grid constants (benchmarks/grid_fit.py: fitted on both grids; it
    # reports each grid held out).
    "h100/grid-seed0": frozenset({"R", "L", "NT", "S", "TN"}),
    "h100/grid-seed1": frozenset({"R", "L", "NT", "S", "TN"}),
}
# The same shapes as a fitted family, measured again: TSM2T was refitted to the TN suite's
# shapes after its rewrite, and TSM2S's tensor-map constants to the S suite's 8192 x 14336.
REPEATS: dict[str, frozenset[str]] = {
    "h100/suite-layouts": frozenset({"TN", "S"}),
}


# Files made before bf16/f16 TSM2R past n = 4 moved to tensor cores
# (ffi/matmul/kernels/tsm2_mma.cuh): their records of it timed the CUDA-core tile.
BEFORE_R_TENSOR_CORES = frozenset(
    {
        "h100/calibration-r-l",
        "h100/calibration-layouts",
        "h100/suite-layouts",
        "h100/grid-seed0",
        "h100/grid-seed1",
    }
)


def on_row_stream(rec: dict[str, Any], kernel: str = "tsm2r") -> bool:
    """Whether ``kernel`` (TSM2R, or TSM2L past its tile's k) now runs ``rec``'s product on
    the row stream (``ffi/matmul/kernels/row_stream.cuh``): one product in nn or nt of a
    width and row length it takes. Every committed file predates it: their records of
    such products timed a row tile."""
    prods = products(rec)
    if len(prods) != 1 or prods[0][0] not in ("nn", "nt") or len(prods[0][1]) != 3:
        return False
    m, k, n = prods[0][1]
    if kernel == "tsm2l" and k <= routing.TSM2L_MAX_K:
        return False
    return _tsm2_ext.row_stream_plan(_DTYPES[rec["dtype"]], m, k, n) is not None


def on_flat_t(rec: dict[str, Any]) -> bool:
    """Whether TSM2T now runs ``rec``'s product with flat stages
    (``ffi/matmul/kernels/tn_flat.cuh``): a tn product whose rows are not whole vectors and
    whose C one tile covers. Every committed file predates them: their records of such
    products timed the tiled stages."""
    prods = products(rec)
    if len(prods) != 1 or prods[0][0] != "tn":
        return False
    *batch, m, k, n = prods[0][1]
    plan = _tsm2_ext.split_plan(_DTYPES[rec["dtype"]], 3, batch[0] if batch else 1, m, k, n, 132)
    return plan["flat"]


def on_covered_t(rec: dict[str, Any]) -> bool:
    """Whether TSM2T now stages ``rec``'s f32/f64 product on its tensor-core tiles as the
    16-byte vectors that cover its rows and reads them in place (``ffi/matmul/kernels/tn.cuh``
    LoadTCover): a tn product on those tiles whose rows are not whole vectors. The runs
    committed before it timed element copies there."""
    prods = products(rec)
    if rec["dtype"] not in ("f32", "f64") or len(prods) != 1 or prods[0][0] != "tn":
        return False
    *batch, m, k, n = prods[0][1]
    plan = _tsm2_ext.split_plan(_DTYPES[rec["dtype"]], 3, batch[0] if batch else 1, m, k, n, 132)
    vec = 16 // _ITEMSIZE[rec["dtype"]]
    return bool(plan["mma"] and not plan["flat"] and (m % vec or n % vec))


def on_l_mma(rec: dict[str, Any]) -> bool:
    """Whether TSM2L now runs ``rec``'s product on tensor cores
    (``ffi/matmul/kernels/tsm2l_mma.cuh``): one product in nn or nt whose rows are whole
    vectors and whose B is wide. Every committed file predates that tile: their records of
    such products timed the CUDA-core L tile."""
    prods = products(rec)
    if len(prods) != 1 or prods[0][0] not in ("nn", "nt") or len(prods[0][1]) != 3:
        return False
    _, k, n = prods[0][1]
    return bool(_tsm2_ext.tile_config(_DTYPES[rec["dtype"]], 1, k, n).get("l_mma"))


def superseded(label: str, rec: dict[str, Any]) -> bool:
    """Whether ``rec``'s kernel was rewritten since file ``label`` measured it."""
    old = SUPERSEDED.get(label, frozenset())
    if rec.get("family") in old or f"{rec.get('family')}:{rec.get('dtype')}" in old:
        return True
    kernels = {rec.get("impl"), *str(rec.get("route") or "").split(",")}
    if rec.get("dtype") in _DTYPES and any(
        on_row_stream(rec, kern) for kern in kernels & {"tsm2r", "tsm2l"}
    ):
        return True
    if rec.get("dtype") in _DTYPES and "tsm2t" in kernels and on_flat_t(rec):
        return True
    if rec.get("dtype") in _DTYPES and "tsm2l" in kernels and on_l_mma(rec):
        return True
    if rec.get("dtype") in _DTYPES and "tsm2t" in kernels and on_covered_t(rec):
        return True
    return (
        label in BEFORE_R_TENSOR_CORES
        and "tsm2r" in kernels
        and rec.get("dtype") in ("bf16", "f16")
        and int(rec.get("n") or 0) > 4
    )


def file_label(path: str | pathlib.Path) -> str:
    """The run's directory relative to benchmarks/results (or the file's folder name)."""
    p = pathlib.Path(path).resolve().parent
    try:
        return str(p.relative_to(RESULTS))
    except ValueError:
        return p.name


def sample_of(label: str, family: str) -> str:
    if family in IN_SAMPLE.get(label, ()):
        return "in"
    return "repeat" if family in REPEATS.get(label, ()) else "out"


def products(rec: dict[str, Any]) -> list[tuple[str, tuple[int, ...]]]:
    """The record's products as (layout, model sizes (batch?,) m, k, n)."""
    fam, m, k, n = rec.get("family"), rec["m"], rec["k"], rec["n"]
    batch = (rec["batch"],) if rec.get("batch") else ()
    if rec.get("layout") in model.LAYOUTS:
        return [(rec["layout"], (*batch, m, k, n))]
    if fam == "NT":
        return [("nt", (*batch, m, k, n))]
    if fam == "TN":  # A (m x k), B (m x n): C = A^T B is k x n, contracting over m
        return [("tn", (*batch, k, m, n))]
    if fam == "GRAD":  # r = A x - y, then A^T r (the x gradient)
        return [("nn", (*batch, m, k, n)), ("tn", (*batch, k, m, n))]
    return [("nn", (*batch, m, k, n))]


def _targets(route: str | None, layouts: list[str]) -> list[str] | None:
    """Which target ran each product of a record, from its ``route`` ("tsm2r,tsm2t", ...)."""
    if route is None:
        return None
    names = [r.strip() for r in route.split(",")]
    if names == ["xla"]:
        return ["xla"] * len(layouts)
    if not all(r in model.KERNEL_IDS for r in names):
        return None
    if len(names) == len(layouts):
        return names
    # Fewer kernels than products: each ran the product whose layout it takes.
    out = []
    for lay in layouts:
        hit = [r for r in names if lay in routing.KERNEL_LAYOUTS[r]]
        out.append(hit[0] if hit else "xla")
    return out


def _impl_group(rec: dict[str, Any]) -> str | None:
    impl = rec.get("impl", "")
    if impl == "tsm2_kernel" or (impl.startswith("tsm2[") and impl.endswith("]")):
        return "kernel"
    if impl in model.KERNEL_IDS:  # the validation grid's forced kernels, one impl each
        return "kernel"
    if impl == "jnp":
        return "xla"
    if impl == "jnp_highest":
        return "xla_highest"
    if impl == "tsm2":
        return "routed"
    return None


def check(
    doc: dict[str, Any], device: model.Device, label: str = "", sample: bool = True
) -> list[dict[str, Any]]:
    """One row per modelled record: measured and predicted seconds, error, groups."""
    rows = []
    for rec in doc.get("records", []):
        group = _impl_group(rec)
        if group is None or rec.get("status") != "ok" or not rec.get("seconds"):
            continue
        if not group.startswith("xla") and superseded(label, rec):
            continue
        prods = products(rec)
        layouts = [lay for lay, _ in prods]
        targets = ["xla"] * len(prods) if group.startswith("xla") else None
        if rec["impl"] in model.KERNEL_IDS:
            targets = [rec["impl"]] * len(prods)
        targets = targets or _targets(rec.get("route"), layouts)
        if targets is None or (group == "kernel" and "xla" in targets):
            continue
        dtype = _DTYPES.get(rec["dtype"], rec["dtype"])
        precision = "highest" if group == "xla_highest" else "default"
        preds = [
            model.predict(shape, dtype, lay, t, device=device, xla_precision=precision)
            for (lay, shape), t in zip(prods, targets, strict=True)
        ]
        seconds = sum(q.seconds for q in preds)
        family = rec.get("family", "?")
        rows.append(
            {
                "file": label,
                "sample": sample_of(label, family) if sample else "out",
                "family": family,
                "group": group,
                "case": rec["case"],
                "dtype": rec["dtype"],
                "impl": rec["impl"],
                "kernel": "+".join(targets),
                "measured_s": rec["seconds"],
                "predicted_s": seconds,
                "rel_error": (seconds - rec["seconds"]) / rec["seconds"],
                "bound": "+".join(q.bound for q in preds),
            }
        )
    return rows


def _stats(errs: list[float]) -> dict[str, float]:
    return {
        "cases": len(errs),
        "median_abs_rel_error": statistics.median(errs),
        "within_20pct": sum(e <= 0.2 for e in errs) / len(errs),
        "max_abs_rel_error": max(errs),
    }


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Median |error| per implementation group: kernel, xla, xla_highest, routed."""
    out = {}
    for g in ("kernel", "xla", "xla_highest", "routed"):
        errs = [abs(r["rel_error"]) for r in rows if r["group"] == g]
        if errs:
            out[g] = _stats(errs)
    return out


def by_family(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median |error| per (family, group, kernel), over all files, with the sample marks."""
    keys = sorted({(r["family"], r["group"], r["kernel"]) for r in rows if r["group"] != "routed"})
    out = []
    for fam, group, kern in keys:
        sel = [r for r in rows if (r["family"], r["group"], r["kernel"]) == (fam, group, kern)]
        marks = sorted({r["sample"] for r in sel})
        st = _stats([abs(r["rel_error"]) for r in sel])
        out.append(
            {"family": fam, "group": group, "kernel": kern, "sample": marks,
             "records": len(sel), **st}
        )  # fmt: skip
    return out


def _forced_times(recs: dict[str, dict[str, Any]], layouts: list[str]) -> dict[tuple, float]:
    """Measured seconds per forced kernel combination: ``tsm2_kernel`` (by its route), and
    the grid's per-kernel records (impl ``tsm2r`` ... ``tsm2t``) for one-product cases."""
    out = {}
    kern = recs.get("tsm2_kernel")
    if kern is not None:
        targets = _targets(kern.get("route"), layouts)
        if targets is not None and "xla" not in targets:
            out[tuple(targets)] = kern["seconds"]
    if len(layouts) == 1:
        for name in model.KERNEL_IDS:
            if name in recs:
                out[(name,)] = recs[name]["seconds"]
    return out


def routing_check(
    doc: dict[str, Any], device: model.Device, label: str = ""
) -> list[dict[str, Any]]:
    """Per case with a forced kernel and ``jnp`` measured: what ``routing.route`` picks in
    mode "auto" on ``device`` for each product, and how the choice measured.

    ``kernel`` is the fastest forced kernel measured (``kernel_over_xla`` its time
    over ``jnp``'s); ``slow_kernels`` every forced one that measured more than 10%
    slower than ``jnp``. ``slowdown`` is the chosen path's measured time (``jnp``,
    a forced kernel, or the routed ``tsm2`` record where it ran the same targets)
    over the best of the forced kernels and ``jnp``, minus one; None where that
    combination was not measured in the file. Kernel records of the families
    ``SUPERSEDED`` for ``label`` do not count."""
    by_case: dict[tuple, dict[str, dict[str, Any]]] = {}
    for rec in doc.get("records", []):
        if superseded(label, rec) and not rec["impl"].startswith("jnp"):
            continue
        if rec.get("status") == "ok" and rec.get("seconds"):
            by_case.setdefault((rec["case"], rec["dtype"]), {})[rec["impl"]] = rec
    out = []
    for (case, dt), recs in sorted(by_case.items()):
        xla = recs.get("jnp")
        if xla is None:
            continue
        prods = products(xla)
        layouts = [lay for lay, _ in prods]
        forced = _forced_times(recs, layouts)
        if not forced:
            continue
        dtype = _DTYPES.get(dt, dt)
        picked, reasons = [], []
        for lay, shape in prods:
            p = model.problem_from(shape)
            a, b = _operands(p, lay, dtype)
            r = routing.route(a, b, dtype, platform="cuda", mode="auto", layout=lay, device=device)
            picked.append(r.target)
            reasons.append(r.reason)
        chosen = forced.get(tuple(picked))  # None: a combination not measured in this run
        if all(t == "xla" for t in picked):
            chosen = xla["seconds"]
        elif chosen is None and "tsm2" in recs:  # the routed path, timed as it routed then
            routed = _targets(recs["tsm2"].get("route"), layouts)
            chosen = recs["tsm2"]["seconds"] if routed == picked else None
        fastest = min(forced, key=forced.get)
        best = min(forced[fastest], xla["seconds"])
        out.append(
            {
                "case": case,
                "dtype": dt,
                "family": xla.get("family"),
                "kernel": "+".join(fastest),
                "target": "+".join(picked),
                "kernel_over_xla": forced[fastest] / xla["seconds"],
                "slow_kernels": [
                    "+".join(k) for k, t in forced.items() if t > 1.10 * xla["seconds"]
                ],
                "slowdown": None if chosen is None else chosen / best - 1.0,
                "reason": " | ".join(reasons),
            }
        )
    return out


def _operands(p: model.Problem, layout: str, dtype: str):
    a = {"nn": (p.m, p.k), "nt": (p.m, p.k), "tn": (p.k, p.m)}[layout]
    b = {"nn": (p.k, p.n), "nt": (p.n, p.k), "tn": (p.k, p.n)}[layout]
    if p.batch is not None:
        a, b = (p.batch, *a), (p.batch, *b)
    return jax.ShapeDtypeStruct(a, dtype), jax.ShapeDtypeStruct(b, dtype)


def device_for(doc: dict[str, Any], preset: str = "h100-sxm", theoretical: bool = False):
    """The preset, with the file's measured read ceiling unless ``theoretical``."""
    dev = model.PRESETS[preset]
    ceiling = (doc.get("ceilings") or {}).get("read_bytes_per_s")
    if theoretical:
        return dev.with_bandwidth(None)  # theoretical DRAM bandwidth * stream_fraction
    return dev.with_bandwidth(float(ceiling)) if ceiling else dev


def committed_files() -> list[pathlib.Path]:
    return [RESULTS / f for f in COMMITTED]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bench_json", nargs="*", help="default: the committed H100 files")
    ap.add_argument("--preset", default="h100-sxm", help="device preset (model.PRESETS)")
    ap.add_argument(
        "--theoretical", action="store_true", help="no measured bandwidth: the driver's figure"
    )
    ap.add_argument("--max-error", type=float, default=0.20, help="median |error| allowed")
    ap.add_argument(
        "--min-records", type=int, default=4, help="records a median needs to be judged"
    )
    ap.add_argument("--json", help="write the tables here")
    ap.add_argument("--quiet", action="store_true", help="summaries only")
    args = ap.parse_args(argv)
    files = [pathlib.Path(f) for f in args.bench_json] or committed_files()
    rows, routes = [], []
    for f in files:
        doc = json.loads(f.read_text())
        dev = device_for(doc, args.preset, args.theoretical)
        if doc.get("gpu") and doc["gpu"] != dev.name:
            print(f"note: {f}: GPU {doc['gpu']!r}, model device {dev.name!r}", file=sys.stderr)
        label = file_label(f)
        rows += check(doc, dev, label)
        routes += [
            dict(r, file=label) for r in routing_check(doc, model.PRESETS[args.preset], label)
        ]
    if not args.quiet:
        print(
            f"{'case':24} {'dtype':5} {'impl':12} {'kernel':12} {'measured':>10} "
            f"{'predicted':>10} {'error':>7}  bound"
        )
        for r in sorted(rows, key=lambda r: (r["family"], r["group"], r["case"], r["dtype"])):
            print(
                f"{r['case']:24} {r['dtype']:5} {r['impl']:12} {r['kernel']:12} "
                f"{r['measured_s'] * 1e3:8.4f}ms {r['predicted_s'] * 1e3:8.4f}ms "
                f"{r['rel_error']:+7.1%}  {r['bound']}"
            )
        print()
    fams = by_family(rows)
    print("median |predicted - measured| / measured, per family and kernel")
    print("(sample: in = fitted to these records, repeat = fitted shapes in another run,")
    print(" out = nothing fitted to them)")
    for s in fams:
        print(
            f"  {s['family']:5} {s['group']:12} {s['kernel']:12} {s['cases']:3d} cases "
            f"median {s['median_abs_rel_error']:6.1%}  max {s['max_abs_rel_error']:5.0%}  "
            f"{s['within_20pct']:4.0%} within 20%  [{','.join(s['sample'])}]"
        )
    summary = summarize(rows)
    for g, s in summary.items():
        print(
            f"{g:12} {s['cases']:3d} cases: median |error| {s['median_abs_rel_error']:.1%}, "
            f"{s['within_20pct']:.0%} within 20%, max {s['max_abs_rel_error']:.0%}"
        )
    if routes:
        print(f"routing (mode auto, {args.preset} preset) on {len(routes)} measured cases:")
        slow, missed, unmeasured = [], [], []
        for r in routes:
            tag = ""
            if r["slowdown"] is None:
                unmeasured.append(r)
                tag = "  (this combination was not measured in this run)"
            elif r["slowdown"] > 0.10:
                slow.append(r)
                tag = f"  ** {r['slowdown']:+.0%} slower than the better **"
            elif r["target"].replace("+", "").replace("xla", "") == "" and (
                r["kernel_over_xla"] < 1 / 1.1
            ):
                missed.append(r)
                tag = "  (missed: the kernel measured >10% faster)"
            if tag or not args.quiet:
                print(
                    f"  {r['file']}: {r['case']} {r['dtype']} kernel/jnp "
                    f"{r['kernel_over_xla']:.2f} -> {r['target']}{tag}"
                )
        print(
            f"routing: {len(slow)} of {len(routes)} picked a path >10% slower than the better "
            f"of kernel and jnp; {len(missed)} missed a kernel >10% faster; "
            f"{len(unmeasured)} picked a combination not measured"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"summary": summary, "families": fams, "rows": rows, "routing": routes},
                f,
                indent=1,
            )
    over = [
        s
        for s in fams
        if s["group"] in ("kernel", "xla")
        and s["records"] >= args.min_records
        and s["median_abs_rel_error"] > args.max_error
    ]
    for s in over:
        print(f"error over --max-error: {s['family']} {s['group']} {s['kernel']}", file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())

"""Calibrated routing replayed against measured harness runs, without a GPU.

A harness run (``python -m jax_tsm2.bench --grid ...`` or ``--family APP``) times every
implementation of each product: XLA's dot (``jnp``) and each kernel forced. This script asks
calibrated routing (``jax_tsm2.tune.calibrate.decide``, from a calibration file) which it would
pick for every product of those runs, and scores the picks against the measured times: a
*miss* is a pick at least 1.10x slower than the fastest implementation measured, a *loss* a
pick more than 5% slower than ``jnp.matmul``. Routing rules can so be compared on the same
measurements offline; a rule changed this way is then judged on a grid seed it was not
compared on.

    python benchmarks/routing_replay.py \\
        jax_tsm2/calibrations/calibration-NVIDIA-H200-sm90-132sm.json \\
        grid/bench.json app/bench.json --verbose
    python benchmarks/routing_replay.py none --theoretical-tbps 4.8 grid/bench.json
    python benchmarks/routing_replay.py CAL.json grid/bench.json --retimed streams.json

With ``--verbose`` every miss and loss is listed with the rule of ``calibrate.decide`` that
settled it (``calibrate.RULES``: the floor fraction, a kernel never probed near the product,
the corrected predictions against the margin, ...), and the misses are tallied by rule.

With ``--retimed FILE[#RUN]`` (repeatable), the kernel times a ``benchmarks/stream_kernels.py``
file (or its run ``RUN``) measured on products of the runs replace what the runs recorded:
a grid record may have timed a kernel since changed.

With ``none`` in place of the file, routing runs as on a GPU with no calibration
(``JAX_TSM2_CALIBRATION=off``, no tune cache: ``routing.route`` in mode "auto"), on a device
whose driver reports the given theoretical DRAM bandwidth.

The device is the one each run recorded (name, SMs, L2); the bandwidth is the calibration's.

With ``--model-error`` it also prints the calibrated model's error on the runs: for every
product, the prediction (``jax_tsm2.bench.predict.calibrated_seconds``, as the harness's
``--model`` computes it) of the target calibrated routing picks, of XLA's dot and of each
kernel forced, against what that implementation measured; median and 90th percentile of
|predicted - measured| / measured per target and over all. Records the harness annotated
(``model_error``) are recomputed with the target that ran them, and the largest difference
is printed: zero where the calibration and the model are the ones the run used.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import json
import math
import os
import pathlib
import statistics
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

from jax_tsm2 import model, routing
from jax_tsm2.bench.predict import calibrated_seconds
from jax_tsm2.problem import problem_of
from jax_tsm2.tune import cache, calibrate

LAYOUTS = {"R": "nn", "L": "nn", "S": "nn", "NT": "nt", "TN": "tn"}
DTYPES = {"f32": "float32", "f64": "float64", "bf16": "bfloat16", "f16": "float16"}
MISS_FACTOR = 1.10  # a pick this much slower than the fastest measured is a miss
LOSS_FACTOR = 1.05  # a pick this much slower than jnp.matmul is a loss


@dataclasses.dataclass
class Case:
    """One product of a run: its operands and every implementation's measured seconds."""

    name: str
    family: str
    dtype: str
    shapes: tuple[list[int], list[int]]
    seconds: dict[str, float]
    # XLA's plan for the product, where the run recorded one (``xla_plan`` of a record:
    # the harness's runs with --model on a GPU).
    xla_plan: model.XlaPlan | None = None

    def kernel_seconds(self, kernel: str) -> float:
        # Family APP records the forced kernel as "tsm2_kernel": the one kernel routing
        # would weigh for the product.
        return self.seconds.get(kernel, self.seconds.get("tsm2_kernel", math.nan))


def plan_source(cases: list[Case]) -> calibrate.PlanSource:
    """XLA's plans recorded with ``cases``, looked up as routing compiles them: where the
    calibration's probes carry plans, the replay predicts XLA's dot from these, as routing
    on the GPU did from the plans it compiled."""
    plans = {}
    for c in cases:
        if c.xla_plan is not None:
            p, layout = _problem(c.family, c.shapes)
            plans[(DTYPES[c.dtype], layout, p)] = c.xla_plan
    return lambda p, dtype, layout: plans.get((dtype, layout, p))


def corrections_of(
    data: calibrate.CalibrationData, cases: list[Case], recorded: dict[str, Any]
) -> calibrate.Corrections:
    """``data``'s corrections on the GPU the run recorded, predicting XLA's dot from the
    run's recorded plans where the calibration is planned: never from plans compiled here,
    on a machine that is not the run's GPU."""
    return calibrate.Corrections(data, device_of(recorded), plans=plan_source(cases))


def read_cases(path: pathlib.Path) -> tuple[list[Case], dict[str, Any]]:
    doc = json.loads(path.read_text())
    cases: dict[tuple[str, str], Case] = {}
    for r in doc["records"]:
        if r["family"] not in LAYOUTS or r.get("status") != "ok" or r.get("seconds") is None:
            continue
        key = (r["case"], r["dtype"])
        case = cases.setdefault(
            key,
            Case(r["case"], r["family"], r["dtype"], tuple(r["operand_shapes"]), {}),
        )
        case.seconds[r["impl"]] = float(r["seconds"])
        if r.get("xla_plan") is not None:
            case.xla_plan = model.XlaPlan.from_json(r["xla_plan"])
    return [c for c in cases.values() if "jnp" in c.seconds], doc["device"]


def retime(cases: list[Case], path: pathlib.Path, run: str | None = None) -> int:
    """Replace, in ``cases``, each kernel time that a ``benchmarks/stream_kernels.py`` file
    measured again on the same product (a grid record may have timed a kernel since
    changed); ``run`` names the run of a file of several. Returns how many were replaced.

    Example:
        >>> import tempfile
        >>> row = {"layout": "nn", "dtype": "f32", "m": 8, "k": 4096, "n": 4096,
        ...        "kernel": "tsm2s", "kernel_us": 20.0}
        >>> f = pathlib.Path(tempfile.mkdtemp()) / "streams.json"
        >>> _ = f.write_text(json.dumps({"rows": [row]}))
        >>> case = Case("S:8x4096x4096", "S", "f32", ([8, 4096], [4096, 4096]),
        ...             {"jnp": 3e-5, "tsm2s": 4e-5})
        >>> retime([case], f), round(case.seconds["tsm2s"] * 1e6, 3)
        (1, 20.0)
    """
    doc = json.loads(path.read_text())
    if run is not None:
        runs = doc["runs"]
        if run not in runs:
            raise KeyError(f"{path} has no run {run!r}; it has {sorted(runs)}")
        doc = runs[run]
    again = {
        (row["layout"], row["dtype"], (row["m"], row["k"], row["n"]), row["kernel"]): (
            row["kernel_us"] * 1e-6
        )
        for row in doc["rows"]
    }
    replaced = 0
    for case in cases:
        p, layout = _problem(case.family, case.shapes)
        for kernel in list(case.seconds):
            key = (layout, case.dtype, (p.m, p.k, p.n), kernel)
            if key in again:
                case.seconds[kernel] = again[key]
                replaced += 1
    return replaced


def device_of(recorded: dict[str, Any]) -> model.Device:
    """The run's GPU as the model sees it: the H100 preset's per-SM resources (Hopper's, as
    an H200's) with the run's name, SM count and L2; bandwidth comes from the calibration."""
    return dataclasses.replace(
        model.H100_SXM,
        name=recorded.get("name", model.H100_SXM.name),
        sm_count=int(recorded.get("sm_count", model.H100_SXM.sm_count)),
        l2_bytes=int(recorded.get("l2_bytes") or model.H100_SXM.l2_bytes),
        measured_bandwidth=None,
        source="driver",
    )


@contextlib.contextmanager
def no_calibration_and_no_cache() -> Iterator[None]:
    """Routing as on a GPU nobody has calibrated or tuned: ``JAX_TSM2_CALIBRATION=off`` and an
    empty tune cache, for the duration."""
    saved = {k: os.environ.get(k) for k in (calibrate.ENV_VAR, cache.ENV_DIR)}
    with tempfile.TemporaryDirectory() as empty:
        os.environ[calibrate.ENV_VAR], os.environ[cache.ENV_DIR] = "off", empty
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def uncalibrated_pick(case: Case, device: model.Device) -> str:
    """What ``routing.route`` (mode "auto") picks for the case; call it inside
    ``no_calibration_and_no_cache``: the model alone, with its wide margins."""
    import jax

    dtype = DTYPES[case.dtype]
    a, b = (jax.ShapeDtypeStruct(tuple(s), dtype) for s in case.shapes)
    layout = LAYOUTS[case.family]
    return routing.route(
        a, b, dtype, platform="cuda", mode="auto", layout=layout, device=device
    ).target


def _problem(family: str, shapes: Any) -> tuple[Any, str]:
    layout = LAYOUTS[family]
    return problem_of(*(tuple(s) for s in shapes[:2]), layout), layout


def replay(
    cases: list[Case],
    corrections: calibrate.Corrections | None,
    verbose: bool,
    device: model.Device | None = None,
) -> dict:
    """Scores the picks: of calibrated routing, or with ``corrections`` None of routing with
    no calibration on ``device``."""
    misses, losses, speedups = [], [], []
    by_rule: collections.Counter[str] = collections.Counter()
    for case in cases:
        p, layout = _problem(case.family, case.shapes)
        dtype = DTYPES[case.dtype]
        if corrections is None:
            pick, rule = uncalibrated_pick(case, device), "uncalibrated"
        else:
            decision = routing.calibrated_decision(p, dtype, layout, corrections)
            pick, rule = decision.target, decision.rule
        jnp_s = case.seconds["jnp"]
        got = jnp_s if pick == "xla" else case.kernel_seconds(pick)
        names = routing.candidates(p, layout)[0]
        measured = [jnp_s] + [case.kernel_seconds(k) for k in names]
        best = min(s for s in measured if math.isfinite(s))
        speedups.append(jnp_s / got)
        line = (
            f"{case.name:26s} {case.dtype:5s} picks {pick:6s} {got * 1e6:9.1f} us, "
            f"jnp {jnp_s * 1e6:9.1f} us, fastest measured {best * 1e6:9.1f} us [{rule}]"
        )
        if got > MISS_FACTOR * best:
            misses.append(line)
            by_rule[rule] += 1
        if got > LOSS_FACTOR * jnp_s:
            losses.append(line)
    geomean = math.exp(sum(map(math.log, speedups)) / len(speedups)) if speedups else math.nan
    if verbose:
        for title, lines in (("misses", misses), ("losses", losses)):
            print(f"{title}:")
            print("\n".join(f"  {x}" for x in lines) or "  none")
        tally = ", ".join(f"{rule} {n}" for rule, n in by_rule.most_common())
        print(f"misses by the rule that decided: {tally or 'none'}")
    return {"cases": len(cases), "geomean_over_jnp": geomean, "misses": len(misses),
            "losses": len(losses), "misses_by_rule": dict(by_rule)}  # fmt: skip


KERNELS = ("tsm2r", "tsm2l", "tsm2s", "tsm2t")


def model_errors(cases: list[Case], corrections: calibrate.Corrections) -> dict[str, list[float]]:
    """(predicted - measured) / measured per target: ``routed`` (the target calibrated
    routing picks, against that implementation's measured time), ``xla`` (``jnp``) and each
    kernel forced. Family APP's ``tsm2_kernel`` counts as the one kernel that takes it."""
    out: dict[str, list[float]] = {}

    def add(tag: str, p: Any, dtype: str, layout: str, target: str, measured: float) -> None:
        if not (math.isfinite(measured) and measured > 0):
            return
        pred, seconds, _ = calibrated_seconds(p, dtype, layout, target, None, corrections)
        if pred.supported:
            out.setdefault(tag, []).append((seconds - measured) / measured)

    for case in cases:
        p, layout = _problem(case.family, case.shapes)
        dtype = DTYPES[case.dtype]
        pick = routing.calibrated_decision(p, dtype, layout, corrections).target
        measured = case.seconds["jnp"] if pick == "xla" else case.kernel_seconds(pick)
        add("routed", p, dtype, layout, pick, measured)
        add("xla", p, dtype, layout, "xla", case.seconds["jnp"])
        names = routing.candidates(p, layout)[0]
        for kernel in KERNELS:
            if kernel in case.seconds or (len(names) == 1 and kernel in names):
                add(kernel, p, dtype, layout, kernel, case.kernel_seconds(kernel))
    return out


def recorded_difference(
    path: pathlib.Path, corrections: calibrate.Corrections
) -> tuple[int, float]:
    """(records, largest |recomputed - recorded| ``model_error``) over the records of a run
    that the harness annotated, each recomputed for the target that ran it (``route`` for
    the routed ``tsm2``)."""
    doc = json.loads(path.read_text())
    n, worst = 0, 0.0
    for r in doc["records"]:
        if r.get("model_error") is None or r["family"] not in LAYOUTS:
            continue
        impl = r["impl"]
        target = {"jnp": "xla", "tsm2": r.get("route")}.get(impl, impl)
        if target not in (*KERNELS, "xla"):
            continue
        p, layout = _problem(r["family"], r["operand_shapes"])
        _, seconds, _ = calibrated_seconds(p, DTYPES[r["dtype"]], layout, target, None, corrections)
        err = (seconds - r["seconds"]) / r["seconds"]
        n, worst = n + 1, max(worst, abs(err - r["model_error"]))
    return n, worst


def error_lines(errors: dict[str, list[float]]) -> list[str]:
    """Median and 90th percentile of |error| per target, and over every prediction."""

    def stats(xs: list[float]) -> str:
        a = sorted(abs(x) for x in xs)
        p90 = a[min(len(a) - 1, math.ceil(0.9 * len(a)) - 1)]
        return f"median {statistics.median(a):6.1%}, p90 {p90:6.1%} ({len(a)})"

    order = ["routed", "xla", *KERNELS]
    lines = [f"  {t:7s} {stats(errors[t])}" for t in order if errors.get(t)]
    every = [x for xs in errors.values() for x in xs]
    if every:
        lines.append(f"  {'all':7s} {stats(every)}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "calibration",
        type=pathlib.Path,
        help="a calibration-<GPU>.json file, or none: route with no calibration",
    )
    ap.add_argument("runs", type=pathlib.Path, nargs="+", help="harness bench.json files")
    ap.add_argument(
        "--verbose",
        action="store_true",
        help="list every miss and loss, each with the rule of routing that decided it",
    )
    ap.add_argument(
        "--theoretical-tbps",
        type=float,
        default=None,
        help="with none: the GPU's theoretical DRAM bandwidth in TB/s, as its driver reports",
    )
    ap.add_argument(
        "--retimed",
        action="append",
        default=[],
        metavar="FILE[#RUN]",
        help="a benchmarks/stream_kernels.py file (and the name of one of its runs) whose "
        "kernel times replace the runs' records of the same products; repeatable",
    )
    ap.add_argument(
        "--model-error",
        action="store_true",
        help="also print the calibrated model's error per target on the runs",
    )
    args = ap.parse_args(argv)
    uncalibrated = str(args.calibration) == "none"
    if uncalibrated and not (args.theoretical_tbps and args.theoretical_tbps > 0):
        ap.error("none needs --theoretical-tbps (the GPU's DRAM bandwidth, TB/s)")
    if uncalibrated and args.model_error:
        ap.error("--model-error needs a calibration file")
    for path in [*([] if uncalibrated else [args.calibration]), *args.runs]:
        if not path.is_file():
            ap.error(f"no such file: {path}")
    data = None
    if not uncalibrated:
        try:
            data = calibrate.CalibrationData.from_json(json.loads(args.calibration.read_text()))
        except (ValueError, KeyError, TypeError) as e:
            ap.error(f"{args.calibration} is not a calibration file this version reads: {e}")
    cases, recorded = [], None
    for path in args.runs:
        try:
            found, recorded = read_cases(path)
        except (ValueError, KeyError, TypeError) as e:
            ap.error(f"{path} is not a harness run (bench.json): {e!r}")
        cases += found
    for spec in args.retimed:
        path, _, run = spec.partition("#")
        try:
            n = retime(cases, pathlib.Path(path), run or None)
        except (OSError, ValueError, KeyError, TypeError) as e:
            ap.error(f"--retimed {spec}: {e!r}")
        print(f"{path}: {n} kernel times of the runs replaced")
    device = device_of(recorded or {})
    if data is None:
        # The driver's bus width and memory clock: only their product, the theoretical
        # bandwidth, enters the model.
        bus = device.memory_bus_bits
        device = dataclasses.replace(
            device, memory_clock_hz=args.theoretical_tbps * 1e12 * 8 / (2 * bus)
        )
        with no_calibration_and_no_cache():
            summary = replay(cases, None, args.verbose, device)
    else:
        corr = corrections_of(data, cases, recorded or {})
        if corr.planned and not any(c.xla_plan for c in cases):
            print("the calibration predicts XLA's dot from its plans, which the runs do not "
                  "record: XLA's dot is predicted by the model's rules there")  # fmt: skip
        summary = replay(cases, corr, args.verbose)
    print(
        f"{summary['cases']} products: routed {summary['geomean_over_jnp']:.3f}x jnp.matmul "
        f"(geomean); {summary['misses']} misses (a pick >= {MISS_FACTOR:.2f}x the fastest "
        f"measured), {summary['losses']} losses (> {LOSS_FACTOR:.2f}x jnp.matmul)"
    )
    if args.model_error:
        print("model error, |predicted - measured| / measured:")
        print("\n".join(error_lines(model_errors(cases, corr))))
        for path in args.runs:
            n, worst = recorded_difference(path, corr)
            if n:
                print(f"{path}: {n} recorded model errors, recomputed within {worst:.2g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

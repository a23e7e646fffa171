"""``--model``: the performance model's prediction beside each measured time, and its error.

Each JAX record gets the prediction of ``jax_tsm2.model`` for what that implementation runs:

- ``tsm2`` (routed): the target routing picks for the case (a kernel or XLA's dot), as the
  lowering decides it: a family whose product folds a transpose (NT ``a @ b.T``, TN
  ``a.T @ b``) is asked in its folded layout first and in nn second, as
  ``primitive._routed_lowering`` does. On a GPU the kernel named in the lowered program
  (the record's ``route``) wins where the two disagree: it is what ran.
- ``tsm2_kernel``: the same, under the forced-kernel column's custom-call mode.
- a kernel forced through the FFI target (the grid's ``tsm2r``, ``tsm2l``, ...): that kernel.
- ``jnp``: XLA's dot at default precision; ``jnp_highest``: at highest.
- torch and family GRAD (a gradient, two products and an elementwise pass): none (null).

On a GPU with a calibration (``jax_tsm2.tune.calibrate``), a prediction at default precision
is the calibrated model routing decides with: the model at the calibration's read ceiling times
the correction of the probes near the shape (``predicted_source``: ``"calibration"``, else
``"model"``).

The model's device is ``model.current_device()``: the driver's description of this GPU (with
the streaming bandwidth of ``python -m jax_tsm2.tune --measure-bandwidth`` where cached), or
the H100 preset without a GPU.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import Any

import jax

from jax_tsm2 import config, model, routing
from jax_tsm2.bench.impls import Impl
from jax_tsm2.bench.suite import DTYPES
from jax_tsm2.kernel_call import stored_shapes
from jax_tsm2.model import xla_plan
from jax_tsm2.routing import KERNEL_LAYOUTS
from jax_tsm2.tune import calibrate

#: The model-error check: median |predicted - measured| / measured over the suite at most this.
MAX_ERROR = 0.20
#: Layouts in which routing is asked about each family's product, in the lowering's order.
FAMILY_LAYOUTS: dict[str, tuple[str, ...]] = {
    "R": ("nn",),
    "L": ("nn",),
    "S": ("nn",),
    "NT": ("nt", "nn"),
    "TN": ("tn", "nn"),
}
_KERNELS = ("tsm2r", "tsm2l", "tsm2s", "tsm2t")


def model_device() -> Any:
    """``model.current_device()``, or None when the model cannot be loaded."""
    try:
        return model.current_device()
    except Exception:
        return None


def device_info(device: Any) -> dict[str, Any] | None:
    """The model's device for the JSON's top-level ``model`` key."""
    if device is None:
        return None
    return {
        "name": device.name,
        "key": device.key,
        "source": device.source,
        "sm_count": device.sm_count,
        "bandwidth_bytes_per_s": device.bandwidth(),
    }


def routed_target(rec: dict[str, Any], mode: str) -> tuple[str, str]:
    """``(target, layout)`` that routing picks on a GPU for the record's case in ``mode``."""
    layouts = FAMILY_LAYOUTS[rec["family"]]
    dtype = DTYPES[rec["dtype"]]
    p = model.problem_from(tuple(tuple(s) for s in rec["operand_shapes"][:2]), layouts[0])
    for layout in layouts:
        a, b = (jax.ShapeDtypeStruct(s, dtype) for s in stored_shapes(p, layout))
        r = routing.route(a, b, dtype, platform="cuda", mode=mode, layout=layout)
        if r.custom_call:
            return r.target, layout
    return "xla", layouts[0]


def _target(rec: dict[str, Any], impl: Impl, modes: dict[str, str], platform: str):
    """``(target, layout, xla_precision)`` the model is asked about, or None."""
    fam = rec["family"]
    if fam not in FAMILY_LAYOUTS or impl.framework != "jax":
        return None
    layout = FAMILY_LAYOUTS[fam][0]
    if impl.kernel is not None:
        return impl.kernel, layout, "default"
    if impl.name == "jnp":
        return "xla", layout, "default"
    if impl.name == "jnp_highest":
        return "xla", layout, "highest"
    if impl.name not in modes:
        return None
    target, layout = routed_target(rec, modes[impl.name])
    ran = rec.get("route")
    if platform == "gpu" and ran in (*_KERNELS, "xla") and ran != target:
        target = ran  # the lowered program is the truth on a GPU
        layout = next((x for x in FAMILY_LAYOUTS[fam] if _takes(ran, x)), layout)
    return target, layout, "default"


def _corrections(device: Any) -> Any:
    """This GPU's calibration corrections (``calibrate.Corrections``), or None: a device
    the driver did not describe (the H100 preset without a GPU) has none."""
    if getattr(device, "source", None) != "driver":
        return None
    found = calibrate.corrections_for(device)
    return None if found is None else found[0]


def calibrated_seconds(
    p: model.Problem,
    dtype: str,
    layout: str,
    target: str,
    device: Any,
    corrections: Any,
    precision: str = "default",
) -> tuple[model.Prediction, float, str]:
    """``(prediction, seconds, source)`` for ``target`` on ``p``: with ``corrections`` (a
    ``calibrate.Corrections``) at default precision the calibrated model routing decides
    with (the model at the calibration's device and constants, times the correction of the
    probes near ``p``: source ``"calibration"``), else the model on ``device`` (``"model"``).
    ``benchmarks/routing_replay.py --model-error`` replays committed runs through it."""
    if corrections is None or precision != "default":
        pred = model.predict(p, dtype, layout, target, device=device, xla_precision=precision)
        return pred, pred.seconds, "model"
    plan = corrections.xla_plan(p, dtype, layout) if target == "xla" else None
    pred = model.predict(
        p, dtype, layout, target, corrections.device, corrections.calibration, xla_plan=plan
    )
    return pred, pred.seconds * corrections.factor(target, p, dtype, layout)[0], "calibration"


def _takes(target: str, layout: str) -> bool:
    return target == "xla" or layout in KERNEL_LAYOUTS[target]


def fields(
    rec: dict[str, Any], impl: Impl, device: Any, modes: dict[str, str], platform: str
) -> dict[str, Any]:
    """``predicted_seconds``, ``predicted_target`` and ``model_error`` for one record."""
    out: dict[str, Any] = {"predicted_seconds": None, "predicted_target": None}
    out["model_error"] = None
    if device is None:
        return out
    try:
        what = _target(rec, impl, modes, platform)
        if what is None:
            return out
        target, layout, precision = what
        p = model.problem_from(tuple(tuple(s) for s in rec["operand_shapes"][:2]), layout)
        # On a calibrated GPU, at default precision, the model as routing uses it: at the
        # calibration's read ceiling, times the correction its probes make near this shape.
        corrections = _corrections(device) if precision == "default" else None
        dtype = DTYPES[rec["dtype"]].name
        pred, seconds, source = calibrated_seconds(
            p, dtype, layout, target, device, corrections, precision
        )
    except Exception as err:  # the model must never cost a run its measurements
        out["predicted_target"] = f"error: {type(err).__name__}: {err}"
        return out
    if not pred.supported:
        out["predicted_target"] = f"{target} (unsupported: {pred.reason})"
        return out
    out["predicted_seconds"] = seconds
    out["predicted_source"] = source
    if target == "xla" and precision == "default":
        # Recorded on every GPU, whatever the calibration routed with, so that a replay
        # can weigh predicting XLA's dot from plans against the rules on the same run
        # (the plan a planned calibration predicted with: the same cached compilation).
        plan = xla_plan.plan(p, dtype, layout)
        if plan is not None:
            out["xla_plan"] = plan.to_json()
    out["predicted_target"] = target + ("" if precision == "default" else f" ({precision})")
    if rec.get("status") == "ok" and rec.get("seconds"):
        out["model_error"] = (seconds - rec["seconds"]) / rec["seconds"]
    return out


def annotate(
    records: list[dict[str, Any]],
    impls: Iterable[Impl],
    device: Any,
    platform: str,
    kernel_mode: str,
) -> None:
    """Adds the model's fields to the records of one case (in place)."""
    current = config.get_custom_call_mode()
    by_name = {i.name: i for i in impls}
    modes = {"tsm2": current, "tsm2_kernel": kernel_mode}
    if "tsm2" in by_name and by_name["tsm2"].custom_call_mode:
        modes["tsm2"] = by_name["tsm2"].custom_call_mode
    for rec in records:
        impl = by_name.get(rec["impl"])
        if impl is None:  # skipped implementations (torch without CUDA, ...)
            rec.update(predicted_seconds=None, predicted_target=None, model_error=None)
            continue
        rec.update(fields(rec, impl, device, modes, platform))


def _stats(records: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    errors = [abs(r["model_error"]) for r in records]
    if not errors:
        return None
    per_impl = {}
    for name in sorted({r["impl"] for r in records}):
        mine = [abs(r["model_error"]) for r in records if r["impl"] == name]
        per_impl[name] = {"median_abs_error": statistics.median(mine), "records": len(mine)}
    return {
        "median_abs_error": statistics.median(errors),
        "records": len(errors),
        "per_impl": per_impl,
    }


def model_error(records: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The model-error check: median |predicted - measured| / measured over the suite's
    records (the grid's are summarized apart); None when no record has a prediction."""
    judged = [r for r in records if r.get("model_error") is not None]
    if not judged and not any("predicted_seconds" in r for r in records):
        return None
    suite = _stats([r for r in judged if not r.get("grid")])
    grid = _stats([r for r in judged if r.get("grid")])
    return {
        "rule": f"median |predicted - measured| / measured <= {MAX_ERROR:.0%} over the suite",
        "max": MAX_ERROR,
        "suite": suite,
        "grid": grid,
        "pass": None if suite is None else suite["median_abs_error"] <= MAX_ERROR,
    }


def _stat_line(head: str, stats: dict[str, Any]) -> str:
    impls = ", ".join(
        f"{name} {s['median_abs_error']:.1%} ({s['records']})"
        for name, s in stats["per_impl"].items()
    )
    return f"{head}: {stats['median_abs_error']:.1%} over {stats['records']} records ({impls})"


def summary_lines(b: dict[str, Any] | None) -> list[str]:
    """The model-error check's lines for the text and markdown summaries."""
    if not b:
        return []
    out = []
    head = f"model error (median |pred - meas| / meas <= {b['max']:.0%})"
    if b["suite"] is not None:
        verdict = "pass" if b["pass"] else "MISS"
        out.append(_stat_line(head, b["suite"]) + f" {verdict}")
    elif b["grid"] is None:
        out.append(f"{head}: n/a (no timed record with a prediction)")
    if b["grid"] is not None:
        out.append(_stat_line("model error on the grid (not judged)", b["grid"]))
    return out

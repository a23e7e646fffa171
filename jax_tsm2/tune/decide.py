"""Routing on a calibration: the fastest of the kernels and XLA's dot by corrected
prediction (``decide``), with the margins and guards that keep an extrapolation from buying
a kernel that has not been seen winning near a shape. ``Decision.rule`` says which of
``RULES`` settled it (``benchmarks/routing_replay.py`` tallies routing's misses by rule).

Example (one probe: TSM2L measured 3x faster than XLA's dot on an L product):
    >>> from jax_tsm2 import model
    >>> from jax_tsm2.problem import Problem
    >>> from jax_tsm2.tune.calibration_data import CalibrationData, Record
    >>> rec = Record("float32", "nn", Problem(None, 10**6, 8, 8), {"tsm2l": 1e-5, "xla": 3e-5})
    >>> corr = Corrections(CalibrationData({"key": "GPU"}, 4e12, 2e-6, (rec,), {}), model.H100_SXM)
    >>> d = decide(Problem(None, 10**6, 8, 8), "float32", "nn", ("tsm2l",), corr)
    >>> d.target, d.rule  # the probe's own shape: its times decide
    ('tsm2l', 'measured')
    >>> d = decide(Problem(None, 2 * 10**6, 8, 8), "float32", "nn", ("tsm2l",), corr)
    >>> d.target, d.rule, d.margin > 0.04  # near it: corrected predictions, a wider margin
    ('tsm2l', 'predicted', True)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from jax_tsm2 import model
from jax_tsm2.problem import Problem
from jax_tsm2.tune.corrections import Corrections, xla_best_case

# Margins a kernel must be predicted faster than XLA's dot by: where probes
# of both are near (support >= 1) the base margin, growing towards FAR_MARGIN
# as the nearest probes recede (the uncorrected model then decides, and its
# constants may be another GPU's). The prediction itself is already blended towards the
# kernel's least favourable correction there (``decide``), so the far margin need not
# double it: 60% kept every committed H200 run free of new losses where 100% left wins
# like S f32 1 x 8367 x 13081 (TSM2S 2.4x faster) to XLA's dot. Without a calibration
# routing uses the model's own margins widened to UNCALIBRATED_MARGIN.
BASE_MARGIN = 0.04
FAR_MARGIN = 0.6
UNCALIBRATED_MARGIN = 0.3
# XLA's dot changes algorithm between neighbouring shapes, which no probe foretells: on an
# H200, f64 14 x 9051 x 9876 ran on cuBLAS at 1.25 TB/s and 14 x 9976 x 7952 on XLA's own
# emitter at 4.1 TB/s. A kernel predicted below this fraction of one pass at the read
# ceiling beats XLA's dot only where XLA takes a slow path, so routing keeps XLA's dot
# there, whatever the probes nearby measured of it. Replayed on the 17 committed H200 runs
# with the present calibration, 30% is the least fraction (in steps of 5%) at which no
# product the present kernels timed becomes a loss: against 40%, 38 picks move from XLA's
# dot to a kernel, 37 of them faster than jnp.matmul (0.19-0.99x of its time) and one
# slower, TN f16 453393 x 9 x 25 on seed 1129, timed with TSM2T's tiled stages since
# replaced by flat ones; 25% adds losses on seeds 2911, 3163 and 5077.
MIN_FLOOR_FRACTION = 0.3
# In f64 the kernels run further from the read ceiling (TSM2R at 37-41% of it on NT
# products of thousands of columns), so more of their predictions fall where XLA's dot's
# fast algorithm wins: on an H200, f64 NT 16613 x 4626 x 12 ran XLA's dot at 86% of one
# pass at the read ceiling where the probe at 9050 x 9390 x 16 had it at 26%, and TSM2R,
# predicted at 59%, ran 2.1x slower. Replayed on the committed H200 runs, 40% is the least
# fraction (in steps of 5%) at which none of the present kernels' runs loses on an f64
# product: from 55%, 26 f64 picks move from XLA's dot to a kernel, each faster than
# jnp.matmul (0.26-0.91x of its time); at 35%, S f64 7 x 8848 x 2463 on seed 2417 goes to
# TSM2S at 1.6x jnp.matmul's time.
MIN_FLOOR_FRACTION_F64 = 0.4


def min_floor_fraction(dtype: str) -> float:
    """The least fraction of one pass at the read ceiling a kernel must be predicted at
    to be routed to in ``dtype`` (``MIN_FLOOR_FRACTION``, ``MIN_FLOOR_FRACTION_F64``)."""
    return MIN_FLOOR_FRACTION_F64 if dtype == "float64" else MIN_FLOOR_FRACTION


# What settled a calibrated decision (``Decision.rule``): the product's own probe times, no
# kernel taking it, no kernel measured near it, a kernel predicted below the floor fraction,
# a kernel bounded only by its layout's least favourable correction, or the corrected
# predictions against the margin.
RULES = ("measured", "no kernel", "unprobed", "floor fraction", "layout bound", "predicted")


@dataclasses.dataclass(frozen=True)
class Decision:
    """``decide``'s answer: the target, corrected predictions per target, why, and which of
    ``RULES`` settled it (``benchmarks/routing_replay.py`` tallies the misses by rule)."""

    target: str
    seconds: dict[str, float]
    margin: float
    reason: str
    rule: str = "predicted"


def decide(
    p: Problem,
    dtype: str,
    layout: str,
    names: Sequence[str],
    corrections: Corrections,
    xla_precision: str = "default",
) -> Decision:
    """The fastest of ``names`` and XLA's dot by corrected prediction, with a margin that
    grows where the probes behind the kernel's correction are far away.

    Where no probe of the shape's own dtype and kind of rows spans it, the probes of its
    layout in every dtype stand in (``Corrections.layout_extreme``): XLA's dot is corrected
    from them as from its own cell, and a kernel is taken at the least favourable correction
    measured among them, against which it needs only the base margin. Not where the model
    puts either at its launch floor: those constants are another GPU's per-call floor, and
    no probe (1 MB at least) measured there."""
    dev = corrections.device
    cal = corrections.calibration
    hit = corrections.measured(p, dtype, layout)
    if hit is not None and xla_precision == "default" and "xla" in hit:
        # A product the calibration timed itself (the real programs' products are probed
        # first) is decided by its own times: XLA's dot changes algorithm between
        # neighbouring shapes, so a correction smoothed over neighbours can miss it by 3x.
        return _decide_measured(hit, names)

    def corrected(
        model_s: float, far_s: float, factor_support: tuple[float, float]
    ) -> tuple[float, float]:
        # Near probes (support >= 1) the local correction; away from them a blend towards
        # far_s, the bound every measurement of the (layout, dtype) allows.
        f, support = factor_support
        w = min(1.0, support)
        return math.exp(w * math.log(model_s * f) + (1.0 - w) * math.log(far_s)), support

    plan = corrections.xla_plan(p, dtype, layout) if xla_precision == "default" else None
    xla_pred = model.predict(p, dtype, layout, "xla", dev, cal, xla_precision, plan)
    xla_model = xla_pred.seconds
    # XLA's dot is never assumed faster than one pass over its operands at the read ceiling.
    best_case = xla_best_case(p, dtype, dev, corrections.data.launch_seconds)
    fastest = corrections.extreme("xla", p, dtype, layout)
    xla_factor = corrections.factor("xla", p, dtype, layout)
    if fastest is None:
        fastest = corrections.layout_extreme("xla", p, dtype, layout)
        if fastest is not None:
            xla_factor = corrections.layout_factor("xla", p, dtype, layout)
    xla_far = best_case if fastest is None else max(best_case, xla_model * fastest)
    xla, xla_support = corrected(xla_model, xla_far, xla_factor)
    secs: dict[str, float] = {"xla": xla}
    support: dict[str, float] = {}
    at_bound: set[str] = set()
    supported: list[str] = []
    for name in names:
        pred = model.predict(p, dtype, layout, name, dev, cal)
        if not pred.supported:
            continue
        supported.append(name)
        slowest = corrections.extreme(name, p, dtype, layout)
        if slowest is not None:
            factor = corrections.factor(name, p, dtype, layout, pred)
            secs[name], support[name] = corrected(pred.seconds, pred.seconds * slowest, factor)
            continue
        if _near_floor(p, dtype, layout, name, dev):
            continue  # no probe measured there, and one program's samples jump between levels
        slowest = corrections.layout_extreme(name, p, dtype, layout)
        if slowest is None:
            continue  # a kernel never measured near these sizes is not routed to
        secs[name], support[name] = pred.seconds * slowest, 0.0
        at_bound.add(name)
    kernels = [k for k in secs if k != "xla"]
    if not kernels and supported:
        why = (
            f"XLA's dot: this GPU's calibration measured {', '.join(supported)} nowhere near "
            f"this {dtype} {layout} product"
        )
        return Decision("xla", secs, 0.0, why, "unprobed")
    if not kernels:
        return Decision("xla", secs, 0.0, "no kernel takes this problem", "no kernel")
    best = min(kernels, key=secs.__getitem__)
    fraction = min_floor_fraction(dtype)
    if best_case < fraction * secs[best]:
        why = _slow_kernel_reason(best, secs[best], best_case, fraction)
        return Decision("xla", secs, 0.0, why, "floor fraction")
    if best in at_bound:
        where = (
            f"on this GPU's calibration ({best} at the least favourable correction its "
            f"probes of layout {layout} measured: none of {dtype} and this kind of rows near)"
        )
        return _pick(secs, best, BASE_MARGIN, "predicted", where, "layout bound")
    known = min(support[best], xla_support)
    margin = BASE_MARGIN + (FAR_MARGIN - BASE_MARGIN) * math.exp(-2.0 * known)
    return _pick(secs, best, margin, "predicted", "on this GPU's calibration", "predicted")


def _slow_kernel_reason(kernel: str, seconds: float, best_case: float, fraction: float) -> str:
    return (
        f"XLA's dot: {kernel} predicted {seconds * 1e6:.1f} us, {best_case / seconds:.0%} of "
        f"one pass at the read ceiling ({best_case * 1e6:.1f} us); below "
        f"{fraction:.0%}, one of XLA's dot's algorithms may well run faster"
    )


def _near_floor(p: Problem, dtype: str, layout: str, kernel: str, dev: model.Device) -> bool:
    """Whether the model's own constants put ``kernel`` or XLA's dot on ``p`` at their
    per-call floor (10-11 us, an H100 harness's): products that small lie below the probes
    (1 MB and more) of most cells, and the times of one program there jump between two
    levels, so a bound from other dtypes' probes does not trade XLA's dot for a kernel.
    A calibrated prediction puts the floor at the measured launch (``measured_floor``);
    this threshold only keeps such products to what their own probes say."""
    return any(
        model.predict(p, dtype, layout, t, dev, model.CALIBRATION).bound == "launch"
        for t in (kernel, "xla")
    )


def _pick(
    secs: dict[str, float], best: str, margin: float, verb: str, where: str, rule: str
) -> Decision:
    """Kernel ``best`` where it beats XLA's dot by ``margin``, else XLA's dot; the reason
    says the times were ``verb`` ("predicted", "measured") ``where``."""
    xla = secs["xla"]
    us = lambda s: f"{s * 1e6:.1f} us"
    if secs[best] * (1.0 + margin) < xla:
        why = (
            f"{best} {verb} {us(secs[best])} against XLA's {us(xla)} {where} "
            f"({xla / secs[best]:.2f}x, margin {margin:.0%})"
        )
        return Decision(best, secs, margin, why, rule)
    why = f"XLA's dot {verb} {us(xla)} against {best}'s {us(secs[best])} {where}" + (
        f" (within the {margin:.0%} margin)" if secs[best] < xla else ""
    )
    return Decision("xla", secs, margin, why, rule)


def _decide_measured(seconds: dict[str, float], names: Sequence[str]) -> Decision:
    """``decide`` for a product the calibration timed: the fastest measured, with the base
    margin against XLA's dot (the probes' timing noise)."""
    secs = {t: s for t, s in seconds.items() if t == "xla" or t in names}
    kernels = [k for k in secs if k != "xla"]
    if not kernels:
        return Decision("xla", secs, 0.0, "no kernel takes this problem", "no kernel")
    best = min(kernels, key=secs.__getitem__)
    where = "by this GPU's calibration at this shape"
    return _pick(secs, best, BASE_MARGIN, "measured", where, "measured")

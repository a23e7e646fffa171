"""Corrections: a calibration's probes turned into a correction of the model per target.

For a target (a kernel or XLA's dot), a layout, a dtype and a kind of rows (whole 16-byte
vectors or not), the correction at a shape is the geometric mean of measured / predicted
over the probes near it (a Gaussian kernel in log-size space, ``BANDWIDTH_OCTAVES`` wide),
shrunk where few probes are near towards the same mean over the layout's probes in every
dtype, and that towards the target's mean over all its probes. TSM2L's probes correct only
shapes of their own code path where the cell has any (``code_path``). ``extreme`` and
``layout_extreme`` give the bounds routing assumes far from the probes (``decide``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np

from jax_tsm2 import model
from jax_tsm2.model import xla_plan
from jax_tsm2.problem import Problem
from jax_tsm2.tune.calibration_data import CalibrationData
from jax_tsm2.tune.probes import problem_bytes, rows_aligned

# XLA's plan for a product (dtype and layout names), or None where there is none.
PlanSource = Callable[[Problem, str, str], "model.XlaPlan | None"]

# The corrections' kernel width in octaves of each size (rows, k, n), and the
# weight of the prior (no correction) against one probe at distance zero.
BANDWIDTH_OCTAVES = 1.5
PRIOR_WEIGHT = 0.25


def _kind(p: Problem, dtype: str, layout: str) -> bool:
    """The kind of shape a probe corrects: its rows aligned or not (``rows_aligned``), in
    nn and nt. In tn one kind: XLA's dot reads row-major A.T @ B several times over
    whatever the rows, and TSM2T's flat stages read rows of any length alike."""
    return layout == "tn" or rows_aligned(p, dtype, layout)


def _coords(p: Problem) -> np.ndarray:
    return np.log2([float((p.batch or 1) * p.m), float(p.k), float(p.n)])


Points = tuple[np.ndarray, np.ndarray]  # probes' _coords and log(measured / predicted)


def _factor(pts: Points | None, p: Problem, prior: float = 1.0) -> tuple[float, float]:
    """(correction factor, support) at ``p`` from the probes ``pts``: their residuals'
    Gaussian-weighted mean, shrunk towards ``prior`` (a factor) by PRIOR_WEIGHT."""
    if pts is None:
        return prior, 0.0
    coords, resid = pts
    d2 = np.sum((coords - _coords(p)) ** 2, axis=1) / BANDWIDTH_OCTAVES**2
    w = np.exp(-0.5 * d2)
    support = float(w.sum())
    mean = ((w * resid).sum() + PRIOR_WEIGHT * math.log(prior)) / (support + PRIOR_WEIGHT)
    return math.exp(float(mean)), support


def measured_floor(cal: model.Calibration, launch_seconds: float) -> model.Calibration:
    """``cal`` with the per-call floors of our kernels and XLA's dot (``t_floor``,
    ``xla_t_floor``) at the launch a calibration measured on its GPU.

    The model's floors are another GPU's harness floor (an H100 at 10-11 us); the
    calibration's launch is timed as the harness times a product of a few bytes, calls
    pipelined, and on an H200 XLA's dot ran 1-2 MB products in about 2 us. A floor kept
    at 10 us there is a constant error no multiplicative correction fixes: the probes
    (1 MB and more) lie on both sides of it.

    Example:
        >>> from jax_tsm2 import model
        >>> measured_floor(model.CALIBRATION, 1.5e-6).xla_t_floor
        1.5e-06
    """
    return dataclasses.replace(cal, t_floor=launch_seconds, xla_t_floor=launch_seconds)


# The targets whose probes correct only shapes of their own code path (``code_path``).
PATH_TARGETS = ("tsm2l",)


def code_path(target: str, pred: model.Prediction) -> str | None:
    """The code path of ``target``'s prediction ``pred`` whose probes alone correct it
    (``Corrections.factor``), or None for a target whose cells' probes all do: for TSM2L the
    row-per-thread kernel, the L tile or the L tensor-core tile (``pred.params["tile"]``:
    "row", "L", "L mma"). A cell of TSM2L (rows of whole vectors, say) mixes the three, and
    their probes lie on opposite sides of the model: on an H200 and an H100 the L tile's at
    a median log residual of -0.14 to -0.27 per layout, the tensor-core tile's at +0.06 to
    +0.28, so a mean over the cell corrected neither.

    Example:
        >>> from jax_tsm2 import model
        >>> pred = model.predict((10**6, 8, 8), "float32", "nn", "tsm2l", model.H100_SXM)
        >>> code_path("tsm2l", pred), code_path("tsm2r", pred)
        ('row', None)
    """
    return str(pred.params.get("tile")) if target in PATH_TARGETS else None


def _stacked(points: list[Points]) -> Points:
    return np.concatenate([c for c, _ in points]), np.concatenate([v for _, v in points])


def _extreme(pts: Points | None, target: str, p: Problem) -> float | None:
    """The most favourable correction of ``pts`` for XLA's dot, the least favourable for a
    kernel, where ``p`` lies inside the probes' box of sizes widened by the corrections'
    kernel width; else None."""
    if pts is None:
        return None
    coords, resid = pts
    x = _coords(p)
    if (
        (x < coords.min(axis=0) - BANDWIDTH_OCTAVES) | (x > coords.max(axis=0) + BANDWIDTH_OCTAVES)
    ).any():
        return None
    return math.exp(float(resid.min() if target == "xla" else resid.max()))


# A kernel's least favourable correction is taken over the probes within NEAR_WIDTHS
# kernel widths (BANDWIDTH_OCTAVES) of a shape, where at least NEAR_PROBES lie there (a
# maximum over one probe bounds nothing). Three octaves: a kernel's regime (rows against
# B's width) changes over a few octaves of each size, and on an H200 grid a radius of 4.5
# octaves still let probes of the L regime (millions of rows, k of a few) bound TSM2R on
# R products of ten thousand rows at 4-6x its model.
NEAR_WIDTHS = 2.0
NEAR_PROBES = 2


def _near_extreme(pts: Points | None, p: Problem) -> float | None:
    """A kernel's least favourable correction among the probes ``pts`` near ``p``, or
    None where fewer than NEAR_PROBES are near.

    A kernel's residuals follow its regime, which a cell's probes mix: on an H200, TSM2R
    ran its nn probes of a few rows against a wide ``B`` at 4-6x the model, and those of
    thousands of rows against a skinny ``B`` at 0.8-1.5x. The maximum over all of them put
    every R product at the first, and left TSM2R's 2-3x wins there to XLA's dot. Unlike
    XLA's dot, whose algorithm switches between neighbouring shapes, a kernel runs one
    code path per regime, so its probes near a shape bound it there."""
    if pts is None:
        return None
    coords, resid = pts
    dist = np.sqrt(np.sum((coords - _coords(p)) ** 2, axis=1))
    near = dist <= NEAR_WIDTHS * BANDWIDTH_OCTAVES
    if int(near.sum()) < NEAR_PROBES:
        return None
    return math.exp(float(resid[near].max()))


def _layout_kinds(target: str, kind: bool) -> tuple[bool, ...]:
    """The kinds of rows (``_kind``) of the probes, of any dtype, that stand in for a shape
    of kind ``kind`` where no probe of its own dtype and kind spans it. For XLA's dot, its
    own kind, and for rows that are not whole vectors also rows that are: XLA's dot runs
    those at least as fast, so they never flatter a kernel against it (the other way round
    they would: XLA's dot read an aligned f32 R product once where unaligned probes near it
    read three to four times over). For a kernel, both: it is taken at the least favourable
    correction measured among them."""
    if target == "xla":
        return (kind,) if kind else (False, True)
    return (True, False)


class Corrections:
    """Per (target, layout, dtype): measured / predicted over the probes, by nearness.

    ``factor`` answers the correction for a shape and its *support*: the
    summed kernel weight of the probes behind it (1.0 is one probe at the same
    shape; near 0 nothing was measured near there and the factor is ~1).
    ``layout_factor`` and ``layout_extreme`` answer the same from a target's
    probes of the layout in every dtype, for shapes no probe of their own cell spans.
    """

    def __init__(
        self,
        data: CalibrationData,
        device: model.Device,
        calibration: model.Calibration | None = None,
        plans: PlanSource | None = None,
    ):
        self.data = data
        self.device = device.with_bandwidth(data.read_bytes_per_s)
        self.calibration = calibration or measured_floor(model.CALIBRATION, data.launch_seconds)
        self._points: dict[tuple[str, str, str, bool], tuple[np.ndarray, np.ndarray]] = {}
        self._measured = {(r.dtype, r.layout, r.problem): r.seconds for r in data.records}
        # XLA's dot is predicted from its compiled plan where every probe of it recorded
        # one: the probes' residuals are then of the same prediction a shape is asked with.
        timed_xla = [r for r in data.records if "xla" in r.seconds]
        self.planned = bool(timed_xla) and all(r.xla_plan is not None for r in timed_xla)
        self._plans = plans or xla_plan.plan
        dev = self.device
        grouped: dict[tuple[str, str, str, bool], list[tuple[np.ndarray, float]]] = {}
        paths: dict[tuple[str, str, str, bool, str], list[tuple[np.ndarray, float]]] = {}
        for r in data.records:
            for target, secs in r.seconds.items():
                plan = r.xla_plan if target == "xla" and self.planned else None
                pred = model.predict(
                    r.problem, r.dtype, r.layout, target, dev, self.calibration, xla_plan=plan
                )
                if not (pred.supported and math.isfinite(pred.seconds) and pred.seconds > 0):
                    continue
                resid = math.log(secs / pred.seconds)
                key = (target, r.layout, r.dtype, _kind(r.problem, r.dtype, r.layout))
                grouped.setdefault(key, []).append((_coords(r.problem), resid))
                path = code_path(target, pred)
                if path is not None:
                    paths.setdefault((*key, path), []).append((_coords(r.problem), resid))
        for key, pts in grouped.items():
            self._points[key] = (np.stack([c for c, _ in pts]), np.array([v for _, v in pts]))
        # The cells' probes per code path (``code_path``), and the layouts', for ``factor``
        # alone: a path no probe of a cell ran is corrected by all of the cell's probes, and the
        # bounds (``extreme``) stay over every path, as the kernel's near probes bound it.
        self._path_points: dict[tuple[str, str, str, bool, str], Points] = {
            key: (np.stack([c for c, _ in pts]), np.array([v for _, v in pts]))
            for key, pts in paths.items()
        }
        self._path_layout_points: dict[tuple[str, str, bool, str], Points] = {}
        for target, layout, path in {(t, lay, pa) for t, lay, _, _, pa in self._path_points}:
            for kind in (True, False):
                found = [
                    v
                    for (t, lay, _, k, pa), v in self._path_points.items()
                    if (t, lay, pa) == (target, layout, path) and k in _layout_kinds(target, kind)
                ]
                if found:
                    self._path_layout_points[(target, layout, kind, path)] = _stacked(found)
        # Each target's mean residual over its probes of every layout and dtype, of the kinds
        # of rows that may correct a shape (``_layout_kinds``), shrunk towards no correction:
        # what its layout's probes are shrunk towards where none is near (``layout_factor``).
        self._target_prior: dict[tuple[str, bool], float] = {}
        for target in {t for t, _, _, _ in grouped}:
            for kind in (True, False):
                resid = [
                    v
                    for (t, _, _, k), pts in grouped.items()
                    if t == target and k in _layout_kinds(target, kind)
                    for _, v in pts
                ]
                if resid:
                    mean = sum(resid) / (len(resid) + PRIOR_WEIGHT)
                    self._target_prior[(target, kind)] = math.exp(mean)
        # A target's probes of a layout in every dtype, per kind of shape they may correct
        # (``_layout_kinds``): what routing falls back to where no probe of a shape's own
        # dtype and kind spans it.
        self._layout_points: dict[tuple[str, str, bool], Points] = {}
        for target, layout in {(t, lay) for t, lay, _, _ in self._points}:
            for kind in (True, False):
                found = [
                    v
                    for (t, lay, _, k), v in self._points.items()
                    if (t, lay) == (target, layout) and k in _layout_kinds(target, kind)
                ]
                if found:
                    self._layout_points[(target, layout, kind)] = _stacked(found)

    def extreme(self, target: str, p: Problem, dtype: str, layout: str) -> float | None:
        """The correction assumed where no probe is near: for XLA's dot the most favourable
        one measured for its (layout, dtype), for a kernel the least favourable; None where
        ``p`` lies outside the sizes probed there (no bound is known). Routing on these
        bounds far from the probes trades XLA's dot for a kernel only where every
        measurement says it would win.

        A kernel's bound is that of its regime (``_near_extreme``): the least favourable
        correction among its own cell's probes near ``p``, else among its layout's probes
        near ``p`` in every dtype (``layout_extreme``'s), and over the whole cell only where
        neither has probes near.

        Example:
            >>> from jax_tsm2 import model
            >>> from jax_tsm2.tune.calibration_data import Record
            >>> probe = Record("float32", "nn", Problem(None, 10**6, 8, 8),
            ...                {"tsm2l": 3e-5, "xla": 2e-5})
            >>> data = CalibrationData({"key": "GPU"}, 4e12, 2e-6, (probe,), {})
            >>> corr = Corrections(data, model.H100_SXM)
            >>> corr.extreme("tsm2l", Problem(None, 2 * 10**6, 8, 8), "float32", "nn") > 0
            True
            >>> corr.extreme("tsm2l", Problem(None, 10**3, 8, 8), "float32", "nn") is None
            True
        """
        pts = self._points.get((target, layout, dtype, _kind(p, dtype, layout)))
        bound = _extreme(pts, target, p)
        if bound is None or target == "xla":
            return bound
        near = _near_extreme(pts, p)
        if near is None:
            near = _near_extreme(
                self._layout_points.get((target, layout, _kind(p, dtype, layout))), p
            )
        return bound if near is None else near

    def xla_plan(self, p: Problem, dtype: str, layout: str) -> model.XlaPlan | None:
        """XLA's plan to predict its dot on ``p`` with: where this calibration's probes were
        predicted with theirs (``planned``), the plan of ``p`` from the plan source
        (compiled on this GPU by default); else None (the model's rules)."""
        return self._plans(p, dtype, layout) if self.planned else None

    def measured(self, p: Problem, dtype: str, layout: str) -> dict[str, float] | None:
        """Seconds per target measured by a probe of exactly this product, or None."""
        return self._measured.get((dtype, layout, p))

    def factor(
        self,
        target: str,
        p: Problem,
        dtype: str,
        layout: str,
        pred: model.Prediction | None = None,
    ) -> tuple[float, float]:
        """(correction factor, support) for ``target`` on ``p``: the weighted mean of the
        probes of its own (layout, dtype, kind of rows), shrunk towards ``layout_factor``
        where few are near; for a target of ``PATH_TARGETS``, of those that ran ``p``'s code
        path (``code_path``) where any did. The support is that of the probes the mean is
        over. ``pred``, ``target``'s uncorrected prediction on ``p`` where the caller has
        it, names the code path without predicting again."""
        path = self._path(target, p, dtype, layout, pred)
        prior = self._layout_factor(target, p, dtype, layout, path)[0]
        key = (target, layout, dtype, _kind(p, dtype, layout))
        pts = self._path_points.get((*key, path)) if path is not None else None
        return _factor(pts if pts is not None else self._points.get(key), p, prior)

    def layout_factor(
        self, target: str, p: Problem, dtype: str, layout: str
    ) -> tuple[float, float]:
        """``factor`` from ``target``'s probes of ``layout`` in every dtype, of the kinds of
        rows that may correct ``p`` (``_layout_kinds``) and, for a target of
        ``PATH_TARGETS``, of ``p``'s code path where any ran it, shrunk towards the target's
        mean correction over all its probes where few are near (1 for a target never
        probed)."""
        return self._layout_factor(target, p, dtype, layout, self._path(target, p, dtype, layout))

    def _layout_factor(
        self, target: str, p: Problem, dtype: str, layout: str, path: str | None
    ) -> tuple[float, float]:
        kind = _kind(p, dtype, layout)
        prior = self._target_prior.get((target, kind), 1.0)
        pts = self._path_layout_points.get((target, layout, kind, path)) if path else None
        if pts is None:
            pts = self._layout_points.get((target, layout, kind))
        return _factor(pts, p, prior)

    def _path(
        self,
        target: str,
        p: Problem,
        dtype: str,
        layout: str,
        pred: model.Prediction | None = None,
    ) -> str | None:
        """``code_path`` of ``target`` on ``p`` (from ``pred``, else predicted here); None,
        without a prediction, for a target outside ``PATH_TARGETS``."""
        if target not in PATH_TARGETS:
            return None
        if pred is None:
            pred = model.predict(p, dtype, layout, target, self.device, self.calibration)
        return code_path(target, pred) if pred.supported else None

    def layout_extreme(self, target: str, p: Problem, dtype: str, layout: str) -> float | None:
        """``extreme`` over ``target``'s probes of ``layout`` in every dtype, of the kinds
        of rows that may correct ``p`` (``_layout_kinds``); None where ``p`` lies outside
        the sizes those probed. Routing falls back to it where no probe of ``p``'s own dtype
        and kind spans ``p`` (``decide``).

        Example:
            >>> from jax_tsm2 import model
            >>> from jax_tsm2.tune.calibration_data import Record
            >>> probe = Record("float32", "nn", Problem(None, 8, 4096, 4096),
            ...                {"tsm2s": 3e-5, "xla": 6e-5})
            >>> data = CalibrationData({"key": "GPU"}, 4e12, 2e-6, (probe,), {})
            >>> corr = Corrections(data, model.H100_SXM)
            >>> odd = Problem(None, 4, 4095, 4095)  # f16, rows not whole vectors
            >>> corr.extreme("tsm2s", odd, "float16", "nn") is None
            True
            >>> corr.layout_extreme("tsm2s", odd, "float16", "nn") > 0
            True
        """
        pts = self._layout_points.get((target, layout, _kind(p, dtype, layout)))
        bound = _extreme(pts, target, p)
        if bound is None or target == "xla":
            return bound
        near = _near_extreme(pts, p)
        return bound if near is None else near


def xla_best_case(p: Problem, dtype: str, device: model.Device, launch_s: float) -> float:
    """XLA's dot at its best: one pass over the operands and the result at the read ceiling,
    after a launch. What routing assumes of XLA's dot where nothing was measured near a
    shape, so that an unmeasured shape never trades XLA's dot for a kernel that is slower.

    Example:
        >>> from jax_tsm2 import model
        >>> dev = model.H100_SXM.with_bandwidth(4e12)
        >>> round(xla_best_case(Problem(None, 10**6, 8, 8), "float32", dev, 2e-6) * 1e6, 1)
        18.0
    """
    return launch_s + problem_bytes(p, dtype) / device.bandwidth()

"""``jax_tsm2.explain``: what the library runs for an operation, and why.

Every choice the library makes is a ``jax_tsm2.decision.Decision``: for a matrix product
(a TSM2 kernel or XLA's dot), a k-means step (the fused kernel or the jnp path) and ABFT's
checks (the ABFT kernels or XLA's formulations). ``explain`` shows them:

- ``explain(a, b)`` (also ``explain.matmul``) explains a product: it asks the router
  (``routing.route``, the decision the lowering will make, on the same device) and the
  performance model (``model.choose``: every candidate kernel's tile, occupancy and
  predicted time, and XLA's dot's), looks the shape up in the autotuner's cache for this
  GPU (``tune.cache``), and puts it all in one ``Explanation``, whose ``route`` is the
  decision and whose ``str()`` is a short report: the path, which routing layer decided it
  (the rules, the tune cache, autotuning, this GPU's calibration, or the model), why, and where
  the tune cache lives. With autotuning on (``jax_tsm2.autotune``, or ``autotune=True``)
  and a GPU in the process, explaining a shape the cache has no entry for times it, as
  its first lowering would. Operands may be arrays, ``jax.ShapeDtypeStruct``s, or shapes
  (then give ``dtype``). ``layout`` says how they are stored: ``"nn"`` (``a[.., m, k] @
  b[.., k, n]``), ``"nt"`` (b given ``n x k``) or ``"tn"`` (a given ``k x m``).
- ``explain.kmeans_step(x, k)`` the decision of each k-means iteration's pass over the
  data, and of the centroid update that ends it.
- ``explain.abft(a, b)`` the decisions of ``abft_matmul``'s checksum passes and repair.

Example:
    >>> import jax, jax.numpy as jnp, jax_tsm2
    >>> from jax_tsm2 import model
    >>> a = jax.ShapeDtypeStruct((10_000_000, 8), jnp.bfloat16)
    >>> b = jax.ShapeDtypeStruct((8, 8), jnp.bfloat16)
    >>> e = jax_tsm2.explain(a, b, mode="auto", device=model.H100_SXM, show=False)
    >>> e.path, e.layer, e.kernel.kernel, e.kernel.params["t2 (n_tile)"]
    ('tsm2l', 'model', 'tsm2l', 8)
    >>> why, kernel = e.kernel.reason.split("; ")
    >>> why
    'memory-bound: k*n/(k+n) = 4 below the t2 threshold of 22 on this GPU'
    >>> kernel
    'rows of 16 bytes run the row-per-thread kernel'
    >>> step, update = jax_tsm2.explain.kmeans_step((10**6, 256), 16, dtype=jnp.float32,
    ...                                             mode="auto", show=False)
    >>> step.target, step.layer, update.target
    ('fused', 'measured', 'kernel')
    >>> [d.target for d in jax_tsm2.explain.abft(a, b, platform="cpu", show=False)]
    ['kernels', 'xla']
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np
from jax import numpy as jnp

from jax_tsm2 import _compat, _ffi, abft, clustering, config, decision, model, routing
from jax_tsm2.problem import check_dims
from jax_tsm2.tune import cache


@dataclasses.dataclass(frozen=True)
class Explanation:
    """What ``explain.matmul`` found: the router's decision (``route``) and the model's view.
    ``str()`` gives the report."""

    route: routing.Route  # the decision the lowering makes
    mode: str
    platform: str
    layout: str
    dtype: str
    problem: routing.Problem
    device: model.Device
    kernel: model.Prediction | None  # the path's kernel, else the model's best kernel
    xla: model.Prediction
    model_choice: model.Choice
    tuned: str | None  # the autotuner's winner for this shape on this GPU, if cached
    tuned_path: str

    @property
    def path(self) -> str:
        """What the lowering emits: "tsm2r", "tsm2l", "tsm2s", "tsm2t" or "xla"."""
        return self.route.target

    @property
    def route_reason(self) -> str:
        """The router's sentence."""
        return self.route.reason

    @property
    def layer(self) -> str:
        """Which routing layer decided: "rules", "tune cache", "autotune", "calibration" or
        "model"."""
        return self.route.layer

    @property
    def predicted(self) -> model.Prediction:
        """The prediction for the path actually taken."""
        return self.xla if self.path == "xla" or self.kernel is None else self.kernel

    @property
    def reason(self) -> str:
        """Why, in one line: the route's reason and the model's bound."""
        k = self.kernel
        return self.route_reason + (f"; {k.reason}" if k is not None else "")

    def __str__(self) -> str:
        p, dev = self.problem, self.device
        bw = dev.bandwidth()
        shape = (
            f"{'' if p.batch is None else f'{p.batch} x '}"
            f"[{p.m} x {p.k}] @ [{p.k} x {p.n}] {self.dtype}, layout {self.layout}"
        )

        # Over the fewest bytes the product must move (as the benchmark reports it),
        # not the DRAM traffic the model counts (re-reads, XLA's tn passes).
        isz = np.dtype(jnp.dtype(self.dtype)).itemsize
        batch = p.batch or 1
        least = (batch * p.m * p.k + (p.batch or 1) * p.k * p.n + batch * p.m * p.n) * isz

        def timing(q: model.Prediction) -> str:
            gbs = least / q.seconds
            return (
                f"{q.seconds * 1e6:.1f} us, {gbs / 1e9:.0f} GB/s ({gbs / bw:.0%} of {bw / 1e9:.0f})"
            )

        lines = [
            f"jax_tsm2.explain: {shape}",
            f"  device:    {dev.name} ({dev.source}; {dev.sm_count} SMs, "
            f"{dev.clock_hz / 1e9:.2f} GHz, {bw / 1e9:.0f} GB/s)",
            f"  path:      {self.path}  [mode {self.mode!r}, platform {self.platform!r}; "
            f"decided by: {self.layer}]",
            f"  why:       {self.route_reason}",
            f"  predicted: {self.predicted.kernel} {timing(self.predicted)}",
        ]
        k = self.kernel
        if k is not None:
            q = k.params
            if "t1 (chunk_k)" in q:
                lines.append(
                    f"  kernel:    {k.kernel}, {q['tile']} tile: t1 (k per stage) = "
                    f"{q['t1 (chunk_k)']}, t2 (n per block) = {q['t2 (n_tile)']}, t3 (16-byte "
                    f"vectors per thread) = {q['t3 (vec_per_thr)']}; {q['rows']} rows, "
                    f"{q['rows_per_thread']} per thread, {q['k_groups']} k-groups, "
                    f"{q['stages']} stages, {q['threads']} threads, "
                    f"{q['smem_bytes'] / 1024:.0f} KB shared"
                )
            elif q.get("tile") == "row stream":
                lines.append(
                    f"  kernel:    {k.kernel}, row stream: {q['rows_per_warp']} rows per warp, "
                    f"{q['vec_per_lane']} 16-byte vectors per lane and row, {q['ring']}; B's "
                    f"rows of {q['n_b']} in {q['smem_bytes'] / 1024:.0f} KB shared; k in "
                    f"{q['splits']} split(s) of {q['k_chunk']}"
                )
            else:
                lines.append(f"  kernel:    {k.kernel}, {q}")
            if k.occupancy is not None:
                o = k.occupancy
                lines.append(
                    f"  occupancy: {o.blocks_per_sm} blocks/SM ({o.warps_per_sm} warps), "
                    f"limited by {o.limiter}"
                    + (
                        f"; {q['blocks']} blocks over {q['units']} work units"
                        if "units" in q
                        else ""
                    )
                    + (
                        f"; {q['inflight_bytes_per_sm'] / 1024:.0f} KB in flight per SM"
                        if "inflight_bytes_per_sm" in q
                        else ""
                    )
                )
            lines.append(
                f"  bound:     {k.reason} (stream {k.t_mem * 1e6:.1f} us, "
                f"compute {k.t_cmp * 1e6:.1f} us at {q.get('fma_per_clk_per_sm', '?')} "
                "FMA/clk/SM)"
            )
        lines.append(f"  xla:       {timing(self.xla)}; {self.xla.reason}")
        cands = " | ".join(
            f"{c.kernel} {c.seconds * 1e6:.1f} us" if c.supported else f"{c.kernel} n/a"
            for c in (*self.model_choice.candidates, self.xla)
        )
        lines.append(f"  model:     picks {self.model_choice.target}: {cands}")
        lines.append(
            f"  tuned:     {self.tuned} (entry in {self.tuned_path})"
            if self.tuned
            else f"  tuned:     no entry in {self.tuned_path} (optional)"
        )
        return "\n".join(lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # IPython
        printer.text(str(self))


def _shape(x: Any) -> tuple:
    return tuple(x.shape) if hasattr(x, "shape") and hasattr(x, "dtype") else tuple(x)


def _as_struct(x: Any, dtype: Any) -> Any:
    """``x`` if it has a shape and dtype, else a struct of the shape ``x`` with ``dtype``."""
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return x
    if dtype is None:
        raise TypeError("explain: give dtype= when the operands are shapes")
    check_dims(tuple(x))
    return jax.ShapeDtypeStruct(tuple(int(s) for s in x), jnp.dtype(dtype))


def _matmul(
    a: Any,
    b: Any,
    out_dtype: Any = None,
    *,
    dtype: Any = None,
    layout: str = "nn",
    platform: str = "cuda",
    mode: str | None = None,
    precision: Any = None,
    device: model.Device | str | None = None,
    show: bool = True,
    autotune: bool | None = None,
) -> Explanation:
    """Explains how ``a @ b`` (in ``layout``) is computed; prints the report if ``show``.

    ``mode`` defaults to the current custom-call mode, ``autotune`` to the
    current autotune switch, ``device`` to this process's GPU (the H100
    preset without one), ``platform`` to ``"cuda"``. Arguments are checked as
    the functions that take them check them (the primitive's operand checks,
    ``custom_call_mode``, ``matmul``'s precision): TypeError or ValueError.
    """
    p = routing.problem_of(_shape(a), _shape(b), layout)
    a, b = _as_struct(a, dtype), _as_struct(b, dtype)
    if np.dtype(a.dtype) != np.dtype(b.dtype):
        raise TypeError(f"explain: operand dtypes differ: {a.dtype} and {b.dtype}")
    out_dtype = a.dtype if out_dtype is None else out_dtype
    mode = config.check_mode(config.get_custom_call_mode() if mode is None else mode, "explain")
    autotune = config.check_bool(config.get_autotune() if autotune is None else autotune, "explain")
    precision = _compat.canonicalize_precision(precision)
    dev = model.resolve_device(device)
    cuda_targets = platform != "cuda" or _ffi.cuda_kernels_usable(_ffi.cuda_targets_available())
    r = routing.route(
        a,
        b,
        out_dtype,
        platform=platform,
        mode=mode,
        precision=precision,
        cuda_targets=cuda_targets,
        layout=layout,
        device=dev,
        autotune=autotune,
    )
    name = jnp.dtype(a.dtype).name
    xla_precision = routing._xla_precision(precision)
    choice = model.choose(p, name, layout, device=dev, xla_precision=xla_precision)
    path = r.target
    if path != "xla":
        kernel = model.predict(p, name, layout, path, device=dev, xla_precision=xla_precision)
    else:
        kernel = choice.best
    tuned = cache.lookup(dev.key, name, layout, p.batch, p.m, p.k, p.n)
    e = Explanation(
        route=r,
        mode=mode,
        platform=platform,
        layout=layout,
        dtype=name,
        problem=p,
        device=dev,
        kernel=kernel,
        xla=choice.xla,
        model_choice=choice,
        tuned=tuned,
        tuned_path=str(cache.cache_path(dev.key)),
    )
    if show:
        print(e)
    return e


def _kmeans_step(
    x: Any,
    k: int,
    *,
    dtype: Any = None,
    platform: str = "cuda",
    mode: str | None = None,
    show: bool = True,
) -> tuple[decision.Decision, decision.Decision]:
    """The decisions of a k-means iteration on ``x`` (``(n, d)``: an array, a struct, or a
    shape with ``dtype``) with ``k`` clusters on ``platform``: its pass over the data (the
    fused kernel or the jnp path, ``clustering.fused.decide_step``) and the centroid
    update that ends it (``decide_update``). Prints them if ``show``."""
    x = _as_struct(x, dtype)
    if len(x.shape) != 2:
        raise ValueError(f"explain.kmeans_step: x must be (n, d), got shape {tuple(x.shape)}")
    n, d = x.shape
    k = clustering.core._count(k, "k")
    mode = config.check_mode(config.get_custom_call_mode() if mode is None else mode, "explain")
    with config.custom_call_mode(mode):
        step = clustering.fused.decide_step(x.dtype, d, k, platform=platform)
        update = clustering.fused.decide_update(x.dtype, n, platform=platform)
    if show:
        print(f"{step}\n{update}")
    return step, update


def _abft(
    a: Any,
    b: Any,
    *,
    dtype: Any = None,
    platform: str = "cuda",
    mode: str | None = None,
    show: bool = True,
) -> tuple[decision.Decision, decision.Decision]:
    """The decisions of ``abft.abft_matmul(a, b)`` on ``platform``: its checksum passes and
    its repair (``abft.decide``). Prints them if ``show``."""
    a, b = _as_struct(a, dtype), _as_struct(b, dtype)
    mode = config.check_mode(config.get_custom_call_mode() if mode is None else mode, "explain")
    with config.custom_call_mode(mode):
        sums, repair = abft.decide(a, b, platform=platform)
    if show:
        print(f"{sums}\n{repair}")
    return sums, repair


class Explain:
    """``jax_tsm2.explain``: what the library runs for an operation, and why.

    ``explain(a, b, ...)`` is ``explain.matmul(a, b, ...)``, the report on a matrix product
    (an ``Explanation``); ``explain.kmeans_step(x, k)`` and ``explain.abft(a, b)`` give the
    decisions (``jax_tsm2.decision.Decision``) of a k-means iteration and of ABFT's checks.
    See ``jax_tsm2.explanation``.
    """

    matmul = staticmethod(_matmul)
    kmeans_step = staticmethod(_kmeans_step)
    abft = staticmethod(_abft)

    def __call__(self, a: Any, b: Any, out_dtype: Any = None, **kwargs: Any) -> Explanation:
        return _matmul(a, b, out_dtype, **kwargs)

    def __repr__(self) -> str:
        return "jax_tsm2.explain"


explain = Explain()

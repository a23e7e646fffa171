"""Which implementation runs a product: a TSM2 kernel (R, L, S, T) or XLA's dot.

``route`` decides from static facts (operand shapes and dtypes, the operand
layout, the output dtype, precision, platform, the custom-call mode, whether
the CUDA targets were built, and the GPU: ``model.current_device()``, or the
H100 preset where there is none), and, where autotuning is on, from a
measurement it takes. The lowerings in ``primitive.py`` call it;
tests and ``jax_tsm2.explain`` call it directly. It returns a ``Route``, the
library's ``Decision`` record for a product (``jax_tsm2.decision``): what runs,
the layer that decided, a sentence saying why, and the model's predictions where
it was asked.

The problem is the canonical one of the ``tsm2_matmul`` primitive, in one of
three layouts (all row-major; the result is always ``c[batch?, m, n]`` and the
contraction has length ``k``):

- ``"nn"``: ``a[batch?, m, k] @ b[batch?, k, n]``;
- ``"nt"``: ``a[batch?, m, k] @ b[batch?, n, k]^T`` (k-means' ``X @ C.T``);
- ``"tn"``: ``a[batch?, k, m]^T @ b[batch?, k, n]`` (Gram matrices, ``dL/dB``).

Eligibility (the thresholds below, from the paper's reasoning) says which
kernels could run a shape (``candidates``):

- TSM2L (nn, nt): k and n small enough for B to sit on chip;
- TSM2R (nn, nt): a skinny B (n small), any contraction;
- TSM2S (nn only): a few rows of A (m <= 16) times any B;
- TSM2T (tn only): a small result (m * n <= 512 * 512 outputs, either side up
  to that), the contraction k the huge one; deterministic (no float atomics).

Other shapes, and layouts a kernel does not take (``ffi/matmul/kinds.h``
KernelTakesLayout), go to XLA's dot. Where several kernels take a shape, the
performance model (``jax_tsm2.model``) picks the one it predicts fastest
(ties go to the order above). Modes "prefer" and "always" stop there. Mode
"auto" on a GPU with the CUDA targets then asks, in this order, and the first
layer that answers decides (``Route.layer``):

1. ``"tune cache"``: an entry for this GPU and shape written by ``python -m
   jax_tsm2.tune`` or by autotuning (``jax_tsm2.tune.cache``), if its target
   takes the layout. ``"autotune"``: with autotuning on (``route(autotune=True)``;
   the lowerings pass ``jax_tsm2.get_autotune()``, off by default) and no entry
   yet, a shape that some kernel takes is timed first, on this GPU
   (``jax_tsm2.tune.online``), and the entry it stores decides; later lowerings
   find it as ``"tune cache"``. Without a GPU in the process, or where the
   timing fails (a ``RuntimeWarning``), the next layers decide;
2. ``"calibration"``: this GPU's calibration (``jax_tsm2.tune.calibrate``:
   ``python -m jax_tsm2.tune --calibrate`` stores one in the user's cache
   directory; the package ships those of the GPUs it was measured on): the
   model's predictions corrected by what the probes measured near the shape,
   and a kernel only where it is predicted faster than XLA's dot by a margin
   that grows where no probe was near (where no probe of the shape's dtype and
   kind of rows spans it, only where it is faster at the least favourable
   correction its layout's probes measured). A calibration that timed another
   build's kernels (``calibrate.kernels_note``) still decides, and the reason
   says so;
3. ``"model"``: on a GPU without a calibration, or without a GPU in the
   process, ``model.choose`` with a wide margin
   (``calibrate.UNCALIBRATED_MARGIN``): the model's constants were fitted to
   one GPU and err by tens of percent on another, so only a kernel predicted
   far faster than XLA's dot is chosen; on a real GPU, faster than XLA's dot
   at its best (one pass over the operands at the bandwidth), since the
   model's XLA is another GPU's.

No GPU's measurements are written here as code: what routing knows of a GPU
comes from its calibration file.
The decisions are cached per (problem, dtype, layout, candidates, XLA
precision, device or calibration); the tune cache is read on every call (a stat of its
file, parsed once per change), so a tuning run takes effect at the next
lowering. Without a GPU in the process (cross-platform lowering, tests) the
model reasons about the H100 preset, so decisions are deterministic; where
the driver query fails, the same preset stands in and the reason says so.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Literal

import numpy as np
from jax import numpy as jnp

from jax_tsm2 import _compat, _ffi, model
from jax_tsm2.decision import Alternative, Decision
from jax_tsm2.problem import (
    KERNEL_IDS,
    KERNEL_LAYOUTS,
    LAYOUT_IDS,
    LAYOUTS,
    Problem,
    check_layout,
    problem_of,
)
from jax_tsm2.tune import cache, calibrate, online

__all__ = [  # the names of problem.py are routing's vocabulary too
    "KERNEL_IDS",
    "KERNEL_LAYOUTS",
    "LAYOUTS",
    "LAYOUT_IDS",
    "Problem",
    "Route",
    "calibrated_decision",
    "candidates",
    "check_layout",
    "problem_of",
    "route",
]

# TSM2L: tall-and-skinny A (k small) times a small B (k x n).
TSM2L_MAX_K = 64
TSM2L_MAX_N = 64
# TSM2R: large A times a skinny B; used when k is past TSM2L's range.
TSM2R_MAX_N = 64
# TSM2S: a few rows of A times a large B (ffi/matmul/split_plan.h kSMaxM).
TSM2S_MAX_M = _ffi.S_MAX_M
# TSM2T: A^T @ B with a small result and a huge contraction. The bound is on the
# result's entries, not on each side: an elongated result (a randomized SVD's
# A.T @ Q, 2000 x 32) tiles as well as a square one, B read once per tile of
# m (the model counts that), and the calibration or the model then decides
# against XLA's dot.
TSM2T_MAX_OUTPUTS = 512 * 512


SUPPORTED_DTYPES: frozenset[np.dtype] = frozenset(
    np.dtype(t) for t in (jnp.float32, jnp.float64, jnp.bfloat16, jnp.float16)
)
_HALF_DTYPES = frozenset(np.dtype(t) for t in (jnp.bfloat16, jnp.float16))
_PLATFORMS_WITH_TARGETS = ("cpu", "cuda")

Target = Literal["tsm2r", "tsm2l", "tsm2s", "tsm2t", "xla"]
Layout = Literal["nn", "nt", "tn"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Route(Decision):
    """A product's ``Decision`` (``op="matmul"``) for one ``layout``: ``target`` is a TSM2
    kernel or ``"xla"``, ``layer`` the layer that decided, ``problem`` the sizes it decided
    on; ``alternatives`` hold the model's predictions where it was asked."""

    op: str = "matmul"
    target: Target
    problem: Problem | None = None
    layout: Layout = "nn"

    @property
    def kernel(self) -> int | None:
        """The FFI ``kernel`` attribute (0 = R, 1 = L, 2 = S, 3 = T), or None for XLA."""
        return KERNEL_IDS.get(self.target)

    @property
    def layout_id(self) -> int:
        """The FFI ``layout`` attribute (0 = nn, 1 = nt, 2 = tn)."""
        return LAYOUT_IDS[self.layout]

    @property
    def custom_call(self) -> bool:
        return self.target != "xla"


def _alternatives(c: model.Choice) -> tuple[Alternative, ...]:
    """The model's predictions of a choice, the chosen one first."""
    preds = sorted((*c.candidates, c.xla), key=lambda q: q.kernel != c.target)
    return tuple(
        Alternative(q.kernel, q.seconds if q.supported else None, "" if q.supported else q.reason)
        for q in preds
    )


def kernel_can_write(dtype: Any, out_dtype: Any) -> bool:
    """The kernels write C in the operand dtype, or in f32 for bf16/f16 operands."""
    dtype, out_dtype = np.dtype(dtype), np.dtype(out_dtype)
    return out_dtype == dtype or (dtype in _HALF_DTYPES and out_dtype == np.float32)


def candidates(p: Problem, layout: str) -> tuple[tuple[str, ...], str]:
    """The kernels that take ``p`` in ``layout``, in order of preference on a tie, and why.

    Example:
        >>> candidates(Problem(None, 10**6, 16, 16), "nn")[0]
        ('tsm2l', 'tsm2r')
        >>> candidates(Problem(None, 8, 4096, 4096), "nn")
        (('tsm2s',), 'nn: m=8 <= 16: TSM2S')
    """
    if layout == "tn":
        if p.m * p.n <= TSM2T_MAX_OUTPUTS:
            why = f"m * n = {p.m} * {p.n} <= {TSM2T_MAX_OUTPUTS}"
            return ("tsm2t",), f"tn: {why}, contraction k={p.k}: TSM2T"
        why = f"m * n = {p.m} * {p.n} > {TSM2T_MAX_OUTPUTS}"
        return (), f"tn: {why}: the result is not small"
    names, whys = [], []
    if p.k <= TSM2L_MAX_K and p.n <= TSM2L_MAX_N:
        names.append("tsm2l")
        whys.append(f"k={p.k} <= {TSM2L_MAX_K} and n={p.n} <= {TSM2L_MAX_N}: TSM2L")
    if p.n <= TSM2R_MAX_N:
        names.append("tsm2r")
        whys.append(f"n={p.n} <= {TSM2R_MAX_N}: TSM2R")
    if layout == "nn" and p.m <= TSM2S_MAX_M:
        names.append("tsm2s")
        whys.append(f"m={p.m} <= {TSM2S_MAX_M}: TSM2S")
    if not names:
        return (), f"{layout}: n={p.n} > {TSM2R_MAX_N} and m={p.m}: not tall-and-skinny"
    return tuple(names), f"{layout}: " + ", ".join(whys)


def tile_smem_bytes(p: Problem, dtype: Any, kernel: str) -> int:
    """Shared memory per block of the TSM2R or TSM2L tile that runs ``p`` (0 for the S
    and T kernels, whose rings fit every supported GPU: 96 KB at most).

    The tiles are sized for an H100's 227 KB, so that on GPUs with less (163 KB on
    sm_80, 99 KB on sm_86, sm_89 and sm_120) some do not fit and route to XLA's dot.

    Example:
        >>> tile_smem_bytes(Problem(None, 10**6, 64, 16), "float32", "tsm2r") > 0
        True
        >>> tile_smem_bytes(Problem(None, 16, 10**6, 16), "float32", "tsm2t")
        0
    """
    if kernel not in ("tsm2r", "tsm2l") or p.k < 1 or p.n < 1:
        return 0
    kid = _ffi.KERNEL_IDS[kernel]
    return int(_ffi._tsm2_ext.tile_config(np.dtype(dtype).name, kid, p.k, p.n)["smem_bytes"])


def _fitting(
    p: Problem, dtype: str, names: tuple[str, ...], why: str, device: model.Device
) -> tuple[tuple[str, ...], str]:
    """The kernels of ``names`` whose shared memory fits ``device``, and why."""
    limit = device.smem_per_block_optin
    kept = tuple(k for k in names if tile_smem_bytes(p, dtype, k) <= limit)
    if kept == names:
        return names, why
    dropped = ", ".join(
        f"{k} needs {tile_smem_bytes(p, dtype, k) // 1024} KB" for k in names if k not in kept
    )
    return kept, f"{why}; of this GPU's {limit // 1024} KB of shared memory per block {dropped}"


def _forced(p: Problem, layout: str) -> tuple[str, str]:
    """Mode "always" where no kernel is eligible: the one that is correct for any size."""
    kernel = "tsm2t" if layout == "tn" else "tsm2r"
    return kernel, f"{layout}: m={p.m}, k={p.k}, n={p.n}, forced by mode 'always': {kernel}"


def _xla_precision(precision: Any) -> str:  # explain() uses it too
    """The model's name for the precision XLA's dot would run at ("highest" or "default")."""
    return "highest" if precision is not None and "HIGHEST" in str(precision) else "default"


@functools.lru_cache(maxsize=4096)
def _best_kernel(
    p: Problem, dtype: str, layout: str, names: tuple[str, ...], device: model.Device
) -> tuple[str, str, tuple[Alternative, ...]]:
    """Of several eligible kernels, the one the model predicts fastest, why, and the
    predictions it compared."""
    if len(names) == 1:
        return names[0], "", ()
    c = model.choose(p, dtype, layout, device=device, kernels=names)
    if c.best is None:
        return names[0], "", ()
    others = ", ".join(
        f"{q.kernel} {q.seconds * 1e6:.1f} us" for q in c.candidates if q is not c.best
    )
    why = f"; model picks {c.best.kernel} ({c.best.seconds * 1e6:.1f} us; {others})"
    return c.best.kernel, why, _alternatives(dataclasses.replace(c, target=c.best.kernel))


@functools.lru_cache(maxsize=4096)
def _model_choice(
    p: Problem,
    dtype: str,
    layout: str,
    names: tuple[str, ...],
    xla_precision: str,
    device: model.Device,
    calibration: model.Calibration = model.CALIBRATION,
) -> model.Choice:
    # Without a calibration the model's error on a GPU it was not fitted to is
    # large (a median 31% on an H200 with constants fitted to an H100), so a kernel
    # must be predicted much faster than XLA's dot before it is chosen.
    return model.choose(
        p,
        dtype,
        layout,
        device=device,
        kernels=names,
        xla_precision=xla_precision,
        calibration=calibration,
        margin=max(calibrate.UNCALIBRATED_MARGIN, *(calibration.margin(k) for k in names)),
    )


def _tuned(
    p: Problem,
    dtype: np.dtype,
    layout: str,
    device: model.Device,
    why: str,
    layer: str = "tune cache",
) -> Route | None:
    """Layer 1 of mode "auto": this GPU's tune cache, if it has a usable entry; ``layer``
    "autotune" where the entry was just measured."""
    target = cache.lookup(device.key, dtype.name, layout, p.batch, p.m, p.k, p.n)
    if target is None:
        return None
    where = f"tune cache {cache.cache_path(device.key)}"
    if layer == "autotune":
        where = f"autotuned at this lowering, stored in {where}"
    if target == "xla":
        reason = f"{why}; XLA's dot measured fastest for this shape on this GPU ({where})"
        return Route(target="xla", reason=reason, problem=p, layout=layout, layer=layer)
    if layout not in KERNEL_LAYOUTS.get(target, ()):
        return None
    if not model.predict(p, dtype, layout, target, device=device).supported:
        return None  # e.g. TSM2S for m > 16: the kernel would reject the problem
    reason = f"{why}; {target} measured fastest for this shape on this GPU ({where})"
    return Route(target=target, reason=reason, problem=p, layout=layout, layer=layer)


def calibrated_decision(
    p: Problem,
    dtype: str,
    layout: str,
    corrections: calibrate.Corrections,
    xla_precision: str = "default",
) -> calibrate.Decision:
    """What the calibration layer of mode "auto" decides for the canonical problem ``p``:
    the kernels eligible for its sizes (``candidates``) whose tiles fit the calibration's
    GPU, weighed against XLA's dot by ``calibrate.decide``. The tune cache and autotuning,
    which come first in ``route``, are not consulted. ``benchmarks/routing_replay.py``
    replays measured runs through it.

    Example:
        >>> from jax_tsm2 import model
        >>> probe = {"dtype": "float32", "layout": "nn", "batch": None, "m": 10**6,
        ...          "k": 8, "n": 8, "seconds": {"tsm2l": 1e-4, "xla": 2e-5}}
        >>> data = calibrate.CalibrationData.from_json(
        ...     {"schema": calibrate.SCHEMA, "version": calibrate.VERSION, "made": {},
        ...      "read_bytes_per_s": 4e12, "launch_seconds": 2e-6, "records": [probe],
        ...      "device": {"key": "GPU", "name": "GPU", "cc": [9, 0], "sm_count": 132}})
        >>> corr = calibrate.Corrections(data, model.H100_SXM)
        >>> calibrated_decision(Problem(None, 10**6, 8, 8), "float32", "nn", corr).target
        'xla'
    """
    names, why = candidates(p, layout)
    names, why = _fitting(p, dtype, names, why, corrections.device)
    if not names:
        return calibrate.Decision(
            "xla", {}, 0.0, f"{why}: no kernel takes this problem", "no kernel"
        )
    return _calibrated_choice(p, dtype, layout, names, xla_precision, corrections)


@functools.lru_cache(maxsize=4096)
def _calibrated_choice(
    p: Problem,
    dtype: str,
    layout: str,
    names: tuple[str, ...],
    xla_precision: str,
    corrections: calibrate.Corrections,
) -> calibrate.Decision:
    return calibrate.decide(p, dtype, layout, names, corrections, xla_precision)


def _auto(
    p: Problem,
    dtype: np.dtype,
    layout: str,
    names: tuple[str, ...],
    why: str,
    precision: Any,
    device: model.Device,
    calibration: model.Calibration,
    autotune: bool,
) -> Route:
    """Mode "auto" on a GPU with the targets: tune cache (or autotune), then this GPU's
    calibration, then the uncalibrated model with a wide margin."""
    r = _tuned(p, dtype, layout, device, why)
    if r is None and names and autotune:
        # Read the cache again even if this call did not time: another thread may have.
        timed = online.tune_now(p, dtype.name, layout, device)
        r = _tuned(p, dtype, layout, device, why, "autotune" if timed else "tune cache")
    if r is not None:
        return r
    if not names:
        return Route(target="xla", reason=f"{why}, XLA's dot", problem=p, layout=layout)
    xp = _xla_precision(precision)
    found = calibrate.corrections_for(device) if device.source == "driver" else None
    if found is not None:
        corrections, path = found
        d = _calibrated_choice(p, dtype.name, layout, names, xp, corrections)
        reason = f"{why}; {d.reason} ({path})"
        note = calibrate.kernels_note(corrections.data)
        if note is not None:
            reason += f" [{note}: `python -m jax_tsm2.tune --calibrate` measures this build's]"
        return Route(
            target=d.target,
            reason=reason,
            problem=p,
            layout=layout,
            layer="calibration",
            alternatives=tuple(Alternative(t, sec) for t, sec in sorted(d.seconds.items())),
        )
    c = _model_choice(p, dtype.name, layout, names, xp, device, calibration)
    target, reason = c.target, f"{why}; model: {c.reason}"
    if device.source == "driver":
        # On a GPU with no calibration, XLA's dot is assumed at its best (one pass at the
        # bandwidth): the model's XLA was fitted to another GPU's jax, and a kernel it
        # prefers on that ground alone can lose (an H100's constants on an H200 did).
        best = calibrate.xla_best_case(p, dtype.name, device, calibration.xla_t_launch)
        if target != "xla" and c.best.seconds * (1 + calibrate.UNCALIBRATED_MARGIN) >= best:
            target = "xla"
            reason = (
                f"{why}; XLA's dot at its best ({best * 1e6:.1f} us) is within the "
                f"{calibrate.UNCALIBRATED_MARGIN:.0%} margin of {c.best.kernel}'s predicted "
                f"{c.best.seconds * 1e6:.1f} us"
            )
        if calibrate.enabled():
            reason += (
                " [this GPU is not calibrated: `python -m jax_tsm2.tune --calibrate` measures it]"
            )
        else:
            reason += f" [calibrations turned off by {calibrate.ENV_VAR}]"
    elif device.source.startswith("H100 preset"):
        reason += f" [device: {device.source}]"
    return Route(
        target=target,
        reason=reason,
        problem=p,
        layout=layout,
        layer="model",
        alternatives=_alternatives(c),
    )


def route(
    a: Any,
    b: Any,
    out_dtype: Any,
    *,
    platform: str,
    mode: str,
    precision: Any = None,
    cuda_targets: bool = True,
    layout: str = "nn",
    device: model.Device | None = None,
    calibration: model.Calibration = model.CALIBRATION,
    autotune: bool = False,
) -> Route:
    """Decides how the product of canonical rank-2/3 operands ``a``, ``b`` is computed.

    Never raises for a supported call: a failing device query falls back to
    the H100 preset (the reason says so), a corrupt tune cache is ignored. A
    symbolic dimension (``jax.export`` with ``export.symbolic_shape``) routes
    to XLA's dot: the kernels are planned for static sizes.

    Args:
      a, b: anything with ``.shape`` and ``.dtype`` (avals, ShapeDtypeStructs, arrays),
        stored in ``layout``.
      out_dtype: dtype of the result.
      platform: the lowering platform, e.g. ``"cuda"`` or ``"cpu"``.
      mode: ``"auto"``, ``"prefer"``, ``"always"`` or ``"never"`` (see ``jax_tsm2.config``).
      precision: canonical ``lax`` precision (None, a pair of ``lax.Precision``
        or a dot algorithm). The kernels compute at full precision (never
        TF32), which satisfies every ``Precision`` value; dot algorithms ask
        for specific arithmetic and go to XLA. ``HIGHEST`` makes the model
        weigh XLA's full-precision dot.
      cuda_targets: whether this build has the CUDA kernels.
      layout: ``"nn"``, ``"nt"`` or ``"tn"`` (module docstring).
      device: the GPU the model reasons about; default ``model.current_device()``.
      calibration: the model's constants in mode "auto" (benchmarks/grid_fit.py
        simulates routing with refitted ones).
      autotune: in mode "auto" on CUDA, time a shape the tune cache has no entry
        for now and cache the winner (``jax_tsm2.tune.online``; this may take
        seconds, and does nothing without a GPU in the process).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> a = jax.ShapeDtypeStruct((20480, 20480), jnp.float32)
        >>> b = jax.ShapeDtypeStruct((20480, 8), jnp.float32)
        >>> route(a, b, jnp.float32, platform="cuda", mode="prefer").target
        'tsm2r'
        >>> r = route(a, b, jnp.float32, platform="cuda", mode="auto")  # XLA's dot streams faster
        >>> r.target, r.layer
        ('xla', 'model')
        >>> g = jax.ShapeDtypeStruct((1_000_000, 16), jnp.float32)  # A^T @ A: a Gram matrix
        >>> route(g, g, jnp.float32, platform="cuda", mode="auto", layout="tn").target
        'tsm2t'
    """
    dtype, out = np.dtype(a.dtype), np.dtype(out_dtype)
    p = problem_of(a.shape, b.shape, layout)
    xla = lambda why: Route(
        target="xla", reason=f"{layout}: {why}", problem=p, layout=layout, platform=platform
    )
    if platform not in _PLATFORMS_WITH_TARGETS:
        return xla(f"no tsm2 target for platform {platform!r}")
    if mode == "never":
        return xla("mode 'never'")
    if np.dtype(b.dtype) != dtype or dtype not in SUPPORTED_DTYPES:
        return xla(f"dtypes {dtype}, {np.dtype(b.dtype)}: the kernels take f32, f64, bf16, f16")
    if not kernel_can_write(dtype, out):
        return xla(f"the kernels cannot write {out} from {dtype} operands")
    if precision is not None and _compat.is_dot_algorithm(precision):
        return xla(f"dot algorithm {precision} requested")
    symbolic = [d for d in (p.batch, p.m, p.k, p.n) if _compat.is_symbolic_dim(d)]
    if symbolic:
        # Everything below compares sizes, and a kernel's launch plan and workspace are
        # sized when it is lowered: with a size unknown until the call, XLA's dot.
        names = ", ".join(sorted({str(d) for d in symbolic}))
        return xla(f"symbolic dimension(s) {names}: the kernels need static sizes")
    if p.empty:
        return xla("empty problem (a zero dimension): XLA's dot returns the right zeros")
    if platform == "cuda" and not cuda_targets:
        return xla("this build of jax_tsm2 has no CUDA targets (built with TSM2_CUDA=OFF?)")
    if platform == "cpu" and mode != "always":
        return xla("on CPU XLA's dot is used (mode 'always' forces the reference target)")
    dev = model.current_device() if device is None else device
    names, why = candidates(p, layout)
    if platform == "cuda":
        names, why = _fitting(p, dtype.name, names, why, dev)
    if platform == "cuda" and mode == "auto":
        return _auto(p, dtype, layout, names, why, precision, dev, calibration, autotune)
    if not names:
        if mode != "always":
            return xla(f"{why.removeprefix(f'{layout}: ')}, XLA's dot")
        target, why = _forced(p, layout)
        if platform == "cuda" and not _fitting(p, dtype.name, (target,), "", dev)[0]:
            return xla(f"{target}'s tile does not fit this GPU's shared memory, XLA's dot")
        weighed: tuple[Alternative, ...] = ()
    else:
        target, picked, weighed = _best_kernel(p, dtype.name, layout, names, dev)
        why += picked
    if platform == "cpu":
        why = f"mode 'always' on CPU: reference target ({why})"
    assert layout in KERNEL_LAYOUTS.get(target, LAYOUTS), (target, layout)
    return Route(
        target=target,
        reason=why,
        problem=p,
        layout=layout,
        platform=platform,
        alternatives=weighed,
    )

"""Algorithm-based fault tolerance (ABFT) for ``C = A @ B``: checksums, verification, correction.

Column checksums with two random-sign weight vectors (``checksum_weights``: signs ``e_i`` from a
fixed hash of the row, and ``e_i (i + 1) / m``), in three passes, one over each matrix:
``encode`` reads ``A`` once (its weighted column sums ``W^T A`` and the scales ``1^T |A|`` and
``1^T A^2``) and ``B`` once (the reference checksums ``(W^T A) B`` and the scales of the
threshold); ``verify`` reads ``C`` once (``W^T C``, ``||C[:, j]||_1`` and ``||C[:, j]||_2``),
and a column whose residual ``W^T C - (W^T A) B`` exceeds its threshold (or is not finite) is
flagged. The threshold is a statistical bound on what rounding alone does to the residual,
capped by the worst case: ``jax_tsm2.abft_model`` derives it and states the false-positive rate
it targets (below ``1e-9`` per check). ``abft_matmul`` then repairs a single flagged column by
recomputing it from the operands (``c[:, j] = a @ b[:, j]``, one pass over ``A``), which also
locates the faulty entries; a clean product does not pay for the recomputation. It checks a
bf16/f16 product as its f32 sums, before rounding it (``checked_dtype``): after the rounding,
the threshold must allow for every entry's rounding, which hides errors of a tenth of a
column's largest entry once the column has a few dozen rows.

Where the checks run: the FFI targets ``tsm2_abft_encode`` and ``tsm2_abft_verify``
(``abft_calls``) on CUDA, where each pass is one streaming kernel and a small one adding its
split rows, and on CPU, where their plain-loop reference is the default: both sum the checksums
in f64 (double-double for f64 data), whatever ``jax_enable_x64`` says, which is what keeps the
threshold tight. Elsewhere, or with ``custom_call_mode("never")``, XLA's formulation: one
variadic reduction per pass, summing in the accumulation dtype, whose threshold pays for that
rounding. The judgement after the pass over C runs as the ``tsm2_abft_judge`` kernels on CUDA
(they flag the columns on the device, recompute only when one is flagged, write the column into
``C`` in place and assemble the verdict: no host round trip) and as a ``lax.cond`` elsewhere.
(``_SUMS`` and ``_REPAIR`` select other formulations, for benchmarks and tests.)

What was traded for speed: the Huang-Abraham row checksums ``C W`` are gone (checking them
needs ``B`` before ``A`` and ``A`` before ``B``, a fourth pass). A fault is therefore known by
its column only; its row comes from the operands (``abft_matmul``, or ``correct(..., a=, b=)``)
or, without them, from the ratio of the two weighted residuals, which is unambiguous only for
a large error (``|d| > 4 m t_j``; neighbouring weights differ by ``1 / m``). Several faults in
one column are repaired with the operands but may be mislocated without them; faults in two or
more columns are reported as uncorrectable.

Every step is traced JAX: the verdict is a pytree of arrays (no Python branch on data, no
transfer of results), so it works under ``jax.jit`` and ``jax.vmap``. Operands are 2-D; batch
with ``jax.vmap`` (under ``vmap`` the targets run once per batch entry, and the ``lax.cond``
becomes a select: the recomputation then runs for every entry).

Detection and location limits, in terms of the column threshold ``t_j``
(``verify(...).col_threshold``): an error ``|d| > 1.2 t_j`` is flagged, one far below ``t_j``
never is; a flagged error is located and repaired from the operands; without them it is
located for ``|d| > 4 m t_j`` (with f32 checksums and ``m`` beyond about 1600, very large
errors blur the ratio with their own rounding and are reported uncorrectable instead). The
threshold depends on ``C``'s column, fault included: a fault raises its own column's threshold
by up to ``6.6 u_out |d|`` in bf16/f16 (its half-ulp; ``u_out = 2^-8`` for bf16), which leaves
detection alone but limits location without the operands to columns of under
``1 / (26 u_out)`` rows (10 in bf16, 80 in f16).
``abft_matmul(..., inject=(row, col, bit))`` plants a fault inside the pass over C, for tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike, DTypeLike

from jax_tsm2 import _ffi, abft_calls, abft_model, config
from jax_tsm2.abft_model import accumulation_dtype, checksum_scale, checksum_weights
from jax_tsm2.api import matmul
from jax_tsm2.decision import Decision

__all__ = [
    "Checksums",
    "Residuals",
    "Verdict",
    "abft_matmul",
    "accumulation_dtype",
    "check",
    "checked_dtype",
    "checksum_scale",
    "checksum_weights",
    "correct",
    "decide",
    "encode",
    "inject_error",
    "product",
    "verify",
]

_FLOATS = (jnp.float16, jnp.bfloat16, jnp.float32, jnp.float64)
# Rows of Checksums.stats (ffi/abft/checksum.h, AbftStat).
_REF, _REF_LO, _ABS, _NORM, _FLUSH = slice(0, 2), slice(2, 4), 4, 5, 6
_STAT_ROWS = 7


class Checksums(NamedTuple):
    """Reference column checksums of ``A @ B`` and the statistics of their threshold (from
    ``encode``); ``verify`` turns them into residuals and thresholds.

    Attributes:
      stats: ``(7, n)``, all scaled by ``s = checksum_scale(m)``: the reference checksums
        ``s (W^T A) B`` (rows 0-1, ``W = checksum_weights(m)``) and the low parts of their
        extended values (rows 2-3, zero in XLA's formulation), the terms' 1-norm
        ``s sum_i sum_l |a_il b_lj|`` (row 4), their 2-norm ``s (sum_i sum_l (a_il b_lj)^2)^(1/2)``
        (row 5) and the mass of terms an input flushed to zero could lose (row 6).
      model: ``(12,)``, the threshold's constants for this product (``abft_model.MODEL_FIELDS``).
      entry_factor, entry_floor: ``()``, the rounding bound of one entry of the product:
        ``|C_ij - (AB)_ij| <= entry_factor (|A||B|)_ij + entry_floor`` (used to count faulty
        entries against a recomputed column).

    All in the accumulation dtype (``accumulation_dtype``).
    """

    stats: jax.Array
    model: jax.Array
    entry_factor: jax.Array
    entry_floor: jax.Array

    @property
    def col(self) -> jax.Array:
        """``(2, n)``: the column checksums the product should have, ``s (W^T A) B``."""
        return self.stats[_REF]


class Residuals(NamedTuple):
    """Column checksums of a computed ``C`` minus the reference ones (from ``verify``).

    Attributes:
      col: ``(2, n)``, ``W^T C - (W^T A) B``, in the units of ``C`` (computed scaled, then
        unscaled): the random-sign sums of the columns' errors.
      col_threshold: ``(n,)``, the largest residual rounding alone causes in column ``j``
        (with probability at least ``1 - 1e-9`` per check, ``abft_model``), in ``C``'s units.
      col_flags: ``(n,)`` bool, a residual of column ``j`` exceeds its threshold (or is not
        finite).
      entry_factor, entry_floor: as in ``Checksums``.
    """

    col: jax.Array
    col_threshold: jax.Array
    col_flags: jax.Array
    entry_factor: jax.Array
    entry_floor: jax.Array


class Verdict(NamedTuple):
    """What ``correct`` / ``abft_matmul`` found; every field is an array (``vmap`` adds a dim).

    Attributes:
      errors_detected: int32, a lower bound on the number of faulty entries; 0 for a clean
        product. One flagged column repaired from the operands: the number of its entries that
        differ from the recomputed ones by more than their worst-case rounding bound (at least
        1). Otherwise: the number of flagged columns.
      corrected: bool, the fault was located and repaired (with the operands: the flagged
        column was recomputed, however many entries of it were wrong).
      row: int32, the row of the (largest) faulty entry; -1 when not located.
      col: int32, the flagged column (the worst one when several are); -1 when clean.
      magnitude: computed minus correct value of entry ``(row, col)`` when located, in the
        accumulation dtype; otherwise the flagged column's first residual (the random-sign
        sum of its errors); 0 when clean.
      uncorrectable: bool, something was detected but not repaired (C is returned unchanged).
    """

    errors_detected: jax.Array
    corrected: jax.Array
    row: jax.Array
    col: jax.Array
    magnitude: jax.Array
    uncorrectable: jax.Array


def _check_operands(a: ArrayLike, b: ArrayLike) -> tuple[jax.Array, jax.Array, np.dtype]:
    a, b = jnp.asarray(a), jnp.asarray(b)
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(
            f"abft: operands must be 2-D (use jax.vmap for batches), got {a.shape} @ {b.shape}"
        )
    if a.shape[1] != b.shape[0]:
        raise TypeError(f"abft: contracting dimensions differ: {a.shape} @ {b.shape}")
    dtype = np.dtype(jnp.result_type(a, b))
    if dtype not in [np.dtype(d) for d in _FLOATS]:
        raise TypeError(f"abft: needs f16/bf16/f32/f64 operands, got {dtype}")
    return a, b, dtype


# Formulations benchmarks/abft_overhead.py and the tests compare.
# _SUMS, how the checksum passes are computed: "kernel" (the tsm2_abft_encode and
# tsm2_abft_verify FFI targets: extended sums; on CPU their plain-loop reference), "variadic"
# (one XLA reduce op per pass) or "siblings" (one jnp.sum per term, left to XLA's sibling
# multi-output fusion, GPU only).
# _REPAIR, how the flagged column is recomputed: "kernel" (the tsm2_abft_judge FFI target: its
# kernels flag the columns on the device and recompute only when one is flagged), "cond" (runs
# only when one column is flagged, but XLA's GPU runtime copies the predicate to the host and
# waits for it) or "select" (always recomputed, no host wait; what vmap makes of the cond anyway).
# "auto" picks the targets for the passes on CUDA (when this build has them) and CPU, and the
# judge kernels on CUDA (``decide``; per platform at lowering, lax.platform_dependent);
# elsewhere sibling sums on GPUs, the variadic reduce otherwise (on the H100 XLA's variadic
# reduce encoded 8192^2 operands in 1.24 ms against 0.43 ms for sibling sums, whose fusions
# read each matrix twice) and the cond. The targets need f16/bf16/f32/f64 data (and, for the
# repair, one dtype for a, b and c); other calls take the XLA formulations in any mode.
_SUMS = "auto"
_REPAIR = "auto"
SUMS_MODES = ("auto", "kernel", "variadic", "siblings")
REPAIR_MODES = ("auto", "kernel", "cond", "select")
ROW_STREAM_MIN_ROW_BYTES = 256  # ffi/matmul/row_stream_plan.h kRowStreamMinRowBytes


def _xla_sums_mode() -> str:
    if _SUMS in ("variadic", "siblings"):
        return _SUMS
    return "siblings" if jax.default_backend() == "gpu" else "variadic"


def _fused_sums(terms: Sequence[jax.Array], axis: int) -> tuple[jax.Array, ...]:
    """``tuple(jnp.sum(t, axis) for t in terms)`` as ONE variadic reduction.

    The terms are elementwise functions of one matrix; XLA fuses them into the reduction's
    input, so the matrix is read once for all of them. Separate ``jnp.sum`` calls are fused
    into one multi-output kernel by XLA's GPU sibling fusion but not on CPU; one ``reduce``
    op is one pass on every backend.
    """
    if _xla_sums_mode() == "siblings":
        return tuple(jnp.sum(t, axis=axis) for t in terms)
    zeros = tuple(jnp.zeros((), t.dtype) for t in terms)
    return tuple(lax.reduce(tuple(terms), zeros, lambda x, y: tuple(map(jnp.add, x, y)), (axis,)))


def _check_mode(name: str, value: str, modes: tuple[str, ...]) -> str:
    if value not in modes:
        raise ValueError(f"abft.{name} must be one of {modes}, got {value!r}")
    return value


def _repair_usable(a: np.dtype, b: np.dtype, c: np.dtype, acc: np.dtype) -> bool:
    """The judge kernels take one dtype for a, b and c."""
    return a == b == c and abft_calls.colsums_supported(c, acc)


def _decide(part: str, usable: bool, platform: str) -> Decision:
    """Whether ``part`` ("sums": the checksum passes; "repair": the judgement after the pass
    over C) runs the ABFT targets on ``platform`` or XLA's formulation (``_SUMS``,
    ``_REPAIR``, the custom-call mode and the build decide; see ``decide``)."""
    name, value, modes = (
        ("_SUMS", _SUMS, SUMS_MODES) if part == "sums" else ("_REPAIR", _REPAIR, REPAIR_MODES)
    )
    setting = _check_mode(name, value, modes)
    decision = lambda target, reason: Decision(
        op=f"abft_{part}", target=target, reason=reason, platform=platform
    )
    if not usable:
        return decision("xla", "operand dtypes or sizes the targets do not take")
    if setting == "kernel":
        return decision("kernels", f"abft.{name} = 'kernel' (CPU: the reference targets)")
    if setting != "auto":
        return decision("xla", f"abft.{name} = {setting!r}")
    if config.get_custom_call_mode() == "never":
        return decision("xla", "custom-call mode 'never'")
    if platform == "cpu" and part == "sums":
        return decision("kernels", "on CPU the reference targets: f64 / double-double sums")
    if platform != "cuda":
        return decision("xla", f"XLA's formulation on {platform}")
    # Without a CUDA device this is cross-platform lowering: emit them; with one, this
    # build must contain them.
    if not _ffi.cuda_kernels_usable(_ffi.cuda_abft_available()):
        return decision("xla", "this build of jax_tsm2 has no ABFT kernels for this GPU")
    why = "one read per pass, extended sums" if part == "sums" else "no host wait"
    return decision("kernels", f"on CUDA the kernels: {why}")


def _by_platform(part: str, usable: bool, kernel, xla, *args):
    """``kernel(*args)`` where ``_decide`` says so, else ``xla(*args)``; per platform at
    lowering (``lax.platform_dependent``) where CUDA and the others differ."""
    pick = lambda d: kernel if d.target == "kernels" else xla
    on_cuda, elsewhere = (pick(_decide(part, usable, p)) for p in ("cuda", "cpu"))
    if on_cuda is elsewhere:
        return on_cuda(*args)
    return lax.platform_dependent(*args, cuda=on_cuda, default=elsewhere)


def decide_fused(a: ArrayLike, b: ArrayLike) -> Decision:
    """Whether ``abft_matmul(a, b, fused=True)`` can run as the fused row check
    (``"kernels"``: ``tsm2_abft_rows``, one read of ``a``; on CUDA where this build has its
    kernels for the GPU, else the checksum passes) or not (``"xla"``, with the reason: then
    ``fused=True`` raises ``ValueError``).

    Example:
        >>> decide_fused(jnp.ones((4096, 4096)), jnp.ones((4096, 8))).target
        'kernels'
        >>> decide_fused(jnp.ones((4096, 16)), jnp.ones((16, 8))).target  # rows of 64 bytes
        'xla'
    """
    dtypes = [np.dtype(x.dtype) for x in (a, b)]
    (m, k), n = a.shape, b.shape[1]
    decision = lambda target, reason: Decision(
        op="abft_fused", target=target, reason=reason, platform="cuda"
    )
    if dtypes[0] != dtypes[1] or not abft_calls.rows_supported(dtypes[0], m, k, n):
        return decision("xla", "dtypes or sizes the fused row check does not take")
    if k * dtypes[0].itemsize < ROW_STREAM_MIN_ROW_BYTES:
        return decision("xla", "rows of A too short for the row stream")
    if config.get_custom_call_mode() == "never":
        return decision("xla", "custom-call mode 'never'")
    return decision("kernels", "the row stream checks each row from its one read of A")


def _fused_on_cuda() -> bool:
    return _ffi.cuda_kernels_usable(_ffi.cuda_abft_rows_available())


def _sums_usable(dtype: np.dtype, m: int, k: int, n: int) -> bool:
    """The pass targets take f16/bf16/f32/f64 data of one dtype and no empty dimension."""
    return abft_calls.colsums_supported(dtype, accumulation_dtype(dtype)) and min(m, k, n) > 0


def decide(a: ArrayLike, b: ArrayLike, *, platform: str = "cuda") -> tuple[Decision, Decision]:
    """How ``abft_matmul(a, b)`` computes its checks on ``platform``: the ``Decision`` of the
    checksum passes (``op="abft_sums"``) and of the repair (``op="abft_repair"``), each
    ``"kernels"`` (``tsm2_abft_encode`` / ``tsm2_abft_verify``, ``tsm2_abft_judge``) or
    ``"xla"`` (a fused reduction per pass; the repair in a ``lax.cond``). ``a`` and ``b`` may
    be arrays or ``jax.ShapeDtypeStruct``s. ``jax_tsm2.explain.abft`` shows them.

    Example:
        >>> a, b = jnp.ones((64, 32)), jnp.ones((32, 4))
        >>> [d.target for d in decide(a, b, platform="cuda")]
        ['kernels', 'kernels']
        >>> [d.target for d in decide(a, b, platform="cpu")]
        ['kernels', 'xla']
    """
    dtypes = [np.dtype(x.dtype) for x in (a, b)]
    c = np.dtype(jnp.result_type(*dtypes))
    acc = accumulation_dtype(c)
    (m, k), n = a.shape, b.shape[1]
    sums = _sums_usable(c, m, k, n)
    repair = _repair_usable(*dtypes, checked_dtype(c), acc)  # the C abft_matmul checks
    return _decide("sums", sums, platform), _decide("repair", repair, platform)


# --------------------------------------------------------------------------------------------
# the passes: XLA's formulation and the targets


def _norm_terms(x: jax.Array, dtype: np.dtype) -> jax.Array:
    """What the pass over C squares: C itself, or its half-ulps for bf16/f16 (whose rounding
    dominates the error and is known exactly from C)."""
    if dtype in (np.dtype(jnp.bfloat16), np.dtype(jnp.float16)):
        return abft_model.half_ulp(x, dtype)
    return x


def _encode_xla(a: jax.Array, b: jax.Array, acc: np.dtype) -> jax.Array:
    """``Checksums.stats`` from one variadic reduction over A and one over B, in ``acc``."""
    m = a.shape[0]
    s = checksum_scale(m)
    w = checksum_weights(m, acc) * jnp.asarray(s, acc)
    tiny = float(jnp.finfo(a.dtype).tiny)
    xa = a.astype(acc)
    ax = jnp.abs(xa)
    sa = jnp.asarray(s, acc)
    v1, v2, alpha, sq, sub = _fused_sums(  # pass over A
        (
            w[:, :1] * xa,
            w[:, 1:] * xa,
            sa * ax,
            jnp.square(sa * xa),
            jnp.where(ax < tiny, sa * ax, 0),
        ),
        axis=0,
    )
    nu = abft_model.guarded_norm(sq, alpha)
    xb = b.astype(acc)
    bx = jnp.abs(xb)
    flush = sub[:, None] * bx + jnp.where(bx < tiny, alpha[:, None] * bx, 0)
    r1, r2, abs1, q, fl = _fused_sums(  # pass over B
        (
            v1[:, None] * xb,
            v2[:, None] * xb,
            alpha[:, None] * bx,
            jnp.square(nu[:, None] * xb),
            flush,
        ),
        axis=0,
    )
    zero = jnp.zeros_like(r1)
    return jnp.stack([r1, r2, zero, zero, abs1, abft_model.guarded_norm(q, abs1), fl])


def _verify_xla(c: jax.Array, stats: jax.Array, model: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Residuals and thresholds (``C``'s units) from one variadic reduction over C."""
    acc = stats.dtype
    m = c.shape[0]
    s = checksum_scale(m)
    w = checksum_weights(m, acc) * jnp.asarray(s, acc)
    x = c.astype(acc)
    sa = jnp.asarray(s, acc)
    g1, g2, c_abs, sq = _fused_sums(  # pass over C
        (w[:, :1] * x, w[:, 1:] * x, sa * jnp.abs(x), jnp.square(sa * _norm_terms(x, c.dtype))),
        axis=0,
    )
    n2 = abft_model.guarded_norm(sq, c_abs)
    t = abft_model.column_threshold(
        model, stats[_ABS], stats[_NORM], stats[_FLUSH], c_abs, n2
    ) / jnp.asarray(s, acc)
    got = jnp.stack([g1, g2])
    ref = stats[_REF] + stats[_REF_LO]
    # A vacuous bound (inf) checks nothing but finiteness: the reference may itself have
    # overflowed, so the residual is NaN exactly where C's checksum is not finite.
    resid = jnp.where(jnp.isinf(t)[None, :], got * 0, got - ref) / jnp.asarray(s, acc)
    return resid, t


def _flip_bit(c: jax.Array, row: int, col: int, bit: int) -> jax.Array:
    """``c`` with bit ``bit`` of entry ``(row, col)`` flipped (XLA's version of the fault
    ``tsm2_abft_verify_inject`` plants)."""
    ints = jnp.dtype(f"uint{8 * c.dtype.itemsize}")
    bits = lax.bitcast_convert_type(c, ints)
    bits = bits.at[row, col].set(bits[row, col] ^ jnp.asarray(1 << bit, ints))
    return lax.bitcast_convert_type(bits, c.dtype)


def _model(dtype: np.dtype, m: int, k: int, precision, acc: np.dtype, out, *, extended: bool):
    return jnp.asarray(
        abft_model.model_vector(dtype, m, k, precision, acc, extended_sums=extended, out=out),
        acc,
    )


def _entry_bound(dtype: np.dtype, k: int, precision, acc: np.dtype, out):
    bound = abft_model.entry_bound(dtype, k, precision, acc, out)
    return jnp.asarray(bound.factor, acc), jnp.asarray(bound.floor, acc)


def checked_dtype(dtype: DTypeLike) -> np.dtype:
    """The dtype ``abft_matmul`` checks a product of ``dtype`` operands in: f32 for bf16/f16
    (their f32 sums, before the rounding to ``dtype``, whose noise would hide errors of a
    tenth of a column's largest entry at ~1000 rows), else ``dtype`` itself.

    >>> checked_dtype(jnp.bfloat16), checked_dtype(jnp.float64)
    (dtype('float32'), dtype('float64'))
    """
    dtype = np.dtype(dtype)
    return np.dtype(np.float32) if dtype.itemsize == 2 else dtype


# --------------------------------------------------------------------------------------------
# encode / verify / correct


def encode(
    a: ArrayLike,
    b: ArrayLike,
    *,
    precision: lax.PrecisionLike = None,
    out_dtype: DTypeLike | None = None,
) -> Checksums:
    """Reference column checksums of ``a @ b`` and the statistics of their threshold.

    Two passes (one ``tsm2_abft_encode`` call on CUDA and CPU, one fused XLA reduction each
    elsewhere): over ``A`` for ``s W^T A``, ``s 1^T |A|`` and the column norms of ``A``; over
    ``B`` for the reference checksums ``s (W^T A) B`` and the scales of the threshold (the
    terms' 1-norm, their 2-norm, the flush mass), with ``s = checksum_scale(m)``.

    Args:
      a: ``(m, k)`` floating-point operand.
      b: ``(k, n)`` operand.
      precision: the ``precision`` the product itself is (or will be) computed with; it sets how
        much input rounding (TF32 on GPUs at default precision) the threshold allows for.
      out_dtype: the dtype of the ``C`` that will be verified: the product's dtype (the
        default), or for bf16/f16 operands f32, their sums before rounding
        (``checked_dtype``, as ``abft_matmul`` checks them), which the threshold then need
        not allow the output rounding for.

    Returns:
      ``Checksums``. The threshold itself depends on ``C`` (its column norms) and comes with
      ``verify``; ``jax_tsm2.abft_model`` derives it.

    >>> a = jnp.ones((4, 3)); b = jnp.ones((3, 2))
    >>> cs = encode(a, b)
    >>> cs.stats.shape, cs.col.shape
    ((7, 2), (2, 2))
    >>> cs.col[0] / checksum_scale(4)  # e^T (A B) = (1 - 1 - 1 - 1) * 3
    Array([-6., -6.], dtype=float32)
    """
    a, b, dtype = _check_operands(a, b)
    m, k = a.shape
    n = b.shape[1]
    acc = accumulation_dtype(dtype)
    out = dtype if out_dtype is None else np.dtype(out_dtype)
    if out not in (dtype, checked_dtype(dtype)):
        raise TypeError(
            f"abft.encode: out_dtype must be the product's dtype ({dtype}) or "
            f"{checked_dtype(dtype)}, got {out}"
        )
    # Mixed operands promote exactly (as jnp.matmul does) to the product's dtype.
    a, b = a.astype(dtype), b.astype(dtype)

    def kernel(a, b):
        stats = abft_calls.encode(a, b, acc=acc)
        return stats, _model(dtype, m, k, precision, acc, out, extended=True)

    def xla(a, b):
        return _encode_xla(a, b, acc), _model(dtype, m, k, precision, acc, out, extended=False)

    stats, model = _by_platform("sums", _sums_usable(dtype, m, k, n), kernel, xla, a, b)
    factor, floor = _entry_bound(dtype, k, precision, acc, out)
    return Checksums(stats, model, factor, floor)


def _verify(
    c: jax.Array, checksums: Checksums, inject: tuple[int, int, int] | None = None
) -> tuple[jax.Array, Residuals]:
    """(C as the pass read it, residuals): with ``inject``, C carries the planted fault."""
    m, n = c.shape

    def kernel(c, stats, model):
        out = abft_calls.verify(c, stats, model, inject=inject)
        return out if inject is not None else (c, *out)

    def xla(c, stats, model):
        if inject is not None:
            c = _flip_bit(c, *inject)
        return (c, *_verify_xla(c, stats, model))

    usable = _sums_usable(np.dtype(c.dtype), m, 1, n)
    c, resid, t = _by_platform("sums", usable, kernel, xla, c, checksums.stats, checksums.model)
    # ~(x <= t), not x > t: a NaN residual must flag.
    flags = ~jnp.all(jnp.abs(resid) <= t[None, :], axis=0)
    return c, Residuals(resid, t, flags, checksums.entry_factor, checksums.entry_floor)


def verify(c: ArrayLike, checksums: Checksums) -> Residuals:
    """Column checksums of a computed ``c`` minus the reference ones, their thresholds, and
    which columns fail.

    One pass over ``C`` (a ``tsm2_abft_verify`` call on CUDA and CPU, one fused XLA reduction
    elsewhere) for ``W^T C`` and the column norms of ``C``, which complete the threshold. A
    column is flagged when either weighted residual exceeds its threshold, or is not finite
    (NaN/Inf in ``C`` always flag).

    Args:
      c: the ``(m, n)`` product to check, in the dtype the product has (the threshold allows
        for its rounding).
      checksums: from ``encode(a, b)``.

    Returns:
      ``Residuals``.

    >>> a = jnp.arange(12.0).reshape(4, 3); b = jnp.ones((3, 2))
    >>> res = verify(a @ b, encode(a, b))
    >>> bool(res.col_flags.any())
    False
    >>> bool(verify((a @ b).at[1, 0].add(1e-3), encode(a, b)).col_flags[0])
    True
    """
    # The barrier makes the checksums read the materialized C: without it XLA may fold the
    # conversion into the producing dot and check an unrounded (or re-derived) product instead.
    return _verify(lax.optimization_barrier(jnp.asarray(c)), checksums)[1]


def _locate_by_ratio(r: jax.Array, t: jax.Array, w2: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Index ``i`` with ``r[1] ~= w2[i] r[0]`` from one residual pair, and whether it is unique.

    A single error ``d`` at ``i`` gives ``r = (d + e1, w2[i] d + e2)`` with ``|e| <= t``, so ``i``
    is consistent iff ``|r[1] - w2[i] r[0]| <= t (1 + w2[i])``; the answer is trusted only when
    its neighbours are not consistent too (guaranteed for ``|d| > 4 t size``). The consistent
    indices form an interval (the condition is convex in ``w``), so when it holds more than one
    index, no answer is trusted, whatever the initial guess.
    """
    size = w2.shape[0]
    i = jnp.clip(jnp.round(r[1] / r[0] * size) - 1, 0, size - 1)
    i = jnp.where(jnp.isfinite(i), i, 0).astype(jnp.int32)

    def consistent(idx):
        w = w2[jnp.clip(idx, 0, size - 1)]
        return (jnp.abs(r[1] - w * r[0]) <= t * (1 + w)) & (idx >= 0) & (idx < size)

    return i, consistent(i) & ~consistent(i - 1) & ~consistent(i + 1)


class _Repair(NamedTuple):
    column: jax.Array  # what column j of C becomes (unchanged when not repaired)
    repaired: jax.Array
    bad_entries: jax.Array
    row: jax.Array
    magnitude: jax.Array


def _judge_column(old, exact, scale, factor, floor) -> _Repair:
    """What replaces column ``old`` given its recomputation ``exact`` (and ``|A||b_j|``,
    ``scale``, for each entry's rounding bound), and which of its entries were faulty."""
    acc = factor.dtype
    diff = old.astype(acc) - exact
    bound = factor * scale + floor
    bad = ~(jnp.abs(diff) <= bound)
    row = jnp.argmax(jnp.where(jnp.isfinite(diff), jnp.abs(diff), jnp.inf)).astype(jnp.int32)
    count = jnp.sum(bad, dtype=jnp.int32)
    # "count <= m" always holds; it makes the column (hence C's in-place update) depend on
    # diff, so XLA orders the update after diff's read of C instead of copying C (select mode).
    ok = jnp.all(jnp.isfinite(exact)) & (count <= old.shape[0])
    return _Repair(
        column=jnp.where(ok, exact.astype(old.dtype), old),
        repaired=ok,
        bad_entries=count,
        row=row,
        magnitude=diff[row],
    )


def _recompute_column(a, b, old, j, factor, floor) -> _Repair:
    """Column ``j`` recomputed as ``a @ b[:, j]`` (one pass over A), and its faulty entries."""
    acc = factor.dtype
    a_acc = a.astype(acc)
    bj = lax.dynamic_index_in_dim(b, j, axis=1, keepdims=False).astype(acc)
    exact, scale = _fused_sums((a_acc * bj, jnp.abs(a_acc) * jnp.abs(bj)), axis=1)
    return _judge_column(old, exact, scale, factor, floor)


def _keep_column(a, b, old, j, factor, floor) -> _Repair:
    del a, b, j, floor
    zero = jnp.zeros((), jnp.int32)
    return _Repair(old, jnp.zeros((), bool), zero, zero - 1, jnp.zeros((), factor.dtype))


def _repair_xla(single, c, j, a, b, factor, floor):
    """The repair as XLA ops: a cond (mode "cond", and "auto" off CUDA) or a select."""
    # Only the column goes through the cond, never C itself: a C-sized cond output could
    # cost XLA a copy of C, and the update below is in place.
    old = lax.dynamic_index_in_dim(c, j, axis=1, keepdims=False)
    args = (a, b, old, j, factor, floor)
    if _REPAIR == "select":
        fix = jax.tree.map(
            lambda x, y: jnp.where(single, x, y), _recompute_column(*args), _keep_column(*args)
        )
    else:
        fix = lax.cond(single, _recompute_column, _keep_column, *args)
    c_out = lax.dynamic_update_index_in_dim(c, fix.column, j, axis=1)
    return c_out, fix._replace(column=None)


def _worst_column(s: jax.Array, t: jax.Array, flags: jax.Array):
    """Flagged columns, the worst (largest residual over threshold; NaN/Inf worst) and whether
    it is the only one."""
    n_cols = jnp.sum(flags, dtype=jnp.int32)
    score = jnp.max(jnp.abs(s), axis=0) / jnp.maximum(t, jnp.finfo(s.dtype).tiny)
    j = jnp.argmax(jnp.where(jnp.isfinite(score), score, jnp.inf)).astype(jnp.int32)
    return n_cols, j, n_cols == 1


def _assemble_verdict(n_cols, j, detected, fixed, row, magnitude, acc) -> Verdict:
    nothing = n_cols == 0
    return Verdict(
        errors_detected=detected.astype(jnp.int32),
        corrected=fixed,
        row=jnp.where(nothing, -1, row).astype(jnp.int32),
        col=jnp.where(nothing, -1, j).astype(jnp.int32),
        magnitude=jnp.where(nothing, 0, magnitude).astype(acc),
        uncorrectable=~nothing & ~fixed,
    )


def _correct_xla(c, s, t, flags, factor, floor, a, b) -> tuple[jax.Array, Verdict]:
    """``correct`` with the operands as XLA ops (the repair in a cond or a select)."""
    n_cols, j, single = _worst_column(s, t, flags)
    c_out, fix = _repair_xla(single, c, j, a, b, factor, floor)
    fixed = single & fix.repaired
    detected = jnp.where(single, jnp.maximum(fix.bad_entries, 1), n_cols)
    row = jnp.where(single, fix.row, -1)
    magnitude = jnp.where(single, fix.magnitude, s[0, j])
    return c_out, _assemble_verdict(n_cols, j, detected, fixed, row, magnitude, s.dtype)


def _correct_kernel(c, s, t, flags, factor, floor, a, b) -> tuple[jax.Array, Verdict]:
    """``correct`` with the operands as the tsm2_abft_judge target: the same verdict from four
    small kernels instead of a dozen fusions, and no host round trip."""
    del flags  # the kernel derives them from s and t as _verify does
    # The alias (operand c is result 0) writes the column in place: after the call C has no
    # other use (the pass over C comes before it), so XLA has no reason to copy it first.
    r = abft_calls.judge(s, t, factor, floor, a, b, c)
    return r.c, Verdict(*r[1:])


def correct(
    c: ArrayLike,
    residuals: Residuals,
    *,
    a: ArrayLike | None = None,
    b: ArrayLike | None = None,
) -> tuple[jax.Array, Verdict]:
    """Locate and repair a fault in one column of ``c``; report what was found.

    Exactly one flagged column ``j``:

    - with the operands ``a`` and ``b``: the column is recomputed as ``a @ b[:, j]`` in the
      accumulation dtype (one pass over ``A``) and replaces ``c[:, j]``, whatever and however
      many entries were wrong (NaN/Inf included). Entries that differed from the recomputed
      ones by more than their rounding bound are counted and the worst is reported. A clean
      product does not pay for the recomputation: on CUDA the ``tsm2_abft_judge`` kernels
      flag the columns on the device (no host wait) and write the column in place; elsewhere
      it sits in a ``lax.cond`` (which under ``jax.vmap`` becomes a select: every batch entry
      pays it). A NaN/Inf recomputation (non-finite operands) repairs nothing.
    - without them: the row comes from the ratio of the two weighted residuals, trusted only
      when unambiguous (a single error larger than about ``4 m`` times the column threshold),
      and the entry is repaired by subtracting the residual (accurate to the threshold).
      Otherwise the column is reported, the row is -1 and the fault is uncorrectable. Several
      faults in the column can look like one at another row: pass the operands when that
      matters.

    Two or more flagged columns: uncorrectable, ``errors_detected`` is the number of flagged
    columns, ``c`` is returned unchanged (as it is whenever nothing was repaired).

    Args:
      c: the ``(m, n)`` product that was verified.
      residuals: ``verify(c, encode(a, b))``.
      a, b: optionally the operands, for the exact repair.

    Returns:
      ``(c_repaired, Verdict)``; ``c_repaired`` has ``c``'s dtype.

    >>> a = jnp.arange(12.0).reshape(4, 3); b = jnp.ones((3, 2))
    >>> cs = encode(a, b)
    >>> bad = inject_error(a @ b, 2, 1, 5.0)
    >>> fixed, v = correct(bad, verify(bad, cs))
    >>> int(v.errors_detected), bool(v.corrected), int(v.row), int(v.col), float(v.magnitude)
    (1, True, 2, 1, 5.0)
    >>> bool(jnp.allclose(fixed, a @ b))
    True
    >>> bad = inject_error(bad, 0, 1, -1.0)  # a second error in the same column
    >>> fixed, v = correct(bad, verify(bad, cs), a=a, b=b)
    >>> int(v.errors_detected), bool(v.corrected), int(v.row), float(v.magnitude)
    (2, True, 2, 5.0)
    >>> bool(jnp.array_equal(fixed, a @ b))
    True
    """
    c = jnp.asarray(c)
    m, n = c.shape
    acc = residuals.col.dtype
    s, t = residuals.col, residuals.col_threshold
    zero_i = jnp.zeros((), jnp.int32)
    if m == 0 or n == 0:
        false = jnp.zeros((), bool)
        return c, Verdict(zero_i, false, zero_i - 1, zero_i - 1, jnp.zeros((), acc), false)

    if a is not None and b is not None:
        a, b, _ = _check_operands(a, b)
        if a.shape[0] != m or b.shape[1] != n:
            raise TypeError(f"abft.correct: operands {a.shape} @ {b.shape} do not give {c.shape}")
        usable = _repair_usable(a.dtype, b.dtype, c.dtype, acc)
        args = (c, s, t, residuals.col_flags, residuals.entry_factor, residuals.entry_floor, a, b)
        return _by_platform("repair", usable, _correct_kernel, _correct_xla, *args)

    n_cols, j, single = _worst_column(s, t, residuals.col_flags)
    old = lax.dynamic_index_in_dim(c, j, axis=1, keepdims=False)
    weights = checksum_weights(m, acc)
    ramp = weights[:, 1] * weights[:, 0]  # (i + 1) / m: the signs cancel in the ratio
    # The threshold bounds the checksum rounding of a clean column; a large error adds
    # its own, up to gamma_{m+1} |error| on each weighted sum.
    slack = 2 * abft_model._gamma(m + 1, float(jnp.finfo(acc).eps) / 2) * jnp.abs(s[0, j])
    i, sure = _locate_by_ratio(s[:, j], t[j] + slack, ramp)
    error = weights[i, 0] * s[0, j]  # the residual is e_i times the error
    new = old[i].astype(acc) - error
    fixed = single & sure & jnp.isfinite(new)
    row = jnp.where(single & sure, i, -1)
    new_column = old.at[i].set(jnp.where(fixed, new.astype(c.dtype), old[i]))
    c_out = lax.dynamic_update_index_in_dim(c, new_column, j, axis=1)
    magnitude = jnp.where(single & sure, error, s[0, j])
    return c_out, _assemble_verdict(n_cols, j, n_cols, fixed, row, magnitude, acc)


def check(
    c: ArrayLike,
    checksums: Checksums,
    *,
    a: ArrayLike | None = None,
    b: ArrayLike | None = None,
) -> tuple[jax.Array, Verdict]:
    """``correct(c, verify(c, checksums), a=a, b=b)``: verify a product and repair it.

    >>> a = jnp.ones((8, 5)); b = jnp.ones((5, 3))
    >>> c, v = check(inject_error(a @ b, 6, 2, 1e3), encode(a, b), a=a, b=b)
    >>> int(v.row), int(v.col), float(v.magnitude), bool(jnp.array_equal(c, a @ b))
    (6, 2, 1000.0, True)
    """
    return _check(c, checksums, a=a, b=b)


def _check(c, checksums, *, a=None, b=None, inject=None) -> tuple[jax.Array, Verdict]:
    # One barrier feeds both the checksum pass and the repair, so the in-place column update
    # and the pass read the same buffer (see ``verify``).
    c = lax.optimization_barrier(jnp.asarray(c))
    c, residuals = _verify(c, checksums, inject)
    return correct(c, residuals, a=a, b=b)


def _check_injection(inject, shape: tuple[int, int], dtype: np.dtype) -> tuple[int, int, int]:
    try:
        row, col, bit = (int(x) for x in inject)
    except (TypeError, ValueError):
        raise TypeError(
            f"abft_matmul: inject must be (row, col, bit) ints, got {inject!r}"
        ) from None
    bits = 8 * dtype.itemsize
    if not (0 <= row < shape[0] and 0 <= col < shape[1] and 0 <= bit < bits):
        raise ValueError(
            f"abft_matmul: inject=(row, col, bit) needs 0 <= row < {shape[0]}, 0 <= col < "
            f"{shape[1]} and 0 <= bit < {bits} for a {shape} {dtype} product, got {inject}"
        )
    return row, col, bit


def abft_matmul(
    a: ArrayLike,
    b: ArrayLike,
    *,
    precision: lax.PrecisionLike = None,
    inject: tuple[int, int, int] | None = None,
    fused: bool = False,
) -> tuple[jax.Array, Verdict]:
    """``jax_tsm2.matmul(a, b)`` with ABFT: the (repaired) product and a ``Verdict``.

    Encodes column checksums of the operands (one pass over ``A``, one over ``B``), computes the
    product, verifies it (one pass over ``C``) and, when exactly one column is flagged,
    recomputes that column from ``a`` and ``b`` (see ``correct``). bf16/f16 products are
    computed and checked in f32 and rounded to the operands' dtype last (``checked_dtype``):
    checked after rounding, an error of a tenth of a column's largest entry can hide in the
    rounding noise of a thousand-row column. Their repair runs as XLA ops (a ``lax.cond``),
    since the judge kernels take one dtype for ``a``, ``b`` and ``c``. jit-able and vmap-able
    (batch with ``jax.vmap``; operands are 2-D; under ``vmap`` the repair's ``lax.cond``,
    where it is one, runs for every entry). On CUDA the whole check is a ``tsm2_abft_encode``
    and a ``tsm2_abft_verify`` call (two passes and one, each a streaming kernel and a small
    one adding its splits) and a ``tsm2_abft_judge`` call (no recomputation for a clean
    product): no host round trip.

    **Fused row check** (``fused=True``). A product whose rows of ``a`` are at least 256 bytes
    long and whose ``n`` fits the row stream (``n <= 16`` for f32, ``n <= 8`` otherwise; see
    ``decide_fused``) runs as ``tsm2_abft_rows``: the row stream reads each row of ``a`` once
    for the row of ``C``, its weighted checksum and the magnitudes of its rounding bound; the
    kernel that adds its splits checks every row, and flagged rows (up to 32) are recomputed
    on the device. No pass over ``a`` beside the product. It computes on CUDA cores at full
    f32 precision (``precision`` does not apply) and locates a fault by its row; its threshold
    is ``jax_tsm2.abft_model.row_model_vector``'s. On CPU the same check runs through a
    plain-loop reference; on a GPU this build has no kernels for, the passes run. It is opt-in
    because it catches less: a fault is measured against its row's rounding, so an error that
    is large in its column but small beside the row's other columns (heavy-tailed data; or
    entries that cancel heavily, ``C`` far below its terms) can pass it where the passes'
    column checks catch it (docs/abft.md gives the measured detection).

    Args:
      a: ``(m, k)`` f16/bf16/f32/f64 operand.
      b: ``(k, n)`` operand.
      precision: as for ``jax_tsm2.matmul``; also sets the threshold's input-rounding term
        (the fused row check computes at full precision whatever it says).
      inject: ``(row, col, bit)``, for tests: flips bit ``bit`` of ``C[row, col]`` (for
        bf16/f16 operands, of its f32 value: the one checked) inside the pass over ``C``
        (``tsm2_abft_verify_inject``: the kernel that reads ``C`` for its checksum flips the
        bit in its read and writes the value back), so the whole check runs on a product
        with a fault in it. Static ints; ``None`` (the default) compiles the
        production target, which has no injection code.
      fused: ``True``: the fused row check, or ``ValueError`` where it does not take the
        product (``decide_fused``); ``False`` (the default): the checksum passes.

    Returns:
      ``(c, verdict)``; ``c`` has ``jnp.matmul(a, b)``'s dtype.

    >>> a = jnp.ones((64, 32)); b = jnp.ones((32, 4))
    >>> c, v = jax.jit(abft_matmul)(a, b)
    >>> c.shape, int(v.errors_detected), bool(v.uncorrectable)
    ((64, 4), 0, False)
    >>> c, v = abft_matmul(a, b, inject=(5, 2, 30))  # 32.0 -> 2^-97 * 32.0...
    >>> int(v.row), int(v.col), bool(v.corrected), float(c[5, 2])
    (5, 2, True, 32.0)
    """
    a, b, dtype = _check_operands(a, b)
    checked = checked_dtype(dtype)
    if inject is not None:
        inject = _check_injection(inject, (a.shape[0], b.shape[1]), checked)
    passes = lambda a, b: _abft_passes(a, b, dtype, precision, inject)
    if not fused:
        return passes(a, b)
    decision = decide_fused(a, b)
    if decision.target != "kernels":
        raise ValueError(
            f"abft_matmul(fused=True): the fused row check does not take {dtype} "
            f"{a.shape} @ {b.shape}: {decision.reason}"
        )
    # The branches must agree on dtypes: the passes' magnitude follows jax_enable_x64.
    like = jax.eval_shape(passes, a, b)
    rows = lambda a, b: _abft_fused(a, b, inject, like)
    return lax.platform_dependent(a, b, cuda=rows if _fused_on_cuda() else passes, default=rows)


def _abft_fused(a, b, inject, like) -> tuple[jax.Array, Verdict]:
    """``abft_matmul`` as the fused row check (``tsm2_abft_rows``), in ``like``'s dtypes."""
    c, verdict = abft_calls.rows(a, b, inject=inject)
    verdict = Verdict(*(v.astype(w.dtype) for v, w in zip(verdict, like[1], strict=True)))
    return c.astype(like[0].dtype), verdict


def _abft_passes(a, b, dtype, precision, inject) -> tuple[jax.Array, Verdict]:
    """``abft_matmul`` as the checksum passes beside the routed product."""
    checked = checked_dtype(dtype)
    checksums = encode(a, b, precision=precision, out_dtype=checked)
    if checked == dtype:
        c = product(a, b, precision=precision)
    else:
        c = matmul(a, b, precision=precision, preferred_element_type=checked)
    c, verdict = _check(c, checksums, a=a, b=b, inject=inject)
    return c.astype(dtype), verdict


def product(a: ArrayLike, b: ArrayLike, *, precision: lax.PrecisionLike = None) -> jax.Array:
    """``jax_tsm2.matmul(a, b)`` computed as the thresholds assume: f16/bf16 inputs summed in f32.

    On a GPU, XLA's bf16/f16 products with one row (``m == 1``, under ``vmap`` too) sum in the
    inputs' own precision: errors of up to 1,253 ulps were measured on an H200 (jax 0.11.2),
    which no f32-accumulation threshold allows for. Those products, and as a precaution those
    with one column, are computed here in f32 and rounded once; the others are
    ``jax_tsm2.matmul``'s. ``check`` and ``correct`` assume a ``C`` made this way (or by any
    product summing in f32). Operands as for ``abft_matmul``.

    >>> a = jnp.ones((1, 300), jnp.bfloat16); b = jnp.full((300, 2), 1.01, jnp.bfloat16)
    >>> product(a, b).dtype, float(product(a, b)[0, 0])
    (dtype(bfloat16), 302.0)
    """
    a, b, out = _check_operands(a, b)
    if (a.shape[0] == 1 or b.shape[1] == 1) and out.itemsize == 2:
        return matmul(a, b, precision=precision, preferred_element_type=jnp.float32).astype(out)
    return matmul(a, b, precision=precision)


def inject_error(c: ArrayLike, row: ArrayLike, col: ArrayLike, delta: ArrayLike) -> jax.Array:
    """``c`` with ``delta`` added to entry ``(row, col)`` (a simulated silent fault; for tests).

    The addition happens in ``c``'s dtype, so the injected error is ``delta`` as rounded there.

    >>> inject_error(jnp.zeros((2, 2)), 1, 0, 3.0)
    Array([[0., 0.],
           [3., 0.]], dtype=float32)
    """
    c = jnp.asarray(c)
    return c.at[row, col].add(jnp.asarray(delta).astype(c.dtype))

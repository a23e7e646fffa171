"""The ``tsm2_matmul`` primitive and its rules.

``tsm2_matmul_p`` computes ``c[batch?, m, n]`` from canonical operands of one
float dtype stored in one of three layouts (the FFI contract in
``ffi/matmul_problem.h``; all row-major, contraction length ``k``):

- ``"nn"``: ``a[batch?, m, k] @ b[batch?, k, n]``;
- ``"nt"``: ``a[batch?, m, k] @ b[batch?, n, k]^T``;
- ``"tn"``: ``a[batch?, k, m]^T @ b[batch?, k, n]``.

Operands have rank 2 or 3; a rank-3 operand's batch equals the result's or is
1 (then it is shared by every batch entry), and the result is
``[batch, m, n]`` if either operand has rank 3, else ``[m, n]``. Parameters
(hashable): ``out_dtype`` (a NumPy dtype), ``precision`` (lax's canonical
precision) and ``layout`` (one of the strings above).

Rules:

- impl: op-by-op dispatch (compile the primitive alone and run it).
- abstract eval: shape and dtype checks, result aval.
- lowering: XLA's dot by default (``lax.dot_general`` with the layout's
  dimension numbers, never a transpose in memory); the ``cpu`` and ``cuda``
  lowerings ask ``routing.route`` and emit the ``tsm2_matmul`` custom call
  when it says so. Before routing they fold transposes: an operand produced by
  a ``stablehlo.transpose`` of its last two dimensions (a user's ``b.T`` or
  ``jnp.swapaxes(a, -1, -2)``) is replaced by that transpose's input and the
  layout flipped (nn with ``b`` transposed becomes nt, with ``a`` transposed tn,
  and back), when a kernel takes the resulting layout and routing picks one.
  The transpose is then dead and XLA removes it. To see the producer the rule
  runs inline (jax's per-equation lowering cache is off for this primitive,
  ``_compat.register_inline_lowering``). The custom-call mode and the autotune
  switch are read here, at lowering time (both are part of jit's cache key,
  see ``config.py``). In a
  program XLA partitions over several devices the lowering goes through
  ``sharding.lower_partitioned`` (a ``custom_partitioning`` rule), so each
  device routes its local product; there nothing is folded.
- batching: reduces any ``vmap`` to ``broadcast_product`` (below), which
  folds batch dimensions into ``m`` where the other operand is shared and
  otherwise makes one batched call. No Python loops.
- autodiff: the product is bilinear, so the JVP comes from
  ``ad.defbilinear``; the transposes are again ``tsm2_matmul`` products, in
  the layout that reads the operands as they are stored (for nn ``C = A B``:
  ``dA = ct B^T`` is nt, ``dB = A^T ct`` is tn), so no operand is transposed
  in memory and derivatives of any order work.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import numpy as np
from jax import lax
from jax import numpy as jnp
from jax.core import ShapedArray
from jax.extend.core import Primitive
from jax.sharding import PartitionSpec as P

from jax_tsm2 import _compat, _ffi, config, routing, sharding
from jax_tsm2._compat import ad, batching, mlir

tsm2_matmul_p = Primitive("tsm2_matmul")

LAYOUTS = routing.LAYOUTS
# (a stored transposed, b stored transposed) of each layout, and back.
_FLAGS = {"nn": (False, False), "nt": (False, True), "tn": (True, False)}
_LAYOUT_OF = {flags: layout for layout, flags in _FLAGS.items()}


def tsm2_matmul(
    a: Any, b: Any, *, out_dtype: Any = None, precision: Any = None, layout: str = "nn"
) -> jax.Array:
    """Binds ``tsm2_matmul_p`` on canonical operands in ``layout`` (see the module docstring).

    ``precision`` must already be canonical (``lax``'s form); ``out_dtype``
    defaults to the operands' dtype.

    Example:
        >>> import jax.numpy as jnp
        >>> tsm2_matmul(jnp.ones((2, 5, 3)), jnp.ones((3, 4))).shape
        (2, 5, 4)
        >>> tsm2_matmul(jnp.ones((5, 3)), jnp.ones((4, 3)), layout="nt").shape
        (5, 4)
        >>> tsm2_matmul(jnp.ones((3, 5)), jnp.ones((3, 4)), layout="tn").shape
        (5, 4)
    """
    routing.check_layout(layout)
    out_dtype = np.dtype(a.dtype if out_dtype is None else out_dtype)
    a, b = _compat.match_varying(a, b)  # shard_map: a replicated operand becomes varying
    return tsm2_matmul_p.bind(a, b, out_dtype=out_dtype, precision=precision, layout=layout)


# ----------------------------------------------------------------------------
# impl and abstract eval


def _abstract_eval(
    a: ShapedArray, b: ShapedArray, *, out_dtype: np.dtype, precision: Any, layout: str
):
    p = routing.problem_of(a.shape, b.shape, layout)
    if a.dtype != b.dtype:
        raise TypeError(
            f"tsm2_matmul: operands must share a dtype, got {a.str_short()} and {b.str_short()}"
        )
    if not (jnp.issubdtype(a.dtype, jnp.floating) and jnp.issubdtype(out_dtype, jnp.floating)):
        raise TypeError(
            f"tsm2_matmul: real floating dtypes only, got {a.str_short()}, {b.str_short()} "
            f"-> {out_dtype}"
        )
    shape = (p.m, p.n) if p.batch is None else (p.batch, p.m, p.n)
    return sharding.result_aval(a, b, shape, np.dtype(out_dtype), layout)


tsm2_matmul_p.def_impl(functools.partial(_compat.apply_primitive, tsm2_matmul_p))
tsm2_matmul_p.def_abstract_eval(_abstract_eval)


# ----------------------------------------------------------------------------
# lowering


def _xla_product(
    a: jax.Array, b: jax.Array, *, out_dtype: np.dtype, precision: Any, layout: str = "nn"
) -> jax.Array:
    """The primitive's semantics in terms of ``lax.dot_general`` (XLA's dot).

    The layout is expressed in the contracting dimensions, so no operand is
    transposed; only when ``b`` alone is batched is the result transposed
    (dot_general puts ``a``'s free dimension first).
    """
    p = routing.problem_of(a.shape, b.shape, layout)
    a_t, b_t = _FLAGS[layout]
    dot = lambda x, y, dims: lax.dot_general(
        x, y, dims, precision=precision, preferred_element_type=out_dtype
    )
    # A batch-1 operand is shared: drop its batch axis instead of broadcasting it.
    a_batched = p.batch is not None and a.ndim == 3 and a.shape[0] == p.batch
    b_batched = p.batch is not None and b.ndim == 3 and b.shape[0] == p.batch
    a = a if a_batched or a.ndim == 2 else a[0]
    b = b if b_batched or b.ndim == 2 else b[0]
    contract = ((a.ndim - 2 if a_t else a.ndim - 1,), (b.ndim - 1 if b_t else b.ndim - 2,))
    if a_batched and b_batched:
        return dot(a, b, (contract, ((0,), (0,))))
    c = dot(a, b, (contract, ((), ())))  # free dims: a's (batch?, m), then b's (batch?, n)
    if b_batched:
        c = lax.transpose(c, (1, 0, 2))  # [m, batch, n] -> [batch, m, n]
    return c


_xla_lowering = mlir.lower_fun(_xla_product, multiple_results=False)


def _swap_last_two(aval: Any) -> Any:
    """The aval of a transpose's input: last two dimensions (and their shardings) swapped."""
    shape = (*aval.shape[:-2], aval.shape[-1], aval.shape[-2])
    sharding_ = getattr(aval, "sharding", None)
    spec = getattr(sharding_, "spec", None)
    if spec is None:
        return aval.update(shape=shape)
    spec = (*spec, *([None] * (aval.ndim - len(spec))))
    spec = P(*spec[:-2], spec[-1], spec[-2])
    return aval.update(shape=shape, sharding=sharding_.update(spec=spec))


def _folded_choices(ctx, a, b, layout: str) -> list[tuple[str, Any, Any, tuple[Any, Any]]]:
    """``(layout, a, b, avals)`` with transposes of the last two dims folded into the layout.

    Only layouts a kernel takes (nn, nt, tn: never both operands transposed);
    the choice that folds the most transposes first, then nt before tn.
    """
    sources = [_compat.transpose_source(v) for v in (a, b)]
    if all(src is None for src in sources):
        return []
    flags = _FLAGS[layout]
    out = []
    for fold in ((True, True), (False, True), (True, False)):
        if any(f and src is None for f, src in zip(fold, sources, strict=True)):
            continue
        new = _LAYOUT_OF.get((flags[0] != fold[0], flags[1] != fold[1]))
        if new is None:
            continue
        ops = [src if f else v for f, src, v in zip(fold, sources, (a, b), strict=True)]
        avals = tuple(
            _swap_last_two(x) if f else x for f, x in zip(fold, ctx.avals_in, strict=True)
        )
        out.append((new, ops[0], ops[1], avals))
    return out


def _emit_custom_call(ctx, a, b, r: routing.Route):
    # The target has a second result, a scratch workspace for the kernel's
    # split tiles; XLA allocates it and it is dropped here.
    p = r.problem
    ws_bytes = _ffi.matmul_workspace_bytes(
        ctx.avals_in[0].dtype, r.kernel, p.batch or 1, p.m, p.k, p.n
    )
    ws_aval = ShapedArray((ws_bytes,), np.dtype(np.uint8))
    ctx2 = ctx.replace(avals_out=[*ctx.avals_out, ws_aval])
    c, _ = jax.ffi.ffi_lowering(_ffi.MATMUL_TARGET)(
        ctx2, a, b, kernel=np.int32(r.kernel), layout=np.int32(r.layout_id)
    )
    return [c]


def _routed_lowering(platform: str):
    def lowering(ctx, a, b, *, out_dtype: np.dtype, precision: Any, layout: str):
        folded = _folded_choices(ctx, a, b, layout)
        if _compat.axis_context_kind(ctx) == "spmd":
            # A program XLA partitions: each device routes its local product
            # later, so fold any transpose here (every layout reads in place
            # on XLA's dot too) and let the per-device routing pick the kernel.
            if folded:
                layout, a, b, avals = folded[0]
                ctx = ctx.replace(avals_in=avals)
            return sharding.lower_partitioned(
                ctx, a, b, out_dtype=out_dtype, precision=precision, layout=layout
            )
        mode = config.get_custom_call_mode()
        # Without a CUDA device this is cross-platform lowering (export, or the
        # routing tests): emit what routing says. With one, the targets must exist.
        cuda_targets = platform != "cuda" or _ffi.cuda_kernels_usable(_ffi.cuda_targets_available())
        decide = functools.partial(
            routing.route,
            out_dtype=out_dtype,
            platform=platform,
            mode=mode,
            precision=precision,
            autotune=config.get_autotune(),
        )
        choices = [*folded, (layout, a, b, tuple(ctx.avals_in))]
        if folded and mode == "auto":
            # A kernel on the unfolded operands would read a transpose XLA
            # materializes first (an extra pass that routing does not price),
            # while XLA's dot folds it for free: the validation grid's TN
            # shapes ran 1.5-8x slower that way (measured on an H100).
            choices = folded
        for lay, x, y, avals in choices:
            r = decide(*avals, cuda_targets=cuda_targets, layout=lay)
            if r.custom_call:
                return _emit_custom_call(ctx.replace(avals_in=avals), x, y, r)
        if (
            mode == "always"
            and not cuda_targets
            and decide(*ctx.avals_in, layout=layout).custom_call
        ):
            raise RuntimeError(
                "jax_tsm2: custom-call mode is 'always' but this build has no CUDA targets "
                "for this GPU (built with TSM2_CUDA=OFF, without nvcc, or for other GPU "
                "architectures: build_info()). Rebuild for it or set the mode to 'auto'."
            )
        return _xla_lowering(ctx, a, b, out_dtype=out_dtype, precision=precision, layout=layout)

    return lowering


_lowerings = {None: _xla_lowering, "cpu": _routed_lowering("cpu"), "cuda": _routed_lowering("cuda")}
_compat.register_inline_lowering(tsm2_matmul_p, _lowerings)
sharding.register_local_lowerings(_abstract_eval, _lowerings)
_compat.require_devices_during_lowering(tsm2_matmul_p)  # for custom_partitioning


# ----------------------------------------------------------------------------
# broadcast batch dimensions -> one canonical call (used by matmul, dot_general and vmap)


def broadcast_product(
    a: jax.Array, b: jax.Array, *, out_dtype: np.dtype, precision: Any, layout: str = "nn"
) -> jax.Array:
    """The product of ``a[..., *, *]`` and ``b[..., *, *]`` in ``layout``, with NumPy-broadcast
    batch dims, via one primitive call.

    ``a`` and ``b`` have equal rank >= 2 and one float dtype; their last two
    dimensions are stored as ``layout`` says (nn ``[m, k]``, ``[k, n]``; nt
    ``b`` as ``[n, k]``; tn ``a`` as ``[k, m]``), and the result is
    ``[..., m, n]``. Batch dimensions fall in three groups: present in both (a
    true batch), present only in ``a`` (``b`` has size 1 there: fold them into
    ``m``, since ``b`` is shared across them) and present only in ``b`` (``a``
    is shared: a batched call with ``a``'s batch stride 0). Dimensions are
    transposed into the order (both, b-only, a-only) first; that is free when
    they already are in order, as in the common cases. Only when true batch
    and b-only dimensions occur together is ``a`` materialised across the
    b-only ones (the kernels support a batch stride of 0 or full, not a mix).

    In layout tn, ``a`` is stored ``[k, m]``, so a-only dimensions cannot fold
    into ``m`` without a transpose. Alone they become the batch of a call
    with ``b`` shared; next to other batch dimensions both operands are
    broadcast to the full batch (materialised) and make one batched call.

    Example:
        >>> import jax.numpy as jnp, numpy as np
        >>> a, b = jnp.ones((3, 1, 7, 5)), jnp.ones((1, 2, 5, 4))
        >>> broadcast_product(a, b, out_dtype=np.dtype("float32"), precision=None).shape
        (3, 2, 7, 4)
        >>> broadcast_product(a, jnp.ones((1, 2, 4, 5)), out_dtype=np.dtype("float32"),
        ...                   precision=None, layout="nt").shape
        (3, 2, 7, 4)
    """
    nb = a.ndim - 2
    ta, tb = a.shape[-2:], b.shape[-2:]  # the stored matrices
    p = routing.problem_of(ta, tb, layout)
    m, n = p.m, p.n
    sizes = [(a.shape[i], b.shape[i]) for i in range(nb)]
    both = [i for i, (x, y) in enumerate(sizes) if x == y]
    b_only = [i for i, (x, y) in enumerate(sizes) if x == 1 and y != 1]
    a_only = [i for i, (x, y) in enumerate(sizes) if y == 1 and x != 1]
    assert len(both) + len(a_only) + len(b_only) == nb, (a.shape, b.shape)

    perm = both + b_only + a_only
    if perm != list(range(nb)):
        a = lax.transpose(a, (*perm, nb, nb + 1))
        b = lax.transpose(b, (*perm, nb, nb + 1))
    n_both = math.prod(a.shape[: len(both)])
    n_b = math.prod(b.shape[len(both) : len(both) + len(b_only)])
    n_a = math.prod(a.shape[nb - len(a_only) : nb])
    # Broadcast sizes (max() would be wrong for 0 against 1).
    batch_sizes = zip(a.shape[:nb], b.shape[:nb], strict=True)
    permuted_shape = tuple(x if y == 1 else y for x, y in batch_sizes)

    if layout == "tn" and n_a != 1:  # a-only dims cannot join m: they become batch
        if n_both * n_b == 1:
            a3, b3 = a.reshape(n_a, *ta), b.reshape(tb)
        else:
            full = math.prod(permuted_shape)
            a3 = jnp.broadcast_to(a, (*permuted_shape, *ta)).reshape(full, *ta)
            b3 = jnp.broadcast_to(b, (*permuted_shape, *tb)).reshape(full, *tb)
    elif n_both * n_b == 1:  # at most a-only dims: everything folds into m
        a3, b3 = a.reshape(n_a * ta[0], ta[1]), b.reshape(tb)
    elif n_b == 1:  # true batch and a-only dims: batch x (a-only folded into m)
        a3, b3 = a.reshape(n_both, n_a * ta[0], ta[1]), b.reshape(n_both, *tb)
    elif n_both == 1:  # b-only and a-only dims: a is shared by the whole batch
        a3, b3 = a.reshape(n_a * ta[0], ta[1]), b.reshape(n_b, *tb)
    else:  # true batch and b-only dims: a must be repeated across b-only
        full = a.shape[: len(both)] + b.shape[len(both) : len(both) + len(b_only)]
        a = jnp.broadcast_to(a, (*full, *a.shape[len(both) + len(b_only) :]))
        a3, b3 = a.reshape(n_both * n_b, n_a * ta[0], ta[1]), b.reshape(n_both * n_b, *tb)

    c = tsm2_matmul(a3, b3, out_dtype=out_dtype, precision=precision, layout=layout)
    c = c.reshape(*permuted_shape, m, n)
    if perm != list(range(nb)):
        c = lax.transpose(c, (*np.argsort(perm).tolist(), nb, nb + 1))
    return c


# ----------------------------------------------------------------------------
# batching


def _batch_rule(args, dims, *, out_dtype: np.dtype, precision: Any, layout: str):
    """vmap: move the mapped axis to the front and treat it as one more batch dim.

    An unmapped operand has batch dim None. Both operands mapped: one batched
    call (the batch in the kernel's launch grid).
    """
    a, b = args
    da, db = dims
    ra = a.ndim - (da is not None)  # ranks of the unbatched operands
    rb = b.ndim - (db is not None)
    rank = max(ra, rb) + 1  # the canonical batch (if any) plus the vmapped axis

    def lift(x, d, r):
        # d may be negative; moveaxis normalises it.
        x = x[None] if d is None else jnp.moveaxis(x, d, 0)
        # Pad the canonical batch with a size-1 axis after the vmapped one so
        # that both operands line up as [vmapped, batch, rows, cols].
        return x.reshape(x.shape[:1] + (1,) * (rank - 1 - r) + x.shape[1:])

    c = broadcast_product(
        lift(a, da, ra), lift(b, db, rb), out_dtype=out_dtype, precision=precision, layout=layout
    )
    return c, 0


batching.primitive_batchers[tsm2_matmul_p] = _batch_rule


# ----------------------------------------------------------------------------
# autodiff
#
# Cotangents of C = op(A) op(B), in the layouts that read A, B and ct as stored:
#   nn (a[m,k], b[k,n]):  dA = ct B^T  -> (ct, b, nt)   dB = A^T ct   -> (a, ct, tn)
#   nt (a[m,k], b[n,k]):  dA = ct B    -> (ct, b, nn)   dB = ct^T A   -> (ct, a, tn)
#   tn (a[k,m], b[k,n]):  dA = B ct^T  -> (b, ct, nt)   dB = A ct     -> (a, ct, nn)


def _compute_dtype(*dtypes: Any) -> np.dtype:
    return np.dtype(jnp.promote_types(*dtypes))


def _sum_batch(x: jax.Array) -> jax.Array:
    """Sums a cotangent over its batch axis, accumulating halves in f32."""
    acc = jnp.float32 if x.dtype in (jnp.bfloat16, jnp.float16) else x.dtype
    return jnp.sum(x, axis=0, dtype=acc).astype(x.dtype)


def _is_batched(x_shape: tuple[int, ...], ct: jax.Array) -> bool:
    """Whether an operand has its own batch entries (else it is shared by all of them)."""
    return len(x_shape) == 3 and ct.ndim == 3 and x_shape[0] == ct.shape[0]


def _batch_to_cols(x: jax.Array) -> jax.Array:
    """[batch, r, c] -> [r, batch * c] (a transpose in memory): joins the batch to the columns."""
    return jnp.moveaxis(x, 0, 1).reshape(x.shape[1], x.shape[0] * x.shape[2])


def _rows(x: jax.Array) -> jax.Array:
    """[batch, r, c] -> [batch * r, c] (free): joins the batch to the rows."""
    return x.reshape(x.shape[0] * x.shape[1], x.shape[2])


def _transpose_lhs(ct, x, y, *, out_dtype: np.dtype, precision: Any, layout: str):
    """Cotangent of a, in a's stored layout, summed over the batch where a was shared."""
    x_shape, x_dtype = x.aval.shape, x.aval.dtype
    dt = _compute_dtype(ct.dtype, y.dtype)
    ct, y = ct.astype(dt), y.astype(dt)
    prod = lambda p, q, lay: tsm2_matmul(p, q, out_dtype=dt, precision=precision, layout=lay)

    def direct(ct, y):
        if layout == "nn":
            return prod(ct, y, "nt")
        if layout == "nt":
            return prod(ct, y, "nn")
        return prod(y, ct, "nt")

    if ct.ndim == 2 or _is_batched(x_shape, ct):
        g = direct(ct, y)
    elif _is_batched(y.shape, ct):
        # a was shared, b was not: fold the batch into the contraction (over
        # the batch and n), sum_i ct[i] op(b[i])^T, as one 2-D product.
        if layout == "nn":  # ct'[m, B*n] @ b'[k, B*n]^T
            g = prod(_batch_to_cols(ct), _batch_to_cols(y), "nt")
        elif layout == "nt":  # ct'[m, B*n] @ b'[B*n, k]
            g = prod(_batch_to_cols(ct), _rows(y), "nn")
        else:  # b'[k, B*n] @ ct'[m, B*n]^T
            g = prod(_batch_to_cols(y), _batch_to_cols(ct), "nt")
    else:  # both shared: the batch sum commutes with the product
        g = direct(_sum_batch(ct), y.reshape(y.shape[-2:]))
    return g.reshape(x_shape).astype(x_dtype)


def _transpose_rhs(ct, x, y, *, out_dtype: np.dtype, precision: Any, layout: str):
    """Cotangent of b, in b's stored layout, summed over the batch where b was shared."""
    y_shape, y_dtype = y.aval.shape, y.aval.dtype
    dt = _compute_dtype(ct.dtype, x.dtype)
    ct, x = ct.astype(dt), x.astype(dt)
    prod = lambda p, q, lay: tsm2_matmul(p, q, out_dtype=dt, precision=precision, layout=lay)

    def direct(x, ct):
        if layout == "nn":
            return prod(x, ct, "tn")
        if layout == "nt":
            return prod(ct, x, "tn")
        return prod(x, ct, "nn")

    if ct.ndim == 2 or _is_batched(y_shape, ct):
        g = direct(x, ct)
    elif _is_batched(x.shape, ct):
        # b was shared, a was not: the batch joins the contraction over m.
        if layout == "nn":  # a'[B*m, k]^T @ ct'[B*m, n]: no copy
            g = prod(_rows(x), _rows(ct), "tn")
        elif layout == "nt":  # ct'[B*m, n]^T @ a'[B*m, k]: no copy
            g = prod(_rows(ct), _rows(x), "tn")
        else:  # a'[k, B*m] @ ct'[B*m, n]
            g = prod(_batch_to_cols(x), _rows(ct), "nn")
    else:
        g = direct(x.reshape(x.shape[-2:]), _sum_batch(ct))
    return g.reshape(y_shape).astype(y_dtype)


ad.defbilinear(tsm2_matmul_p, _transpose_lhs, _transpose_rhs)

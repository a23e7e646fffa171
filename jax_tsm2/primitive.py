"""The ``tsm2_matmul`` primitive and its rules.

``tsm2_matmul_p`` computes ``c = a @ b`` for canonical operands
``a[batch?, m, k]`` and ``b[batch?, k, n]`` of one float dtype (the FFI
contract in ``ffi/matmul_problem.h``): ranks 2 or 3, a rank-3 operand's batch
equals the result's or is 1 (then it is shared by every batch entry), and the
result is ``[batch, m, n]`` if either operand has rank 3, else ``[m, n]``.
Parameters (hashable): ``out_dtype`` (a NumPy dtype) and ``precision`` (lax's
canonical precision).

Rules:

- impl: op-by-op dispatch (compile the primitive alone and run it).
- abstract eval: shape and dtype checks, result aval.
- lowering: XLA's dot by default; the ``cpu`` and ``cuda`` lowerings ask
  ``routing.route`` and emit the ``tsm2_matmul`` custom call when it says so.
  The custom-call mode is read here, at lowering time (it is part of jit's
  cache key, see ``config.py``). In a program XLA partitions over several
  devices the lowering goes through ``sharding.lower_partitioned`` (a
  ``custom_partitioning`` rule), so each device routes its local product.
- batching: reduces any ``vmap`` to ``broadcast_product`` (below), which
  folds batch dimensions into ``m`` where the other operand is shared and
  otherwise makes one batched call. No Python loops.
- autodiff: the product is bilinear, so JVP and transpose come from
  ``ad.defbilinear``; the transposes are again ``tsm2_matmul`` products, which
  makes derivatives of any order work.
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

from jax_tsm2 import _compat, _ffi, config, routing, sharding
from jax_tsm2._compat import ad, batching, mlir

tsm2_matmul_p = Primitive("tsm2_matmul")


def tsm2_matmul(a: Any, b: Any, *, out_dtype: Any = None, precision: Any = None) -> jax.Array:
    """Binds ``tsm2_matmul_p`` on canonical operands (see the module docstring).

    ``precision`` must already be canonical (``lax``'s form); ``out_dtype``
    defaults to the operands' dtype.

    Example:
        >>> import jax.numpy as jnp
        >>> tsm2_matmul(jnp.ones((2, 5, 3)), jnp.ones((3, 4))).shape
        (2, 5, 4)
    """
    out_dtype = np.dtype(a.dtype if out_dtype is None else out_dtype)
    a, b = _compat.match_varying(a, b)  # shard_map: a replicated operand becomes varying
    return tsm2_matmul_p.bind(a, b, out_dtype=out_dtype, precision=precision)


# ----------------------------------------------------------------------------
# impl and abstract eval


def _abstract_eval(a: ShapedArray, b: ShapedArray, *, out_dtype: np.dtype, precision: Any):
    p = routing.problem_of(a.shape, b.shape)
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
    return sharding.result_aval(a, b, shape, np.dtype(out_dtype))


tsm2_matmul_p.def_impl(functools.partial(_compat.apply_primitive, tsm2_matmul_p))
tsm2_matmul_p.def_abstract_eval(_abstract_eval)


# ----------------------------------------------------------------------------
# lowering


def _xla_product(a: jax.Array, b: jax.Array, *, out_dtype: np.dtype, precision: Any) -> jax.Array:
    """The primitive's semantics in terms of ``lax.dot_general`` (XLA's dot)."""
    p = routing.problem_of(a.shape, b.shape)
    dot = lambda x, y, dims: lax.dot_general(
        x, y, dims, precision=precision, preferred_element_type=out_dtype
    )
    if p.batch is None:
        return dot(a, b, (((1,), (0,)), ((), ())))
    # A batch-1 operand is shared: drop its batch axis instead of broadcasting it.
    a_batched = a.ndim == 3 and a.shape[0] == p.batch
    b_batched = b.ndim == 3 and b.shape[0] == p.batch
    a = a if a_batched or a.ndim == 2 else a[0]
    b = b if b_batched or b.ndim == 2 else b[0]
    if a_batched and b_batched:
        return dot(a, b, (((2,), (1,)), ((0,), (0,))))
    if a_batched:
        return dot(a, b, (((2,), (0,)), ((), ())))
    # Only b is batched: dot_general puts a's free dim (m) first.
    return lax.transpose(dot(a, b, (((1,), (1,)), ((), ()))), (1, 0, 2))


_xla_lowering = mlir.lower_fun(_xla_product, multiple_results=False)


def _routed_lowering(platform: str):
    def lowering(ctx, a, b, *, out_dtype: np.dtype, precision: Any):
        split = sharding.lower_partitioned(ctx, a, b, out_dtype=out_dtype, precision=precision)
        if split is not None:  # a program XLA partitions: per-device products
            return split
        mode = config.get_custom_call_mode()
        a_aval, b_aval = ctx.avals_in
        # Without a CUDA device this is cross-platform lowering (export, or the
        # routing tests): emit what routing says. With one, the targets must exist.
        cuda_targets = platform != "cuda" or (
            _ffi.cuda_targets_available() or not _ffi.cuda_backend_present()
        )
        r = routing.route(
            a_aval,
            b_aval,
            out_dtype,
            platform=platform,
            mode=mode,
            precision=precision,
            cuda_targets=cuda_targets,
        )
        if not r.custom_call and mode == "always" and not cuda_targets:
            wanted = routing.route(
                a_aval, b_aval, out_dtype, platform=platform, mode=mode, precision=precision
            )
            if wanted.custom_call:
                raise RuntimeError(
                    "jax_tsm2: custom-call mode is 'always' but this build has no CUDA targets "
                    "(it was built with TSM2_CUDA=OFF or without nvcc). Rebuild with CUDA or "
                    "set the mode to 'auto'."
                )
        if r.custom_call:
            # The target has a second result, a scratch workspace for the
            # kernel's split tiles; XLA allocates it and it is dropped here.
            p = r.problem
            ws_bytes = _ffi.matmul_workspace_bytes(
                a_aval.dtype, r.kernel, p.batch or 1, p.m, p.k, p.n
            )
            ws_aval = ShapedArray((ws_bytes,), np.dtype(np.uint8))
            ctx2 = ctx.replace(avals_out=[*ctx.avals_out, ws_aval])
            c, _ = jax.ffi.ffi_lowering(_ffi.MATMUL_TARGET)(
                ctx2, a, b, kernel=np.int32(r.kernel), layout=np.int32(0)
            )
            return [c]
        return _xla_lowering(ctx, a, b, out_dtype=out_dtype, precision=precision)

    return lowering


_lowerings = {None: _xla_lowering, "cpu": _routed_lowering("cpu"), "cuda": _routed_lowering("cuda")}
for _platform, _rule in _lowerings.items():
    mlir.register_lowering(tsm2_matmul_p, _rule, platform=_platform)
sharding.register_local_lowerings(_abstract_eval, _lowerings)
_compat.require_devices_during_lowering(tsm2_matmul_p)  # for custom_partitioning


# ----------------------------------------------------------------------------
# broadcast batch dimensions -> one canonical call (used by matmul and vmap)


def broadcast_product(
    a: jax.Array, b: jax.Array, *, out_dtype: np.dtype, precision: Any
) -> jax.Array:
    """``a[..., m, k] @ b[..., k, n]`` with NumPy-broadcast batch dims, via one primitive call.

    ``a`` and ``b`` have equal rank >= 2 and one float dtype. Batch dimensions
    fall in three groups: present in both (a true batch), present only in
    ``a`` (``b`` has size 1 there: fold them into ``m``, since ``b`` is shared
    across them) and present only in ``b`` (``a`` is shared: a batched call
    with ``a``'s batch stride 0). Dimensions are transposed into the order
    (both, b-only, a-only) first; that is free when they already are in order,
    as in the common cases. Only when true batch and b-only dimensions occur
    together is ``a`` materialised across the b-only ones (the kernels support
    a batch stride of 0 or full, not a mix).

    Example:
        >>> import jax.numpy as jnp, numpy as np
        >>> a, b = jnp.ones((3, 1, 7, 5)), jnp.ones((1, 2, 5, 4))
        >>> broadcast_product(a, b, out_dtype=np.dtype("float32"), precision=None).shape
        (3, 2, 7, 4)
    """
    nb = a.ndim - 2
    m, k = a.shape[-2:]
    n = b.shape[-1]
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

    if n_both * n_b == 1:  # at most a-only dims: everything folds into m
        a3, b3 = a.reshape(n_a * m, k), b.reshape(k, n)
    elif n_b == 1:  # true batch and a-only dims: batch x (a-only folded into m)
        a3, b3 = a.reshape(n_both, n_a * m, k), b.reshape(n_both, k, n)
    elif n_both == 1:  # b-only and a-only dims: a is shared by the whole batch
        a3, b3 = a.reshape(n_a * m, k), b.reshape(n_b, k, n)
    else:  # true batch and b-only dims: a must be repeated across b-only
        full = a.shape[: len(both)] + b.shape[len(both) : len(both) + len(b_only)]
        a = jnp.broadcast_to(a, (*full, *a.shape[len(both) + len(b_only) :]))
        a3, b3 = a.reshape(n_both * n_b, n_a * m, k), b.reshape(n_both * n_b, k, n)

    c = tsm2_matmul(a3, b3, out_dtype=out_dtype, precision=precision)
    # Broadcast sizes (max() would be wrong for 0 against 1).
    batch_sizes = zip(a.shape[:nb], b.shape[:nb], strict=True)
    permuted_shape = tuple(x if y == 1 else y for x, y in batch_sizes)
    c = c.reshape(*permuted_shape, m, n)
    if perm != list(range(nb)):
        c = lax.transpose(c, (*np.argsort(perm).tolist(), nb, nb + 1))
    return c


# ----------------------------------------------------------------------------
# batching


def _batch_rule(args, dims, *, out_dtype: np.dtype, precision: Any):
    """vmap: move the mapped axis to the front and treat it as one more batch dim.

    An unmapped operand has batch dim None.
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
        lift(a, da, ra), lift(b, db, rb), out_dtype=out_dtype, precision=precision
    )
    return c, 0


batching.primitive_batchers[tsm2_matmul_p] = _batch_rule


# ----------------------------------------------------------------------------
# autodiff


def _compute_dtype(*dtypes: Any) -> np.dtype:
    return np.dtype(jnp.promote_types(*dtypes))


def _sum_batch(x: jax.Array) -> jax.Array:
    """Sums a cotangent over its batch axis, accumulating halves in f32."""
    acc = jnp.float32 if x.dtype in (jnp.bfloat16, jnp.float16) else x.dtype
    return jnp.sum(x, axis=0, dtype=acc).astype(x.dtype)


def _is_batched(x_shape: tuple[int, ...], ct: jax.Array) -> bool:
    """Whether an operand has its own batch entries (else it is shared by all of them)."""
    return len(x_shape) == 3 and ct.ndim == 3 and x_shape[0] == ct.shape[0]


def _transpose_lhs(ct, x, y, *, out_dtype: np.dtype, precision: Any):
    """Cotangent of a: ct @ b^T, summed over the batch where a was shared."""
    x_shape, x_dtype = x.aval.shape, x.aval.dtype
    dt = _compute_dtype(ct.dtype, y.dtype)
    ct, y = ct.astype(dt), y.astype(dt)
    prod = lambda p, q: tsm2_matmul(p, q, out_dtype=dt, precision=precision)
    if ct.ndim == 2 or _is_batched(x_shape, ct):
        g = prod(ct, jnp.swapaxes(y, -1, -2))
    elif _is_batched(y.shape, ct):
        # a was shared, b was not: fold the batch into the contraction,
        # sum_b ct[b] @ y[b]^T = ct'[m, B*n] @ y'[B*n, k].
        batch, m, n = ct.shape
        ct2 = jnp.moveaxis(ct, 0, 1).reshape(m, batch * n)
        y2 = jnp.moveaxis(y, 0, 1).reshape(y.shape[1], batch * n)
        g = prod(ct2, y2.T)
    else:  # both shared: the batch sum commutes with the product
        g = prod(_sum_batch(ct), jnp.swapaxes(y.reshape(y.shape[-2:]), -1, -2))
    return g.reshape(x_shape).astype(x_dtype)


def _transpose_rhs(ct, x, y, *, out_dtype: np.dtype, precision: Any):
    """Cotangent of b: a^T @ ct, summed over the batch where b was shared."""
    y_shape, y_dtype = y.aval.shape, y.aval.dtype
    dt = _compute_dtype(ct.dtype, x.dtype)
    ct, x = ct.astype(dt), x.astype(dt)
    prod = lambda p, q: tsm2_matmul(p, q, out_dtype=dt, precision=precision)
    if ct.ndim == 2 or _is_batched(y_shape, ct):
        g = prod(jnp.swapaxes(x, -1, -2), ct)
    elif _is_batched(x.shape, ct):
        # b was shared, a was not: sum_b x[b]^T @ ct[b] = x'[B*m, k]^T @ ct'[B*m, n].
        batch, m, n = ct.shape
        g = prod(x.reshape(batch * m, x.shape[-1]).T, ct.reshape(batch * m, n))
    else:
        g = prod(jnp.swapaxes(x.reshape(x.shape[-2:]), -1, -2), _sum_batch(ct))
    return g.reshape(y_shape).astype(y_dtype)


ad.defbilinear(tsm2_matmul_p, _transpose_lhs, _transpose_rhs)

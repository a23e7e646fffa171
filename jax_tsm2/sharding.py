"""How ``tsm2_matmul`` is split across devices: its sharding rule and per-shard lowering.

Without a rule, XLA's SPMD partitioner treats the ``tsm2_matmul`` custom call
as an opaque op and replicates its operands, so a row-sharded ``A`` would be
all-gathered onto every device before the product. This module gives the
partitioner a rule instead, with ``jax.experimental.custom_partitioning``:

- a Shardy ``sharding_rule`` in einsum notation, one per operand layout:
  ``"m k, k n -> m n"`` (nn), ``"m k, n k -> m n"`` (nt), ``"k m, k n -> m n"``
  (tn), with a batch factor ``b`` for rank-3 operands and ``k`` a reduction
  factor, so propagation knows which operand dimensions the result's
  dimensions follow;
- ``infer_sharding_from_operands`` for the older GSPMD propagation
  (``jax_use_shardy_partitioner=False``);
- ``partition``: given the shardings the partitioner settled on, each device
  computes the product of its local blocks, and when the contraction dimension
  ``k`` is sharded the local products are summed with one ``psum``.

The per-shard product binds ``tsm2_matmul_local``, a private twin of
``tsm2_matmul_p`` whose lowering is the primitive's own (routing included), so
routing sees the *per-device* shapes. The custom-call mode is read when the
program is lowered and pinned into that twin as a parameter, because XLA calls
``partition`` later, while compiling, when a ``custom_call_mode`` block may
already have been left.

Lowering takes this path only for programs that XLA will partition (``jit``
over several devices). Inside ``shard_map`` with all mesh axes manual the
program already sees per-device shapes and the primitive lowers directly; with
only some axes manual (``shard_map(..., axis_names=...)``) it also lowers
directly and the partitioner replicates the operands over the remaining axes.

Under ``shard_map`` the primitive follows lax's typing: operands are cast to
vary over the union of their manual axes before binding (``_compat.match_varying``),
so that ``grad`` with respect to a replicated operand sums over devices. With
Explicit mesh axes (``jax.sharding.AxisType.Explicit``) the result's sharding
is part of its type (``result_aval``): batch from the batched operand, rows
from ``A``, columns from ``B``, replicated along the axes of a sharded
contraction dimension (they are summed over with one all-reduce).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax import lax
from jax.experimental.custom_partitioning import custom_partitioning
from jax.extend.core import Primitive
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jax_tsm2 import _compat, config

__all__ = ["factor_rule", "lower_partitioned", "register_local_lowerings", "result_aval"]

_HALF = (np.dtype(jax.numpy.bfloat16), np.dtype(np.float16))


# ----------------------------------------------------------------------------
# the einsum-style factor rule of a canonical operand pair


def factor_rule(
    a_shape: Sequence[int], b_shape: Sequence[int], layout: str = "nn"
) -> tuple[str, ...]:
    """The Shardy factor rule of canonical operands in ``layout`` (nn ``a[batch?, m, k]``,
    ``b[batch?, k, n]``; nt ``b[batch?, n, k]``; tn ``a[batch?, k, m]``).

    Returns ``(rule, *unshared)``: the einsum-style rule string and the
    factors that must stay replicated (the size-1 batch axis of an operand
    shared by every batch entry, named ``o``/``p``).

    Example:
        >>> factor_rule((6, 4), (4, 2))
        ('m k, k n -> m n',)
        >>> factor_rule((3, 6, 4), (1, 4, 2))
        ('b m k, p k n -> b m n', 'p')
        >>> factor_rule((6, 4), (2, 4), "nt")
        ('m k, n k -> m n',)
        >>> factor_rule((4, 6), (4, 2), "tn")
        ('k m, k n -> m n',)
    """
    a_dims, b_dims, out_dims = _factor_dims(a_shape, b_shape, layout)
    rule = f"{' '.join(a_dims)}, {' '.join(b_dims)} -> {' '.join(out_dims)}"
    unshared = tuple(f for f in (*a_dims, *b_dims) if f in ("o", "p"))
    return (rule, *unshared)


def _factor_dims(a_shape, b_shape, layout="nn"):
    """Factor names of each dimension of a, b and the result."""
    a3, b3 = len(a_shape) == 3, len(b_shape) == 3
    a_mat = ("k", "m") if layout == "tn" else ("m", "k")
    b_mat = ("n", "k") if layout == "nt" else ("k", "n")
    if not (a3 or b3):
        return a_mat, b_mat, ("m", "n")
    batch = max(a_shape[0] if a3 else 1, b_shape[0] if b3 else 1)
    # A rank-3 operand of batch 1 next to a batched one is shared, not batched.
    a_b = "b" if a3 and a_shape[0] == batch else "o"
    b_b = "b" if b3 and b_shape[0] == batch else "p"
    a_dims = (a_b, *a_mat) if a3 else a_mat
    b_dims = (b_b, *b_mat) if b3 else b_mat
    return a_dims, b_dims, ("b", "m", "n")


def _spec_axes(spec: Any, ndim: int) -> list[tuple[str, ...]]:
    """A PartitionSpec as one tuple of mesh axis names per dimension."""
    entries = list(spec) + [None] * (ndim - len(spec))
    out = []
    for e in entries[:ndim]:
        if e is None or e is P.UNCONSTRAINED:
            out.append(())
        elif isinstance(e, str):
            out.append((e,))
        else:
            out.append(tuple(e))
    return out


def _factor_axes(dims_per_operand, specs_per_operand) -> dict[str, tuple[str, ...]]:
    """Mesh axes of each factor, read from the operands (``a`` first); an axis is used once."""
    axes: dict[str, tuple[str, ...]] = {}
    used: set[str] = set()
    for dims, spec in zip(dims_per_operand, specs_per_operand, strict=True):
        for f, ax in zip(dims, spec, strict=True):
            if f in ("o", "p") or f in axes or not ax:
                continue
            if used.isdisjoint(ax):
                axes[f] = ax
                used.update(ax)
    return axes


def _entry(ax: tuple[str, ...]) -> Any:
    return None if not ax else (ax[0] if len(ax) == 1 else ax)


def _spec_of(dims, axes) -> P:
    return P(*(_entry(axes.get(f, ())) for f in dims))


# ----------------------------------------------------------------------------
# the result type (abstract eval): varying axes and Explicit shardings


def result_aval(a: Any, b: Any, shape: tuple[int, ...], dtype: np.dtype, layout: str = "nn") -> Any:
    """The primitive's result aval: shape and dtype plus the sharding-related parts of its type.

    Outside ``shard_map`` and Explicit meshes that is a plain ``ShapedArray``.
    Inside ``shard_map`` the result varies over the operands' manual axes;
    with Explicit axes it carries the sharding the product keeps (batch from
    the batched operand, rows from ``a``, columns from ``b``).

    A contraction dimension sharded over Explicit axes is summed with one
    all-reduce and the result is replicated along those axes (``lax.dot_general``
    asks for an ``out_sharding`` instead; this is what its transpose picks).

    Example:
        >>> import numpy as np
        >>> from jax.core import ShapedArray
        >>> f32 = np.dtype("float32")
        >>> result_aval(ShapedArray((6, 4), f32), ShapedArray((4, 2), f32), (6, 2), f32)
        ShapedArray(float32[6,2])
    """
    varying = _compat.varying_axes(a) | _compat.varying_axes(b)
    mesh = next(
        (
            s.mesh
            for s in (getattr(a, "sharding", None), getattr(b, "sharding", None))
            if s is not None and not s.mesh.empty
        ),
        None,
    )
    if mesh is None:
        return _compat.shaped_array(shape, dtype, None, varying)
    a_dims, b_dims, out_dims = _factor_dims(a.shape, b.shape, layout)
    specs = [_spec_axes(x.sharding.spec, x.ndim) for x in (a, b)]
    axes = _factor_axes((a_dims, b_dims), specs)
    axes.pop("k", None)  # summed over: the result is replicated along those axes
    out_dims = out_dims[-len(shape) :]
    sharding = NamedSharding(mesh, _spec_of(out_dims, axes))
    return _compat.shaped_array(shape, dtype, sharding, varying)


# ----------------------------------------------------------------------------
# the per-shard product: tsm2_matmul with the custom-call mode pinned

_local_p = Primitive("tsm2_matmul_local")
_local_p.def_impl(functools.partial(_compat.apply_primitive, _local_p))


def register_local_lowerings(
    abstract_eval: Callable[..., Any], lowerings: dict[str | None, Callable[..., Any]]
) -> None:
    """Gives ``tsm2_matmul_local`` the primitive's abstract eval and lowerings.

    Called once by ``primitive.py``. ``lowerings`` maps a platform (``None``
    for the default) to the primitive's lowering rule; the twin runs that rule
    with the custom-call mode it was bound with, and without autotuning.

    Example:
        >>> import jax_tsm2.primitive  # registers them on import
        >>> _local_p.name
        'tsm2_matmul_local'
    """
    _local_p.def_abstract_eval(lambda a, b, *, mode, **params: abstract_eval(a, b, **params))

    def pinned(rule):
        # Autotuning stays off here: this runs inside XLA's partitioner, where timing jitted
        # programs would compile and run JAX work from within a compilation.
        def lowering(ctx, a, b, *, mode, **params):
            with config.custom_call_mode(mode), config.autotune(False):
                return rule(ctx, a, b, **params)

        return lowering

    for platform, rule in lowerings.items():
        _compat.mlir.register_lowering(_local_p, pinned(rule), platform=platform)


# ----------------------------------------------------------------------------
# custom_partitioning


def _local_product(rule, out_dtype, precision, mode, layout, a, b):
    """The product of the local blocks (the unpartitioned body, too)."""
    return _local_p.bind(a, b, out_dtype=out_dtype, precision=precision, mode=mode, layout=layout)


def _shardy_rule(rule, out_dtype, precision, mode, layout, mesh, operand_types, result_types):
    del out_dtype, precision, mode, layout, mesh, operand_types, result_types
    rule_str, *unshared = rule
    return rule_str, {"reduction_factors": ("k",), "need_replication_factors": tuple(unshared)}


def _plan(rule, layout, arg_shapes):
    """Operand, result and contraction axes from the shardings the partitioner proposes."""
    a, b = arg_shapes
    a_dims, b_dims, out_dims = _factor_dims(a.shape, b.shape, layout)
    specs = []
    for x in (a, b):
        s = x.sharding
        specs.append(_spec_axes(s.spec, x.ndim) if isinstance(s, NamedSharding) else [()] * x.ndim)
    axes = _factor_axes((a_dims, b_dims), specs)
    return a_dims, b_dims, out_dims, axes


def _infer_sharding(rule, out_dtype, precision, mode, layout, mesh, arg_shapes, result_shape):
    del out_dtype, precision, mode
    _, _, out_dims, axes = _plan(rule, layout, arg_shapes)
    axes.pop("k", None)
    return NamedSharding(mesh, _spec_of(out_dims[-result_shape.ndim :], axes))


def _partition(rule, out_dtype, precision, mode, layout, mesh, arg_shapes, result_shape):
    a_dims, b_dims, out_dims, axes = _plan(rule, layout, arg_shapes)
    k_axes = axes.get("k", ())
    out_spec = _spec_of(out_dims[-result_shape.ndim :], {f: x for f, x in axes.items() if f != "k"})
    arg_shardings = (
        NamedSharding(mesh, _spec_of(a_dims, axes)),
        NamedSharding(mesh, _spec_of(b_dims, axes)),
    )
    # Half-precision partial sums are reduced in f32 (the kernels write f32 directly).
    acc = np.dtype(np.float32) if k_axes and np.dtype(out_dtype) in _HALF else out_dtype

    def lower_fn(a, b):
        c = _local_p.bind(a, b, out_dtype=acc, precision=precision, mode=mode, layout=layout)
        if k_axes:
            c = lax.psum(c, k_axes).astype(out_dtype)
        return c

    return mesh, lower_fn, NamedSharding(mesh, out_spec), arg_shardings


_partitioned = custom_partitioning(_local_product, static_argnums=(0, 1, 2, 3, 4))
_partitioned.def_partition(
    partition=_partition,
    infer_sharding_from_operands=_infer_sharding,
    sharding_rule=_shardy_rule,
)


def lower_partitioned(
    ctx: Any, a: Any, b: Any, *, out_dtype: np.dtype, precision: Any, layout: str = "nn"
) -> Any:
    """The primitive's lowering in a program XLA will partition, or ``None`` for the direct one.

    Returns ``None`` unless the program is a ``jit`` over several devices (see
    the module docstring); otherwise the lowered ``custom_partitioning`` call
    whose per-shard body is the routed product.

    Example:
        >>> import jax, jax.numpy as jnp, jax_tsm2
        >>> "CustomSPMDPartitioning" in jax.jit(jax_tsm2.matmul).lower(
        ...     jnp.ones((8, 4)), jnp.ones((4, 2))).as_text()  # one device: direct
        False
    """
    if _compat.axis_context_kind(ctx) != "spmd":
        return None
    a_aval, b_aval = ctx.avals_in
    rule = factor_rule(a_aval.shape, b_aval.shape, layout)
    mode = config.get_custom_call_mode()
    fn = functools.partial(_partitioned, rule, np.dtype(out_dtype), precision, mode, layout)
    return _compat.mlir.lower_fun(fn, multiple_results=False)(ctx, a, b)

"""The one place where jax_tsm2 touches JAX internals.

JAX moves and renames its private modules (``jax._src.*``) between point
releases. Every private import the package needs lives here, behind small
wrappers with stable names, so that supporting a new JAX version means editing
this file and nothing else. The semi-public interpreter modules
(``jax.interpreters.*``) are re-exported from here too, for the same reason.

Tested with jax 0.9.1 to 0.12 (CPU) and 0.11.x (CUDA).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax._src import config as _config
from jax._src import core as _core
from jax._src import dispatch as _dispatch
from jax._src import dtypes as _dtypes
from jax._src import sharding_impls as _sharding_impls
from jax._src.lax import lax as _lax_internal
from jax._src.numpy import util as _np_util
from jax.interpreters import ad, batching, mlir
from jax.sharding import PartitionSpec as P

__all__ = [
    "ad",
    "apply_primitive",
    "axis_context_kind",
    "batching",
    "bool_config_state",
    "canonicalize_precision",
    "canonicalize_user_dtype",
    "ensure_arraylike",
    "enum_config_state",
    "hlo_print_options",
    "is_dot_algorithm",
    "match_varying",
    "mlir",
    "register_inline_lowering",
    "require_devices_during_lowering",
    "result_type_and_weak",
    "shaped_array",
    "transpose_source",
    "varying_axes",
    "with_weak_type",
]


def enum_config_state(name: str, values: Sequence[str], default: str, help: str) -> Any:
    """A JAX config option (``jax.config.update(name, ...)``, env var ``NAME``).

    ``include_in_jit_key`` puts the value into the C++ jit dispatch key and
    ``include_in_trace_context`` into the Python-side trace and lowering
    caches; both are needed for a switch that is read at lowering time, or a
    function compiled under one value is silently reused under another.
    """
    return _config.enum_state(
        name,
        list(values),
        default,
        help=help,
        include_in_jit_key=True,
        include_in_trace_context=True,
    )


def bool_config_state(name: str, default: bool, help: str) -> Any:
    """A boolean JAX config option, part of jit's cache key as ``enum_config_state``'s.

    Its env var ``NAME`` takes jax's truth values (``1``/``0``, ``true``/``false``,
    ``on``/``off``, ``yes``/``no``, ``y``/``n``, ``t``/``f``, any case).
    """
    return _config.bool_state(
        name, default, help=help, include_in_jit_key=True, include_in_trace_context=True
    )


def apply_primitive(prim: Any, *args: Any, **params: Any) -> Any:
    """Eager (op-by-op) evaluation of a primitive: compiles it alone and runs it."""
    return _dispatch.apply_primitive(prim, *args, **params)


def result_type_and_weak(*args: Any) -> tuple[np.dtype, bool]:
    """``jnp.result_type`` plus whether the result is weakly typed."""
    dtype, weak = _dtypes.result_type(*args, return_weak_type_flag=True)
    return np.dtype(dtype), bool(weak)


def canonicalize_user_dtype(dtype: Any, fun_name: str) -> np.dtype:
    """What jnp does with a user-given dtype (e.g. f64 becomes f32 without x64)."""
    return np.dtype(_dtypes.check_and_canonicalize_user_dtype(dtype, fun_name))


def canonicalize_precision(precision: Any) -> Any:
    """``lax.dot_general``'s canonical, hashable form of ``precision``.

    Resolves ``None`` against ``jax.default_matmul_precision`` at call time,
    exactly as ``lax.dot_general`` does.
    """
    return _lax_internal.canonicalize_precision(precision)


def is_symbolic_dim(d: Any) -> bool:
    """True for a symbolic dimension of ``jax.export`` (``export.symbolic_shape``)."""
    return _core.is_symbolic_dim(d)


def is_dot_algorithm(precision: Any) -> bool:
    """True if a canonical precision names a dot algorithm, not Precision enums."""
    return isinstance(precision, (_lax_internal.DotAlgorithm, _lax_internal.DotAlgorithmPreset))


def with_weak_type(x: Any, weak_type: bool) -> Any:
    """Returns ``x`` with its weak-type flag set as jnp would set it."""
    if not weak_type:
        return x
    return _lax_internal._convert_element_type(x, x.dtype, weak_type=True)


def ensure_arraylike(fun_name: str, *args: Any) -> Any:
    """jnp's argument check: arrays and scalars pass, lists and tuples raise TypeError."""
    return _np_util.ensure_arraylike(fun_name, *args)


# ----------------------------------------------------------------------------
# sharding: shard_map's varying-axes types and the lowering's axis context
#
# jax 0.10 keeps shard_map's "varying manual axes" in ``aval.manual_axis_type``
# (``.mat.varying``); earlier releases had ``aval.vma`` and
# ``core.standard_insert_pvary``. Both spellings are handled here.


def varying_axes(aval: Any) -> frozenset:
    """The manual mesh axes over which a value varies inside ``shard_map`` (empty outside)."""
    mat = getattr(aval, "manual_axis_type", None)
    if mat is not None:
        return frozenset(mat.varying)
    return frozenset(getattr(aval, "vma", frozenset()))


def match_varying(*args: Any) -> list[Any]:
    """Casts operands to vary over the union of their manual axes (``pvary``), as lax ops do.

    Under ``shard_map`` a replicated operand combined with a sharded one must
    be marked varying before a primitive binds; the cast is what makes
    reverse-mode AD sum the replicated operand's cotangent over the devices.
    """
    insert = getattr(_core, "auto_insert_reshard", None) or getattr(
        _core, "standard_insert_pvary", None
    )
    return list(args) if insert is None else list(insert(*args))


def shaped_array(shape: Sequence[int], dtype: Any, sharding: Any, varying: frozenset) -> Any:
    """A ``ShapedArray`` with a sharding in its type and ``shard_map`` varying axes."""
    if sharding is None:
        return _core.ShapedArray(shape, dtype)
    if hasattr(_core, "ManualAxisType"):
        mat = _core.ManualAxisType(varying=varying)
        return _core.ShapedArray(shape, dtype, sharding=sharding, manual_axis_type=mat)
    return _core.ShapedArray(shape, dtype, sharding=sharding, vma=varying)


def shape_dtype_struct(shape: Sequence[int], dtype: Any, like: Any) -> Any:
    """A ``jax.ShapeDtypeStruct`` for an FFI call's result that varies like the operand ``like``.

    Under ``shard_map`` the result of a per-device computation varies over the
    operands' manual axes; jax wants those on the struct together with a
    sharding on the same (abstract) mesh: as ``manual_axis_type`` from jax 0.10,
    as ``vma`` before.
    """
    aval = jax.typeof(like)
    varying = varying_axes(aval)
    if not varying:
        return jax.ShapeDtypeStruct(shape, dtype)
    sharding = aval.sharding.update(spec=P(*([None] * len(shape))))
    if hasattr(_core, "ManualAxisType"):
        mat = _core.ManualAxisType(varying=varying)
        return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding, manual_axis_type=mat)
    return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding, vma=varying)


def hlo_print_options() -> Any:
    """jaxlib's ``HloPrintOptions`` class (``jaxlib._hlo`` from jax 0.10, ``_jax`` before)."""
    try:
        from jaxlib import _hlo

        return _hlo.HloPrintOptions
    except ImportError:
        from jax._src.lib import _jax

        return _jax.HloPrintOptions


def axis_context_kind(ctx: Any) -> str:
    """How a lowering's program will be partitioned, from ``ctx.module_context.axis_context``.

    ``"spmd"``: an ``jit`` program over several devices that XLA's SPMD
    partitioner will split (``NamedSharding`` inputs, Auto or Explicit axes);
    ``"manual"``: inside ``shard_map`` with every mesh axis manual (the program
    already sees per-device shapes); ``"partial"``: ``shard_map`` with some axes
    left to the partitioner; ``"single"``: one device, or anything else (pmap).
    """
    axis_ctx = ctx.module_context.axis_context
    # Unknown context classes (a future jax) fall back to the direct lowering.
    sharding_ctx = getattr(_sharding_impls, "ShardingContext", ())
    spmd_ctx = getattr(_sharding_impls, "SPMDAxisContext", ())
    if isinstance(axis_ctx, sharding_ctx):
        # custom_partitioning needs the devices (require_devices_during_lowering).
        has_devices = getattr(axis_ctx, "device_assignment", None) is not None
        return "spmd" if axis_ctx.num_devices > 1 and has_devices else "single"
    if isinstance(axis_ctx, spmd_ctx):
        names = frozenset(axis_ctx.mesh.axis_names)
        if names <= frozenset(axis_ctx.manual_axes):
            return "manual"
        return "partial"
    return "single"


def require_devices_during_lowering(prim: Any) -> None:
    """Makes ``jit`` hand the device assignment and mesh to ``prim``'s lowering.

    ``custom_partitioning`` needs them to build its per-device program; jit
    only provides them for primitives in this set (as for ``pure_callback``).
    The price: a program with ``prim`` cannot be lowered against an
    ``AbstractMesh`` alone (``jax.export`` with no concrete devices).
    """
    registry = getattr(_dispatch, "prim_requires_devices_during_lowering", None)
    if registry is not None:  # without it, lowering takes the direct path (no devices)
        registry.add(prim)


# ----------------------------------------------------------------------------
# lowering: rules that look at how their operands were produced


def register_inline_lowering(prim: Any, rules: dict[str | None, Any]) -> None:
    """Registers ``prim``'s lowering ``rules`` ({platform or None: rule}) to run inline.

    jax lowers a cacheable primitive into an out-of-line function whose
    operands are block arguments, so a rule cannot see which op produced an
    operand. Uncached (``cacheable=False``), the rule runs inline, where
    ``transpose_source`` can find a transpose that feeds it.

    jax 0.10's uncached path breaks multi-platform lowering of a primitive
    with several platform rules (``lower_per_platform`` concatenates a list
    and the tuple ``avals_out``), so one default rule is registered that calls
    ``lower_per_platform`` itself with the per-platform rules. Where either
    piece is missing (a future jax), the rules are registered normally and
    simply find nothing to fold.
    """
    import inspect

    from jax._src.interpreters import mlir as _mlir

    per_platform = getattr(_mlir, "lower_per_platform", None)
    can_uncache = "cacheable" in inspect.signature(mlir.register_lowering).parameters
    if per_platform is None or not can_uncache:
        for platform, rule in rules.items():
            mlir.register_lowering(prim, rule, platform=platform)
        return
    default = rules.get(None)
    platform_rules = {p: r for p, r in rules.items() if p is not None}

    def dispatch(ctx, *args, **params):
        ctx = ctx.replace(avals_out=list(ctx.avals_out))
        return per_platform(ctx, prim.name, platform_rules, default, frozenset(), *args, **params)

    mlir.register_lowering(prim, dispatch, platform=None, cacheable=False)


def transpose_source(value: Any) -> Any:
    """The input of the ``stablehlo.transpose`` that produced ``value``, if that transpose
    swaps exactly the last two dimensions (any leading ones fixed); else None."""
    ir = mlir.ir
    owner = getattr(value, "owner", None)
    op = getattr(owner, "operation", owner)
    if not isinstance(op, ir.Operation) or op.name != "stablehlo.transpose":
        return None
    try:
        perm = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
    except (KeyError, ValueError, TypeError):
        return None
    r = len(perm)
    if r < 2 or perm != [*range(r - 2), r - 1, r - 2]:
        return None
    return op.operands[0]

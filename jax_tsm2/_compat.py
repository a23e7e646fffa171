"""The one place where jax_tsm2 touches JAX internals.

JAX moves and renames its private modules (``jax._src.*``) between point
releases. Every private import the package needs lives here, behind small
wrappers with stable names, so that supporting a new JAX version means editing
this file and nothing else. The semi-public interpreter modules
(``jax.interpreters.*``) are re-exported from here too, for the same reason.

Tested with jax 0.10.x (CPU) and 0.11.x (CUDA).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from jax._src import config as _config
from jax._src import dispatch as _dispatch
from jax._src import dtypes as _dtypes
from jax._src.lax import lax as _lax_internal
from jax._src.numpy import util as _np_util
from jax.interpreters import ad, batching, mlir

__all__ = [
    "ad",
    "apply_primitive",
    "batching",
    "canonicalize_precision",
    "canonicalize_user_dtype",
    "ensure_arraylike",
    "enum_config_state",
    "is_dot_algorithm",
    "mlir",
    "result_type_and_weak",
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

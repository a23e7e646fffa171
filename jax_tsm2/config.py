"""The switch that decides whether products may use the tsm2 custom call.

Three modes:

- ``"auto"`` (default): routing decides (``jax_tsm2.routing``). On CUDA, a
  tall-and-skinny product runs a TSM2 kernel where this GPU's tune cache, its
  calibration (``python -m jax_tsm2.tune --calibrate``) or, on a GPU without
  one, the performance model with a wide margin (``jax_tsm2.model``) says it is
  faster than XLA's dot, and XLA's dot
  otherwise, so calling ``jax_tsm2.matmul`` is not meant to cost speed. On
  CPU, XLA's dot.
- ``"prefer"``: every tall-and-skinny product runs a TSM2 kernel on CUDA,
  measured faster or not (other shapes still use XLA's dot).
- ``"always"``: force the custom call for every product it can compute (the
  four float dtypes f32, f64, bf16, f16 with a non-empty shape). On CUDA that is
  the TSM2 kernels, on CPU the plain-loop reference target (slow; meant for
  tests). Integer, complex and bool products, dot algorithms
  (``precision="BF16_BF16_F32"`` etc.) and empty shapes still go to XLA's dot.
- ``"never"``: never emit the custom call.

Set it with the environment variable ``JAX_TSM2_CUSTOM_CALL`` (read once, at
import), ``jax_tsm2.set_custom_call_mode(mode)`` or
``jax.config.update("jax_tsm2_custom_call", mode)``, or for a block of code
with ``with jax_tsm2.custom_call_mode(mode): ...``.

The mode is read when a product is lowered to XLA, not when it is traced. It is
registered as a JAX config option that is part of jit's cache key, so flipping
it makes the next call of an already-jitted function compile again instead of
reusing the executable built under the old mode.

A second switch, off by default, turns on autotuning at lowering time
(``jax_tsm2.tune.online``): in mode "auto" on a GPU, the first lowering of a
tall-and-skinny shape that this GPU's tune cache has no entry for times the
candidate kernels and XLA's dot right there and stores the winner in the
cache. Set it with ``JAX_TSM2_AUTOTUNE=1`` (read once, at import),
``jax_tsm2.set_autotune(True)``, ``jax.config.update("jax_tsm2_autotune", True)``
or ``with jax_tsm2.autotune(): ...``. It is part of jit's cache key too.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Literal

from jax_tsm2 import _compat

Mode = Literal["auto", "prefer", "always", "never"]
MODES: tuple[str, ...] = ("auto", "prefer", "always", "never")
ENV_VAR = "JAX_TSM2_CUSTOM_CALL"
_OPTION = "jax_tsm2_custom_call"  # enum_state derives the env var name from it


def check_mode(mode: object, where: str) -> str:
    """``mode`` if it is one of ``MODES``, else ValueError naming ``where`` (shared by every
    function that takes a mode, so they all answer alike)."""
    if not isinstance(mode, str) or mode not in MODES:
        raise ValueError(f"{where}: custom-call mode must be one of {MODES}, got {mode!r}")
    return mode


# JAX reads the environment variable itself, but its error for a bad value does
# not say what the valid values are; check first so the message does.
if ENV_VAR in os.environ:
    check_mode(os.environ[ENV_VAR], f"environment variable {ENV_VAR}")

_mode_state = _compat.enum_config_state(
    _OPTION,
    MODES,
    "auto",
    help=(
        "jax_tsm2: whether matrix products may use the tsm2 custom call: "
        "'auto' (routing decides, by measured speed), 'prefer' (every tall-and-skinny "
        "product), 'always' (force it where possible), 'never'."
    ),
)


def get_custom_call_mode() -> Mode:
    """Returns the mode in effect here (the context manager's, else the global one).

    Example:
        >>> import jax_tsm2
        >>> jax_tsm2.get_custom_call_mode()
        'auto'
    """
    return _mode_state.value  # type: ignore[return-value]


def set_custom_call_mode(mode: Mode) -> None:
    """Sets the mode for the whole process (all threads without a local override).

    Example:
        >>> import jax_tsm2
        >>> jax_tsm2.set_custom_call_mode("never")
        >>> jax_tsm2.get_custom_call_mode()
        'never'
        >>> jax_tsm2.set_custom_call_mode("auto")
    """
    _mode_state._set(check_mode(mode, "set_custom_call_mode"))


@contextlib.contextmanager
def custom_call_mode(mode: Mode) -> Iterator[None]:
    """Sets the mode inside a ``with`` block (thread-local), restoring it after.

    Example:
        >>> import jax, jax.numpy as jnp, jax_tsm2
        >>> a, b = jnp.ones((8, 4)), jnp.ones((4, 2))
        >>> with jax_tsm2.custom_call_mode("always"):  # CPU: the reference target
        ...     c = jax.jit(jax_tsm2.matmul)(a, b)
        >>> float(c[0, 0])
        4.0
    """
    with _mode_state(check_mode(mode, "custom_call_mode")):
        yield


AUTOTUNE_ENV_VAR = "JAX_TSM2_AUTOTUNE"
_AUTOTUNE_OPTION = "jax_tsm2_autotune"
# The strings jax's bool_env accepts (any case).
_TRUTH_VALUES = ("1", "0", "true", "false", "on", "off", "yes", "no", "y", "n", "t", "f")

if AUTOTUNE_ENV_VAR in os.environ and os.environ[AUTOTUNE_ENV_VAR].lower() not in _TRUTH_VALUES:
    raise ValueError(
        f"environment variable {AUTOTUNE_ENV_VAR}={os.environ[AUTOTUNE_ENV_VAR]!r}: "
        "set it to 1 to time new shapes at lowering (or 0, the default; true/false, "
        "on/off and yes/no work too)"
    )

_autotune_state = _compat.bool_config_state(
    _AUTOTUNE_OPTION,
    False,
    help=(
        "jax_tsm2: in custom-call mode 'auto' on a GPU, time the candidates of a shape "
        "the tune cache has no entry for when it is first lowered, and cache the winner."
    ),
)


def check_bool(on: object, where: str) -> bool:
    """``on`` if it is a bool, else TypeError naming ``where``."""
    if not isinstance(on, bool):
        raise TypeError(f"{where}: expected True or False, got {on!r}")
    return on


def get_autotune() -> bool:
    """Whether lowering autotunes new shapes here (the context manager's, else the global one).

    Example:
        >>> import jax_tsm2
        >>> jax_tsm2.get_autotune()
        False
    """
    return bool(_autotune_state.value)


def set_autotune(on: bool) -> None:
    """Turns autotuning at lowering time on or off for the whole process.

    Example:
        >>> import jax_tsm2
        >>> jax_tsm2.set_autotune(True)
        >>> jax_tsm2.get_autotune()
        True
        >>> jax_tsm2.set_autotune(False)
    """
    _autotune_state._set(check_bool(on, "set_autotune"))


@contextlib.contextmanager
def autotune(on: bool = True) -> Iterator[None]:
    """Turns autotuning on (or off) inside a ``with`` block (thread-local), restoring it after.

    What the block lowers in mode "auto" on a GPU is timed where this GPU's
    tune cache has no entry yet (``jax_tsm2.tune.online``); without a GPU
    (as here) nothing is timed and routing decides as usual.

    Example:
        >>> import jax, jax.numpy as jnp, jax_tsm2
        >>> with jax_tsm2.autotune():
        ...     c = jax.jit(jax_tsm2.matmul)(jnp.ones((8, 4)), jnp.ones((4, 2)))
        ...     jax_tsm2.get_autotune()
        True
        >>> jax_tsm2.get_autotune()
        False
    """
    with _autotune_state(check_bool(on, "autotune")):
        yield

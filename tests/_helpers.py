"""Test helpers: random operands, a float64 reference, a rounding-error bound.

Operands are random with magnitudes in [0.5, 1.5] and random signs: never
zero, so a kernel that skips or duplicates a term cannot hide behind zeros.
Results are compared with a float64 NumPy product of the *same* (already
rounded) operands, against a bound proportional to |a| @ |b|, which is how
floating-point dot products actually err.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_tsm2

FLOAT_DTYPES = (jnp.float32, jnp.float64, jnp.bfloat16, jnp.float16)
HALF_DTYPES = (jnp.bfloat16, jnp.float16)

# Sizes that matter: empty, one, small primes, powers of two and just past
# them (tile boundaries of the kernels).
EDGE_SIZES = (0, 1, 2, 3, 5, 7, 8, 13, 31, 32, 33, 63, 64, 65, 127, 128, 129, 257)


def slow(*values: Any, id: str | None = None) -> Any:
    """A parameter set that only the slow run takes (``--run-slow``, CI).

    Parameter matrices keep a representative slice in the default run (every code path,
    the hardest sizes) and the rest behind this mark, e.g.
    ``@pytest.mark.parametrize("dtype", [jnp.float32, slow(jnp.float64)])``.
    """
    return pytest.param(*values, marks=pytest.mark.slow, id=id)


def rand(rng: np.random.Generator, shape, dtype) -> jax.Array:
    mag = rng.uniform(0.5, 1.5, size=shape)
    sign = rng.choice(np.array([-1.0, 1.0]), size=shape)
    return jnp.asarray(mag * sign, dtype=dtype)


def as_f64(x) -> np.ndarray:
    if isinstance(x, np.ndarray) and x.dtype == np.float64:
        return x  # already on the host in float64: no device round trip
    return np.asarray(jnp.asarray(x).astype(jnp.float64))


def assert_close_to_reference(c, a, b, *, k: int | None = None) -> None:
    """|c - a@b| <= 2 (k eps_acc + eps_out) (|a| @ |b|), elementwise, in float64."""
    a64, b64 = as_f64(a), as_f64(b)
    ref = np.matmul(a64, b64)
    scale = np.matmul(np.abs(a64), np.abs(b64))
    c64 = as_f64(c)
    assert c64.shape == ref.shape, (c64.shape, ref.shape)
    if k is None:
        k = a64.shape[-1]
    out = jnp.asarray(c).dtype
    acc = jnp.float64 if out == jnp.float64 else jnp.float32
    bound = 2 * (k * float(jnp.finfo(acc).eps) + float(jnp.finfo(out).eps)) * scale
    err = np.abs(c64 - ref)
    bad = ~(err <= bound + 1e-300)
    assert not bad.any(), (
        f"{bad.sum()} of {bad.size} elements off: worst err {err.max():.3g}, "
        f"bound there {bound.flat[np.argmax(err - bound)]:.3g} (dtype {out}, k={k})"
    )


def ffi_product(a, b, kernel: int, layout: int, out_dtype=None):
    """op(a) @ op(b) through the tsm2_matmul target (layout 0 nn, 1 nt, 2 tn)."""
    from jax_tsm2 import _ffi

    a_t, b_t = layout == 2, layout == 1
    m = a.shape[-1] if a_t else a.shape[-2]
    k = a.shape[-2] if a_t else a.shape[-1]
    n = b.shape[-2] if b_t else b.shape[-1]
    batch = [x.shape[0] for x in (a, b) if x.ndim == 3]
    shape = (max(batch), m, n) if batch else (m, n)
    nbytes = _ffi.matmul_workspace_bytes(a.dtype, kernel, max(batch, default=1), m, k, n)
    out = jax.ShapeDtypeStruct(shape, out_dtype or a.dtype)
    ws = jax.ShapeDtypeStruct((nbytes,), jnp.uint8)
    call = jax.ffi.ffi_call("tsm2_matmul", (out, ws))
    return call(a, b, kernel=np.int32(kernel), layout=np.int32(layout))[0]


# Where the jax_tsm2 this process imported lives: an installed copy's site-packages, or
# the source tree of an editable install. A child interpreter puts its working directory
# (or its script's) first on sys.path, so one started from the repository would import the
# source tree, without the compiled extension of a regular install: children run here,
# with this directory first on PYTHONPATH too (for scripts run by path).
PACKAGE_ROOT = str(pathlib.Path(jax_tsm2.__file__).resolve().parent.parent)
# The scripts of benchmarks/ sit beside tests/ in the repository (a wheel does not carry them).
BENCHMARKS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"


def package_env(**overrides: str) -> dict[str, str]:
    """``os.environ`` with ``overrides``, and ``PACKAGE_ROOT`` first on ``PYTHONPATH``."""
    env = dict(os.environ, **overrides)
    env["PYTHONPATH"] = os.pathsep.join([PACKAGE_ROOT, *filter(None, [env.get("PYTHONPATH")])])
    return env


def run_python(args: list[str], *, env: dict[str, str] | None = None, **kwargs: Any):
    """``python *args`` in a child that imports the jax_tsm2 this process imported
    (``subprocess.run`` keywords pass through; output is captured as text)."""
    kwargs = {"capture_output": True, "text": True, "timeout": 300, **kwargs}
    return subprocess.run(
        [sys.executable, *args], cwd=PACKAGE_ROOT, env=env or package_env(), **kwargs
    )


def import_with_env(name: str, value: str, expr: str) -> subprocess.CompletedProcess:
    """Imports jax_tsm2 in a fresh interpreter with environment variable ``name`` set to
    ``value`` (settings read at import) and prints ``expr``."""
    code = f"import jax_tsm2; print({expr})"
    return run_python(["-c", code], env=package_env(**{name: value}), timeout=120)


def lowered_text(f, *args, platform: str = "cpu") -> str:
    return jax.jit(f).trace(*args).lower(lowering_platforms=(platform,)).as_text()


def has_custom_call(text: str) -> bool:
    return "stablehlo.custom_call @tsm2_matmul" in text


def ffi_matmul(a, b, kernel: int, out_dtype=None):
    """Calls the tsm2_matmul FFI target directly (both results: c and its workspace)."""
    from jax_tsm2 import _ffi

    batch = [x.shape[0] for x in (a, b) if x.ndim == 3]
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    shape = (max(batch), m, n) if batch else (m, n)
    out = jax.ShapeDtypeStruct(shape, out_dtype or a.dtype)
    nbytes = _ffi.matmul_workspace_bytes(a.dtype, kernel, max(batch, default=1), m, k, n)
    ws = jax.ShapeDtypeStruct((nbytes,), jnp.uint8)
    c, _ = jax.ffi.ffi_call("tsm2_matmul", (out, ws))(
        a, b, kernel=np.int32(kernel), layout=np.int32(0)
    )
    return c


def special_operands(rng: np.random.Generator, m: int, k: int, n: int, dtype):
    """``a (m, k)``, ``b (k, n)`` as float64 NumPy arrays (exact in ``dtype``) with signed
    zeros, NaN and Inf where their IEEE results are known: rows of ``a`` all +0, all -0, of
    random signed zeros, all -0 but one +0 (as many of these as ``a`` has rows); columns of
    ``b`` all positive, all negative, random signs; one +Inf and one NaN in ``a`` and a -Inf
    in ``b`` (m >= 7, n >= 4)."""
    a = np.array(as_f64(rand(rng, (m, k), dtype)))
    b = np.array(as_f64(rand(rng, (k, n), dtype)))
    rows = [np.zeros(k), np.full(k, -0.0), rng.choice(np.array([0.0, -0.0]), k), np.full(k, -0.0)]
    rows[3][k // 2] = 0.0
    a[: min(m, 4)] = rows[: min(m, 4)]
    b[:, 0], b[:, 1] = np.abs(b[:, 0]), -np.abs(b[:, 1])
    if m >= 7 and n >= 4:
        a[5, k // 2] = np.inf
        a[6, 0] = np.nan
        b[k - 1, 3] = -np.inf
    return a, b


def assert_specials_as_jnp(c, a, b) -> None:
    """``c`` against ``a @ b`` (float64 operands, exact in ``c``'s dtype) as jnp computes it:
    NaN and +-Inf where the float64 product has them, exact zeros where it is zero, signed as
    jnp signs them (XLA's GEMMs and reductions start a sum from +0, and compute a product of
    contraction length 1 as a multiply: a zero result is -0 only where k = 1 and its one
    product is -0), the rest within rounding."""
    c64 = as_f64(c)
    ref = np.einsum("ik,kj->ij", a, b)  # NumPy's own loops: BLAS may skip zero terms (0 * Inf)
    np.testing.assert_array_equal(np.isnan(c64), np.isnan(ref), "NaN")
    np.testing.assert_array_equal(np.isposinf(c64), np.isposinf(ref), "+Inf")
    np.testing.assert_array_equal(np.isneginf(c64), np.isneginf(ref), "-Inf")
    zero = ref == 0
    np.testing.assert_array_equal(c64 == 0, zero, "exact zeros")
    # k = 1: the sign of the one product (einsum's own sum may start from +0).
    negative_zero = np.signbit(a * b) if a.shape[-1] == 1 else np.zeros_like(zero)
    np.testing.assert_array_equal(
        np.signbit(c64)[zero], negative_zero[zero], "signs of the zero results"
    )
    finite = np.isfinite(ref) & ~zero
    scale = np.abs(np.nan_to_num(a, posinf=0, neginf=0, nan=0)) @ np.abs(
        np.nan_to_num(b, posinf=0, neginf=0, nan=0)
    )
    out = jnp.asarray(c).dtype
    acc = jnp.float64 if out == jnp.float64 else jnp.float32
    k = a.shape[-1]
    bound = 2 * (k * float(jnp.finfo(acc).eps) + float(jnp.finfo(out).eps)) * scale
    assert (np.abs(c64[finite] - ref[finite]) <= bound[finite]).all(), "finite values off"

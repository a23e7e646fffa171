"""Test helpers: random operands, a float64 reference, a rounding-error bound.

Operands are random with magnitudes in [0.5, 1.5] and random signs: never
zero, so a kernel that skips or duplicates a term cannot hide behind zeros.
Results are compared with a float64 NumPy product of the *same* (already
rounded) operands, against a bound proportional to |a| @ |b|, which is how
floating-point dot products actually err.
"""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np

FLOAT_DTYPES = (jnp.float32, jnp.float64, jnp.bfloat16, jnp.float16)
HALF_DTYPES = (jnp.bfloat16, jnp.float16)

# Sizes that matter: empty, one, small primes, powers of two and just past
# them (tile boundaries of the kernels).
EDGE_SIZES = (0, 1, 2, 3, 5, 7, 8, 13, 31, 32, 33, 63, 64, 65, 127, 128, 129, 257)


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


def import_with_env(name: str, value: str, expr: str) -> subprocess.CompletedProcess:
    """Imports jax_tsm2 in a fresh interpreter with environment variable ``name`` set to
    ``value`` (settings read at import) and prints ``expr``."""
    env = dict(os.environ, **{name: value})
    code = f"import jax_tsm2; print({expr})"
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )


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

"""TSM2L's tensor-core tile (ffi/matmul/kernels/tsm2l_mma.cuh) against float64.

Every instantiation the planner can pick (k padded to 8, 16, 32, 48 or 64 elements for
f32 and f64, 16, 32 or 64 for bf16/f16; each width of 8 or 16 MMA columns), in layouts nn and nt,
with row counts that end mid-tile, outputs whose rows take vector stores and rows
that do not, a batch sharing B, and f32 Inf/NaN (which takes the exact fallback).
Skipped without a CUDA device and a CUDA build (conftest.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import (
    assert_close_to_reference,
    assert_specials_as_jnp,
    ffi_product,
    rand,
    special_operands,
)

from jax_tsm2 import routing
from jax_tsm2._ffi import _tsm2_ext

pytestmark = pytest.mark.gpu

L = routing.KERNEL_IDS["tsm2l"]
NN, NT = 0, 1
_run = jax.jit(ffi_product, static_argnums=(2, 3))
dtype_ids = lambda d: jnp.dtype(d).name

# One k per padded length (rows of whole 16-byte vectors that leave some lanes of a quad
# short where there are such rows) and one n per MMA width, odd where it can be.
K_BY_DTYPE = {
    jnp.float32: (4, 12, 20, 44, 64),
    jnp.float64: (6, 14, 30, 34, 64),
    jnp.bfloat16: (16, 24, 64),
    jnp.float16: (8, 32, 40),
}
N_BY_DTYPE = {
    jnp.float32: (9, 16, 23, 32, 37, 48, 55, 64),
    jnp.float64: (9, 16, 23, 32, 37, 48, 55, 64),
    jnp.bfloat16: (5, 28, 33, 64),
    jnp.float16: (16, 31, 48, 61),
}


def takes(dtype, k: int, n: int) -> bool:
    return bool(_tsm2_ext.tile_config(jnp.dtype(dtype).name, L, k, n).get("l_mma"))


@pytest.mark.parametrize("dtype", list(K_BY_DTYPE), ids=dtype_ids)
@pytest.mark.parametrize("layout", [NN, NT], ids=["nn", "nt"])
def test_every_instantiation(dtype, layout):
    rng = np.random.default_rng(7 + layout)
    seen = set()
    for k in K_BY_DTYPE[dtype]:
        for n in N_BY_DTYPE[dtype]:
            cfg = _tsm2_ext.tile_config(jnp.dtype(dtype).name, L, k, n)
            if cfg["row_kernel"]:  # rows of 16 or 32 bytes with n <= 8 stay there
                continue
            assert cfg["l_mma"], (k, n)
            seen.add((cfg["l_mma_k"], cfg["l_mma_n"]))
            m = 1037 + 16 * 8 * 3 * (k % 3)  # past a tile of 16 rows, and past a block's 8 tiles
            a, b = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
            c = _run(a, b.T if layout == NT else b, L, layout)
            assert_close_to_reference(c, a, b)
    itemsize = jnp.dtype(dtype).itemsize
    widths = range(16, 65, 16 if itemsize == 2 else 8)
    pads = (16, 32, 64) if itemsize == 2 else (8, 16, 32, 48, 64)
    assert {kp for kp, _ in seen} == set(pads), seen
    assert {w for _, w in seen} == set(widths), seen


@pytest.mark.parametrize("dtype", list(K_BY_DTYPE), ids=dtype_ids)
@pytest.mark.parametrize("m", [1, 15, 16, 17, 129])
def test_few_rows(dtype, m):
    rng = np.random.default_rng(m)
    k, n = K_BY_DTYPE[dtype][-1], N_BY_DTYPE[dtype][-1]
    a, b = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
    assert_close_to_reference(_run(a, b, L, NN), a, b)


@pytest.mark.parametrize("dtype", list(K_BY_DTYPE), ids=dtype_ids)
def test_batch_sharing_b(dtype):
    rng = np.random.default_rng(3)
    k, n = K_BY_DTYPE[dtype][0], N_BY_DTYPE[dtype][1]
    a, b = rand(rng, (3, 257, k), dtype), rand(rng, (k, n), dtype)
    assert_close_to_reference(_run(a, b, L, NN), a, b)


@pytest.mark.parametrize("dtype", list(K_BY_DTYPE), ids=dtype_ids)
@pytest.mark.parametrize(("m", "n"), [(100, 33), (1000, 64)])
def test_special_values(dtype, m, n):
    """Signed zeros, Inf and NaN as jnp gives them (f32: the exact fallback)."""
    k = K_BY_DTYPE[dtype][-1]
    assert takes(dtype, k, n)
    a, b = special_operands(np.random.default_rng(m), m, k, n, dtype)
    got = _run(jnp.asarray(a, dtype), jnp.asarray(b, dtype), L, NN)
    assert_specials_as_jnp(got, a, b)


@pytest.mark.parametrize("dtype", list(K_BY_DTYPE), ids=dtype_ids)
def test_past_its_widest_b_the_l_tile_runs(dtype):
    """n = 65 takes the CUDA-core L tile's n-tiles: the tensor-core tile holds 64 columns."""
    k = K_BY_DTYPE[dtype][-1]
    assert not takes(dtype, k, 65)
    rng = np.random.default_rng(65)
    a, b = rand(rng, (1037, k), dtype), rand(rng, (k, 65), dtype)
    assert_close_to_reference(_run(a, b, L, NN), a, b)

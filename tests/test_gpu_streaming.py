"""GPU numerics of the streaming tiles (TSM2R, TSM2L) on rows of any byte length.

The R tile (ffi/matmul/kernels/tsm2.cuh) copies each row's chunk as the 16-byte vectors
that cover it and reads its elements where they land; the L tile (kernels/tsm2l.cuh) does
the same with a tile's whole span of rows, and both write a tile's output as 16-byte
vectors through shared memory. The cases below put rows and outputs at every alignment
(k and n prime, 1, 2, 3, and whole vectors for comparison), m at 1, primes and past the
tiles, n on each n-tile of ffi/matmul/tiles.h and past 64 (several n-tiles), batches with
A or B shared, and f32 output of 2-byte types, in layouts nn and nt, against a float64
reference on random data. Skipped without a CUDA device and a CUDA build (conftest.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import FLOAT_DTYPES, HALF_DTYPES, assert_close_to_reference, ffi_product, rand

pytestmark = pytest.mark.gpu
dtype_ids = lambda d: jnp.dtype(d).name

NN, NT = 0, 1
TSM2R, TSM2L = 0, 1
_run = jax.jit(ffi_product, static_argnums=(2, 3, 4))


def operands(rng, dtype, layout, m, k, n, a_batch=None, b_batch=None):
    """Random a (m x k) and b (k x n, or n x k for nt), with optional batch dims."""
    a_shape = (m, k) if a_batch is None else (a_batch, m, k)
    b_core = (n, k) if layout == NT else (k, n)
    b_shape = b_core if b_batch is None else (b_batch, *b_core)
    return rand(rng, a_shape, dtype), rand(rng, b_shape, dtype)


def check(c, a, b, layout):
    b_l = jnp.swapaxes(b, -1, -2) if layout == NT else b
    assert_close_to_reference(c, a, b_l)


# (m, k, n) for the R tile: k of every alignment (prime, 1-3, past a chunk, long enough
# for tiles split between blocks), n on and between the n-tiles and past 64.
R_SHAPES = [
    (1, 1, 1),
    (7, 3, 5),
    (129, 13, 9),
    (1021, 61, 51),
    (257, 1021, 33),
    (4099, 127, 27),
    (130, 4099, 8),
    (64, 257, 64),
    (65, 2053, 65),
    (1000, 100, 100),
    (3, 5, 41),
    (300, 40_009, 3),
    (2, 123_457, 12),
    (1025, 1024, 16),
]

# (m, k, n) for the L tile (k <= 64): rows of every byte length, outputs of every
# length, m past a tile and past the persistent grid, n past 64.
L_SHAPES = [
    (1, 1, 1),
    (7, 3, 5),
    (4099, 9, 5),
    (1021, 10, 42),
    (20_011, 54, 1),
    (10_007, 11, 56),
    (5003, 7, 30),
    (3001, 37, 5),
    (2053, 4, 9),
    (1009, 64, 64),
    (1025, 16, 16),
    (777, 63, 63),
    (513, 2, 3),
    (300_007, 5, 7),
    (301, 20, 100),
    (4097, 12, 24),
]


@pytest.mark.parametrize("layout", [NN, NT], ids=["nn", "nt"])
@pytest.mark.parametrize(("m", "k", "n"), R_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
def test_r_tile_any_alignment(dtype, m, k, n, layout):
    rng = np.random.default_rng(m * 7 + k * 3 + n)
    a, b = operands(rng, dtype, layout, m, k, n)
    check(_run(a, b, TSM2R, layout, None), a, b, layout)


@pytest.mark.parametrize("layout", [NN, NT], ids=["nn", "nt"])
@pytest.mark.parametrize(("m", "k", "n"), L_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
def test_l_tile_any_alignment(dtype, m, k, n, layout):
    rng = np.random.default_rng(m * 5 + k * 11 + n)
    a, b = operands(rng, dtype, layout, m, k, n)
    check(_run(a, b, TSM2L, layout, None), a, b, layout)


@pytest.mark.parametrize("kernel", [TSM2R, TSM2L], ids=["r", "l"])
@pytest.mark.parametrize(
    ("a_batch", "b_batch", "m", "k", "n"),
    [
        (3, 3, 1001, 13, 7),  # both batched: each product its own B
        (3, None, 1001, 13, 7),  # B shared
        (None, 4, 257, 21, 9),  # A shared
        (5, 1, 999, 5, 33),  # a batch of one B, broadcast
        (2, 2, 4099, 61, 40),
    ],
    ids=str,
)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
def test_batched_any_alignment(dtype, kernel, a_batch, b_batch, m, k, n):
    rng = np.random.default_rng((a_batch or 0) + 3 * (b_batch or 0) + m + k + n)
    for layout in (NN, NT):
        a, b = operands(rng, dtype, layout, m, k, n, a_batch, b_batch)
        check(_run(a, b, kernel, layout, None), a, b, layout)


@pytest.mark.parametrize(
    ("kernel", "m", "k", "n"),
    [
        (TSM2R, 1021, 1023, 51),
        (TSM2R, 129, 77, 8),
        (TSM2L, 4099, 10, 42),
        (TSM2L, 1001, 7, 3),
        (TSM2L, 1024, 8, 16),
    ],
    ids=str,
)
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=dtype_ids)
def test_half_inputs_write_f32_any_alignment(dtype, kernel, m, k, n):
    rng = np.random.default_rng(m + k + n)
    for layout in (NN, NT):
        a, b = operands(rng, dtype, layout, m, k, n)
        c = _run(a, b, kernel, layout, jnp.float32)
        assert c.dtype == jnp.float32
        check(c, a, b, layout)


@pytest.mark.parametrize(
    ("kernel", "m", "k", "n"),
    [(TSM2R, 300, 40_009, 51), (TSM2R, 5, 200_003, 8), (TSM2L, 100_003, 37, 5)],
    ids=str,
)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
def test_streaming_tiles_are_deterministic(dtype, kernel, m, k, n):
    """Tiles split between blocks (long k) are added in a fixed order: bitwise repeatable."""
    rng = np.random.default_rng(k)
    a, b = operands(rng, dtype, NN, m, k, n)
    first = np.asarray(_run(a, b, kernel, NN, None))
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(_run(a, b, kernel, NN, None)), first)
    check(first, a, b, NN)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_ids)
def test_batch_entries_that_start_mid_vector(dtype):
    """Batch entries of A (and C) that start inside a 16-byte vector (m * k * itemsize and
    m * n * itemsize not multiples of 16): the tiles' copies and writes start from each
    entry's own address."""
    rng = np.random.default_rng(3)
    for kernel, (m, k, n) in [(TSM2R, (7, 333, 11)), (TSM2L, (9, 13, 6))]:
        for layout in (NN, NT):
            a, b = operands(rng, dtype, layout, m, k, n, 6, 6)
            check(_run(a, b, kernel, layout, None), a, b, layout)

"""TSM2T's plan (``ffi/matmul/split_plan.h`` TPlan) as the extension reports it: where
stages hold their rows flat, and that the ring then fits the kernel's shared memory.
Plain C++ arithmetic: runs without a GPU."""

from __future__ import annotations

import math

import numpy as np
import pytest

from jax_tsm2 import _ffi
from jax_tsm2._ffi import _tsm2_ext

TSM2T = _ffi.KERNEL_IDS["tsm2t"]
DTYPES = {"float32": 4, "float64": 8, "bfloat16": 2, "float16": 2}
T_STAGES, T_MAX_SMEM = 3, 96 * 1024  # split_plan.h kTStages, kTMaxSmem


def plan(dtype, m, k, n, batch=1):
    return _tsm2_ext.split_plan(dtype, TSM2T, batch, m, k, n, 132)


@pytest.mark.parametrize("dtype", DTYPES)
def test_flat_where_rows_are_not_vectors_and_one_tile_covers_c(dtype):
    isz = DTYPES[dtype]
    vec = 16 // isz
    rng = np.random.default_rng(isz)
    shapes = [(1, 1), (2, 2), (3, 5), (vec, vec), (vec - 1, vec), (64, 64), (100, 50), (600, 9)]
    shapes += [tuple(rng.integers(1, 300, 2)) for _ in range(60)]
    for m, n in shapes:
        m, n = int(m), int(n)
        s = plan(dtype, m, 100_003, n)
        rows_vec = m % vec == 0 and n % vec == 0
        one_tile = s["tiles_m"] == 1 and s["tiles_n"] == 1
        want = not rows_vec and one_tile and not s["mma"]
        assert s["flat"] == want, (m, n)
        if s["flat"]:
            # Each thread's block: powers of two up to 8 (4 along m in f64) and no wider
            # than C, the tile C rounded up to whole blocks, every block a thread of the
            # 256, and 8 rows per thread and stage unless the blocks are down to 1 x 1.
            em, en = s["edge_m"], s["edge_n"]
            assert em in (1, 2, 4, 8) and en in (1, 2, 4, 8) and (isz < 8 or em <= 4)
            assert em < 2 * m and en < 2 * n
            assert s["tile_m"] == em * math.ceil(m / em) and s["tile_n"] == en * math.ceil(n / en)
            threads = (s["tile_m"] // em) * (s["tile_n"] // en)
            assert threads <= 256
            groups = 256 // threads
            assert s["step"] % groups == 0
            assert s["step"] >= 8 * groups or em * en == 1
            assert s["flat_a"] >= s["step"] * m + 2 * vec + s["tile_m"]
            assert s["flat_b"] >= s["step"] * n + 2 * vec + s["tile_n"]
            assert s["flat_a"] % vec == 0 and s["flat_b"] % vec == 0
            assert T_STAGES * (s["flat_a"] + s["flat_b"]) * isz <= T_MAX_SMEM
            assert s["step"] * (m + n) * isz > 1024, "stages of a few rows would be mostly sync"


@pytest.mark.parametrize("dtype", DTYPES)
def test_flat_batches_start_on_vectors(dtype):
    isz = DTYPES[dtype]
    vec = 16 // isz
    k_vec, k_odd = 5000, 5001  # 5000 * 3 and 5000 * 5 elements are whole vectors in every dtype
    assert plan(dtype, 5, k_vec, 3, batch=3)["flat"]
    assert not plan(dtype, 5, k_odd, 3, batch=3)["flat"]
    assert plan(dtype, 5, k_odd, 3, batch=1)["flat"]
    assert math.gcd(k_vec * 3, vec) == vec


@pytest.mark.parametrize("dtype", DTYPES)
def test_flat_splits_cover_the_contraction(dtype):
    for m, k, n in [(3, 1, 5), (6, 2_384_164, 3), (2, 7_637_232, 3), (113, 9_001, 2)]:
        s = plan(dtype, m, k, n)
        assert s["flat"]
        assert s["split_len"] % s["step"] == 0
        assert s["splits"] == math.ceil(k / s["split_len"])
        ws = _tsm2_ext.workspace_bytes(dtype, TSM2T, 1, m, k, n, 132, 90, 227 * 1024)
        acc = 8 if dtype == "float64" else 4
        assert ws >= (s["splits"] * m * n * acc if s["splits"] > 1 else 0)

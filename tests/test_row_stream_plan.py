"""The row stream's plan (``ffi/matmul/row_stream_plan.h``) as the extension reports it:
which products it takes, how it splits k, and the workspace Python allocates for it.
Plain C++ arithmetic: runs without a GPU."""

from __future__ import annotations

import math

import numpy as np
import pytest

from jax_tsm2 import _ffi
from jax_tsm2._ffi import _tsm2_ext
from jax_tsm2.model.calibration import CALIBRATION
from jax_tsm2.model.device import H100_SXM
from jax_tsm2.model.tiles import tile_prediction
from jax_tsm2.problem import Problem

TSM2R, TSM2L = _ffi.KERNEL_IDS["tsm2r"], _ffi.KERNEL_IDS["tsm2l"]
DTYPES = {"float32": 4, "float64": 8, "bfloat16": 2, "float16": 2}
SMEM = 227 * 1024


@pytest.mark.parametrize("dtype", DTYPES)
def test_which_products_it_takes(dtype):
    isz = DTYPES[dtype]
    widest = 16 if isz == 4 else 8
    k = 4096
    for n in range(1, 65):
        taken = _tsm2_ext.row_stream_plan(dtype, 1000, k, n) is not None
        assert taken == (n <= widest), n
        assert (_tsm2_ext.tile_config(dtype, TSM2R, k, n)["row_stream"] is not None) == taken
    # Rows of fewer than 256 bytes stay on the row tiles (and k <= 64 on TSM2L's).
    assert _tsm2_ext.row_stream_plan(dtype, 1000, 256 // isz - 1, 4) is None
    assert _tsm2_ext.row_stream_plan(dtype, 1000, max(256 // isz, 65), 4) is not None
    assert _tsm2_ext.tile_config(dtype, TSM2L, 64, 4)["row_stream"] is None


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("m", "k", "n"), [(1, 4096, 1), (20000, 20000, 8), (4421, 8423, 3), (7, 1_000_003, 2)]
)
def test_splits_cover_k_within_shared_memory(dtype, m, k, n):
    isz = DTYPES[dtype]
    rs = _tsm2_ext.tile_config(dtype, TSM2R, k, n)["row_stream"]
    plan = _tsm2_ext.row_stream_plan(dtype, m, k, n, sm_count=132, smem_optin=SMEM)
    vec = 16 // isz
    step_k = 32 * rs["vecs"] * vec
    assert plan["splits"] == math.ceil(k / plan["k_chunk"])
    assert plan["k_chunk"] % step_k == 0 or plan["splits"] == 1
    assert plan["smem_bytes"] <= SMEM
    tail = k * isz % 16
    assert plan["period"] == (1 if tail == 0 else 16 // math.gcd(16, tail))
    assert plan["groups"] == math.ceil(m / (plan["period"] * rs["rows"])) * plan["period"]
    assert plan["units"] == plan["groups"] * plan["splits"]
    assert 1 <= plan["blocks"] <= 132
    acc = 8 if isz == 8 else 4
    assert plan["workspace_bytes"] == (plan["splits"] * m * n * acc if plan["splits"] > 1 else 0)
    # The workspace Python allocates holds the splits' sums.
    ws = _tsm2_ext.workspace_bytes(dtype, TSM2R, 1, m, k, n, 132, 90, SMEM)
    assert ws >= plan["workspace_bytes"]


def test_a_smaller_gpu_splits_more():
    big = _tsm2_ext.row_stream_plan("float32", 20000, 20000, 8, sm_count=132, smem_optin=SMEM)
    small = _tsm2_ext.row_stream_plan("float32", 20000, 20000, 8, sm_count=46, smem_optin=99 * 1024)
    assert small["k_chunk"] < big["k_chunk"] and small["splits"] > big["splits"]
    assert small["blocks"] <= 46


def test_the_model_predicts_the_row_stream():
    p = tile_prediction(
        Problem(None, 20000, 20000, 8), "float32", "nn", "tsm2r", H100_SXM, CALIBRATION
    )
    assert p.params["tile"] == "row stream"
    # At least the bytes at the read ceiling; a batch runs the row tile.
    assert p.seconds >= 20000 * 20000 * 4 / H100_SXM.bandwidth(CALIBRATION)
    batched = tile_prediction(
        Problem(2, 20000, 20000, 8), "float32", "nn", "tsm2r", H100_SXM, CALIBRATION
    )
    assert batched.params["tile"] == "R"
    assert np.isfinite(batched.seconds)

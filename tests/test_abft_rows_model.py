"""The fused row check's threshold (jax_tsm2.abft_model.row_model_vector / row_threshold, the
model of ffi/abft/row_check.h) on CPU, against products computed as the row stream computes
them: C and each row's checksum A_i . fl(B 1) summed in the accumulation dtype, the
magnitudes in float64.

No clean row of any kind of data is flagged, and the threshold stays tight enough to catch an
error of a few thousandths of a row's largest entry on normal data. tests/test_gpu_abft_rows.py
runs the same check through the CUDA kernels.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from _abft_reference import CLEAN_KINDS, random_operands

from jax_tsm2 import abft_model


def _row_check(a, b, dtype):
    """(residual, threshold, C) of every row, as the kernels compute them: the weighted row
    sums of B in f64, split into their accumulation-dtype rounding and the rest, and every
    dot product in the accumulation dtype."""
    acc = np.float64 if dtype == jnp.float64 else np.float32
    a, b = np.asarray(a.astype(acc)), np.asarray(b.astype(acc))
    w = np.asarray(abft_model.column_weights(jnp.asarray(b), acc)).astype(np.float64)
    c = (a @ b).astype(acc)
    bw = b.astype(np.float64) * w
    s = bw.sum(axis=1)
    s_hi = s.astype(acc)
    s_lo = (s - s_hi.astype(np.float64)).astype(acc)
    ch = (a @ s_hi).astype(np.float64) + (a @ s_lo).astype(np.float64)
    a64 = a.astype(np.float64)
    abs1 = np.abs(a64) @ np.abs(bw).sum(axis=1)
    abs_ch = np.abs(a64) @ np.abs(s)
    sq = (a64 * a64) @ ((bw * bw).sum(axis=1) + s * s)
    cw = c.astype(np.float64) * w
    model = abft_model.row_model_vector(dtype, *a.shape, b.shape[1], flush=False)
    c_abs, c_sq = np.abs(cw).sum(1), (cw * cw).sum(1)
    t = abft_model.row_threshold(
        model, abs1, abs_ch, sq, c_abs, c_sq, ch, np.maximum(w, 1).sum() + 2
    )
    return cw.sum(1) - ch, t, c.astype(np.float64)


@pytest.mark.parametrize("kind", CLEAN_KINDS)
@pytest.mark.parametrize("dtype", (jnp.float32, jnp.float64, jnp.bfloat16), ids=str)
@pytest.mark.parametrize(("m", "k", "n"), [(257, 64, 1), (100, 300, 6), (33, 1031, 14)])
def test_no_clean_row_is_flagged(kind, dtype, m, k, n):
    rng = np.random.default_rng(m * 31 + k * 7 + n)
    worst = 0.0
    for _ in range(4):
        a, b = random_operands(rng, kind, 1, m, k, n, dtype)
        r, t, _ = _row_check(a[0], b[0], dtype)
        # Near overflow the magnitudes may overflow: an infinite threshold checks finiteness.
        assert np.all(t > 0) and (kind == "overflow" or np.all(np.isfinite(t))), kind
        worst = max(worst, float(np.max(np.abs(r) / np.maximum(t, 1e-300))))
    assert worst <= 0.5, f"{kind}: a clean residual reached {worst:.3f} of its threshold"


@pytest.mark.parametrize("dtype", (jnp.float32, jnp.float64), ids=str)
def test_the_threshold_catches_errors_of_a_thousandth_of_a_row(dtype):
    rng = np.random.default_rng(7)
    a, b = random_operands(rng, "normal", 1, 512, 4096, 8, dtype)
    r, t, c = _row_check(a[0], b[0], dtype)
    rel = t / np.abs(c).max(axis=1)
    assert np.median(rel) < 1e-3, np.median(rel)
    # An error of twice the threshold in any entry of a row is caught.
    assert np.all(np.abs(r + 2 * t) > t)

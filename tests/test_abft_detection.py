"""ABFT detection against its bars, on this process's default device (tests/test_gpu_abft.py
runs the same on the GPU).

- No false positive over clean random products of every dtype and of every kind in
  ``CLEAN_KINDS`` (normal, uniform, heavy-tailed, rows and columns over many binades,
  ill-conditioned, near underflow and overflow, constant, duplicated rows, few distinct
  values), sizes from 1 to 4096, mostly small: a few thousand per dtype by default, 100,000
  per dtype in the ``slow`` test (``pytest -m slow``).
- Every single error of at least ``1e-3`` (f32, f64) or ``1e-1`` (bf16, f16) times the largest
  entry of its column is detected, located and corrected, in well-conditioned products
  (``DETECT_KINDS``) of up to 300 rows, each checked as ``abft_matmul`` checks it: bf16/f16
  products as their f32 sums (``abft.checked_dtype``; see docs/abft.md for the limits of a
  check after the rounding).
- A bit flipped inside the pass over C (``abft_matmul(..., inject=...)``) is caught end to end.

Products are batched through one ``jax.jit(jax.vmap(...))`` per shape.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _abft_reference import CLEAN_KINDS, DETECT_KINDS, random_operands
from _helpers import as_f64, slow

from jax_tsm2 import abft

DTYPES = {"f32": jnp.float32, "f64": jnp.float64, "bf16": jnp.bfloat16, "f16": jnp.float16}
# (m, k, n) of the false-positive runs: mostly small, a prime past a tile, a long column, a
# long row, and the largest (with fewer products).
SMALL_SHAPES = [(1, 1, 1), (7, 5, 3), (37, 90, 5), (64, 64, 8), (129, 33, 2), (300, 257, 4)]
LARGE_SHAPES = [(4096, 64, 3), (64, 4096, 3), (1024, 1024, 4)]
HUGE_SHAPE = (4096, 4096, 2)
# The smallest error (relative to its column's largest entry) the bar asks to catch, and the
# column lengths it is asked of.
DETECT = {"f32": (1e-3, 300), "f64": (1e-3, 300), "f16": (1e-1, 300), "bf16": (1e-1, 300)}


def precision_for(dtype):
    """f32 at full precision on GPUs: at XLA's default precision the product's inputs are
    rounded to TF32, whose 2^-11 is already above 1e-3 over a column sum."""
    return jax.lax.Precision.HIGHEST if dtype == jnp.float32 else None


def clean_verdicts(rng, dtype, shape, per_kind: int, chunk: int = 2**22):
    """Runs abft_matmul on per_kind products of every kind of one shape; returns (products,
    flagged products, what went wrong in the first flagged one)."""
    m, k, n = shape
    run = jax.jit(jax.vmap(lambda a, b: abft.abft_matmul(a, b, precision=precision_for(dtype))))
    batch = max(1, min(per_kind, chunk // max(m * k + k * n, 1)))
    total, flagged, first = 0, 0, None
    for kind in CLEAN_KINDS:
        done = 0
        while done < per_kind:
            size = min(batch, per_kind - done)
            a, b = random_operands(rng, kind, size, m, k, n, dtype)
            c, v = run(a, b)
            bad = np.asarray(v.errors_detected) != 0
            total += size
            flagged += int(bad.sum())
            if bad.any() and first is None:
                at = int(np.argmax(bad))
                first = (kind, shape, int(v.col[at]), float(v.magnitude[at]))
            ok = np.isfinite(as_f64(c)).all(axis=(1, 2))
            assert ok.all(), (kind, shape, "a clean product came out non-finite")
            done += size
    return total, flagged, first


def false_positive_run(dtype, products: int, seed: int):
    rng = np.random.default_rng(seed)
    kinds = len(CLEAN_KINDS)
    small = math.ceil(products / (kinds * len(SMALL_SHAPES)))
    large = max(1, products // 10_000)
    runs = [(s, small) for s in SMALL_SHAPES] + [(s, large) for s in LARGE_SHAPES]
    runs.append((HUGE_SHAPE, 1))
    total, flagged, first = 0, 0, None
    for shape, per_kind in runs:
        t, f, w = clean_verdicts(rng, dtype, shape, per_kind)
        total, flagged, first = total + t, flagged + f, first or w
    return total, flagged, first


# Slow: test_abft.py's default run takes 1,000 clean bf16 products, this one 2,000 of each.
@pytest.mark.parametrize("name", [slow("f32"), slow("f64"), slow("bf16"), slow("f16")])
def test_no_false_positive_over_thousands_of_clean_products(name):
    total, flagged, first = false_positive_run(DTYPES[name], 2_000, seed=20)
    assert total >= 2_000
    assert flagged == 0, f"{flagged} of {total} clean products flagged; first: {first}"


@pytest.mark.slow
@pytest.mark.parametrize("name", list(DTYPES))
def test_no_false_positive_over_100000_clean_products(name, request):
    if "slow" not in (request.config.option.markexpr or ""):
        pytest.skip("100,000 products per dtype: run with -m slow")
    total, flagged, first = false_positive_run(DTYPES[name], 100_000, seed=21)
    assert total >= 100_000
    assert flagged == 0, f"{flagged} of {total} clean products flagged; first: {first}"


def detection_case(rng, dtype, kind, batch, m, k, n, smallest):
    """Operands, fault positions and signed fault sizes (from ``smallest`` to 1000x that, a
    quarter exactly ``smallest``, relative to the largest entry of the faulty column). The
    fault is added in the dtype C is checked in, whose rounding of the faulty entry may take
    up to ``u`` of it off the fault: the sizes asked for allow for that, so that every fault
    is at least ``smallest`` as injected."""
    a, b = random_operands(rng, kind, batch, m, k, n, dtype)
    i = jnp.asarray(rng.integers(0, m, batch))
    j = jnp.asarray(rng.integers(0, n, batch))
    rel = smallest * 10.0 ** rng.uniform(0, 3, batch)
    rel[: batch // 4] = smallest
    u = float(jnp.finfo(abft.checked_dtype(dtype)).eps) / 2
    rel = (rel + u * (1 + rel)) / (1 - u)
    sign = rng.choice([-1.0, 1.0], batch)
    return a, b, i, j, jnp.asarray(rel * sign)


def run_detection(a, b, i, j, rel, dtype):
    """Injects ``rel * max|C[:, j]|`` at ``(i, j)`` of each clean product, as ``abft_matmul``
    computes it (in ``checked_dtype``), and checks it."""
    prec = precision_for(dtype)
    checked = abft.checked_dtype(dtype)

    def case(a, b, i, j, rel):
        cs = abft.encode(a, b, precision=prec, out_dtype=checked)
        clean = jnp.matmul(a, b, precision=prec, preferred_element_type=checked)
        acc = cs.stats.dtype
        col_max = jnp.max(jnp.abs(clean.astype(acc)), axis=0)[j]
        bad = abft.inject_error(clean, i, j, rel.astype(acc) * col_max)
        injected = bad[i, j].astype(acc) - clean[i, j].astype(acc)
        fixed, v = abft.check(bad, cs, a=a, b=b)
        return clean, fixed, v, injected / col_max

    return jax.jit(jax.vmap(case))(a, b, i, j, rel)


def _detection_cases():
    """Every dtype with every kind; the default run takes each dtype on the first kind."""
    for name in DTYPES:
        for kind in DETECT_KINDS:
            quick = kind == DETECT_KINDS[0]
            yield (name, kind) if quick else slow(name, kind)


@pytest.mark.parametrize(("name", "kind"), list(_detection_cases()))
def test_single_errors_above_the_bar_are_detected_located_and_corrected(name, kind):
    check_detection(name, kind, shapes=4)


def check_detection(name: str, kind: str, shapes: int) -> None:
    """``shapes`` random shapes of ``kind`` within the bar's reach, 64 faults each."""
    dtype = DTYPES[name]
    checked = abft.checked_dtype(dtype)
    smallest, max_rows = DETECT[name]
    rng = np.random.default_rng(30 + list(DTYPES).index(name) + 7 * DETECT_KINDS.index(kind))
    for _ in range(shapes):
        m, k, n = (
            int(rng.integers(1, max_rows + 1)),
            int(rng.integers(1, 301)),
            1 + int(rng.integers(0, 8)),
        )
        a, b, i, j, rel = detection_case(rng, dtype, kind, 64, m, k, n, smallest)
        clean, fixed, v, realized = run_detection(a, b, i, j, rel, dtype)
        # The fault as the dtype rounded it: at least the bar.
        assert (np.abs(np.asarray(realized)) >= smallest * (1 - 1e-6)).all()
        where = f"{name} {kind} {(m, k, n)}"
        assert (np.asarray(v.errors_detected) >= 1).all(), where
        np.testing.assert_array_equal(v.row, i, err_msg=where)
        np.testing.assert_array_equal(v.col, j, err_msg=where)
        assert np.asarray(v.corrected).all() and not np.asarray(v.uncorrectable).any(), where
        # The repaired column is the recomputation: within the product's own rounding.
        jj = np.asarray(j)[:, None, None]
        got, want = (np.take_along_axis(as_f64(x), jj, axis=2) for x in (fixed, clean))
        scale = np.take_along_axis(np.abs(as_f64(a)) @ np.abs(as_f64(b)), jj, axis=2)
        eps = (k + 2) * float(jnp.finfo(jnp.float32).eps) + float(jnp.finfo(checked).eps)
        assert (np.abs(got - want) <= 2 * eps * scale + 1e-300).all(), where


def test_a_fault_of_a_thousandth_in_long_uncancelled_f32_sums_is_caught():
    """Positive data, columns of 1024 rows and k = 256: no term cancels, so the threshold
    carries the coherent-drift allowance in full, and a fault of 1.1e-3 of the column's largest
    entry must still clear it (the allowance is a repeated term's sharp drift, (k + 2) / 4 u
    of |C|, not a whole u per step)."""
    rng = np.random.default_rng(50)
    m, k, n = 1024, 256, 2
    a, b, i, j, _ = detection_case(rng, jnp.float32, "uniform_pos", 16, m, k, n, 1e-3)
    u = float(jnp.finfo(jnp.float32).eps) / 2
    rel = jnp.asarray((1.1e-3 + u * (1 + 1.1e-3)) / (1 - u) * rng.choice([-1.0, 1.0], 16))
    clean, fixed, v, realized = run_detection(a, b, i, j, rel, jnp.float32)
    assert (np.abs(np.asarray(realized)) >= 1.1e-3 * (1 - 1e-6)).all()
    assert (np.asarray(v.errors_detected) >= 1).all(), np.asarray(v.errors_detected)
    np.testing.assert_array_equal(v.row, i)
    np.testing.assert_array_equal(v.col, j)
    assert np.asarray(v.corrected).all() and not np.asarray(v.uncorrectable).any()
    jj = np.asarray(j)[:, None, None]
    got, want = (np.take_along_axis(as_f64(x), jj, axis=2) for x in (fixed, clean))
    scale = np.take_along_axis(np.abs(as_f64(a)) @ np.abs(as_f64(b)), jj, axis=2)
    assert (np.abs(got - want) <= 2 * (k + 2) * 2 * u * scale).all()
    # With room to spare: the threshold is below 0.9e-3 of the column's largest entry.
    cs = abft.encode(a[0], b[0], precision=precision_for(jnp.float32))
    t = abft.verify(clean[0], cs).col_threshold
    col_max = np.abs(as_f64(clean[0])).max(axis=0)
    assert (np.asarray(t) < 0.9e-3 * col_max).all(), np.asarray(t) / col_max


# ---------------------------------------------------------------------------------------------
# a fault inside the kernel: abft_matmul(..., inject=(row, col, bit))


def flipped(value: float, dtype, bit: int) -> float:
    x = np.asarray([value], dtype=np.dtype(dtype))
    ints = x.view(f"u{x.dtype.itemsize}")
    ints ^= np.asarray(1 << bit, ints.dtype)
    return float(ints.view(x.dtype)[0].astype(np.float64))


@pytest.mark.parametrize("name", list(DTYPES))
def test_a_bit_flipped_inside_the_pass_over_c_is_caught(name):
    """Bits of the exponent and the top of the mantissa of a random entry: each changes it by
    far more than its column's threshold, and is detected, located and repaired; the
    product returned is the clean one (up to the recomputation's rounding). bf16/f16
    products are checked as their f32 sums (``checked_dtype``), so the bits are the f32
    value's."""
    dtype = DTYPES[name]
    checked = abft.checked_dtype(dtype)
    bits = 8 * checked.itemsize
    mant = {4: 23, 8: 52}[checked.itemsize]
    rng = np.random.default_rng(40)
    m, k, n = 37, 64, 6
    a, b = random_operands(rng, "normal", 1, m, k, n, dtype)
    a, b = a[0], b[0]
    prec = precision_for(dtype)
    clean = jnp.matmul(a, b, precision=prec, preferred_element_type=checked)
    cs = abft.encode(a, b, precision=prec, out_dtype=checked)
    t = abft.verify(clean, cs).col_threshold
    for bit in (bits - 2, bits - 3, mant - 1, mant - 2):  # exponent's top two, mantissa's
        row, col = int(rng.integers(0, m)), int(rng.integers(0, n))
        old = float(as_f64(clean)[row, col])
        change = abs(flipped(old, checked, bit) - old)
        c, v = abft.abft_matmul(a, b, precision=prec, inject=(row, col, bit))
        if not change > 2 * float(t[col]):
            continue  # a flip this small is below what the check promises to see
        assert int(v.errors_detected) >= 1 and bool(v.corrected), (bit, v)
        assert (int(v.row), int(v.col)) == (row, col), (bit, v)
        want = as_f64(clean.astype(dtype))
        np.testing.assert_allclose(as_f64(c), want, rtol=1e-2, atol=1e-2 * abs(old))
    # An entry in [1, 2) has every exponent bit but the top one set: flipping that one makes
    # it infinite or NaN, which the recomputation replaces too.
    ones = np.argwhere((np.abs(as_f64(clean)) >= 1) & (np.abs(as_f64(clean)) < 2))
    if len(ones):
        row, col = (int(x) for x in ones[0])
        c, v = abft.abft_matmul(a, b, precision=prec, inject=(row, col, bits - 2))
        assert (int(v.row), int(v.col)) == (row, col) and bool(v.corrected), v
        assert np.isfinite(as_f64(c)).all()


def test_injection_is_checked_and_compiled_only_when_asked():
    a, b = jnp.ones((8, 4)), jnp.ones((4, 3))
    with pytest.raises(ValueError, match="0 <= row < 8"):
        abft.abft_matmul(a, b, inject=(8, 0, 0))
    with pytest.raises(ValueError, match="0 <= bit < 64"):
        abft.abft_matmul(a, b, inject=(0, 0, 64))
    with pytest.raises(TypeError, match="row, col, bit"):
        abft.abft_matmul(a, b, inject=(0, 0))
    text = jax.jit(abft.abft_matmul).lower(a, b).as_text()
    assert "tsm2_abft_verify_inject" not in text
    text = jax.jit(lambda x, y: abft.abft_matmul(x, y, inject=(1, 2, 3))).lower(a, b).as_text()
    assert "tsm2_abft_verify_inject" in text

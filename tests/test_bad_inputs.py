"""Property-based tests: bad (and odd) inputs across the public API.

Each property draws arguments a user could pass, good and bad, and accepts one of two
outcomes: the documented result, or an actionable exception (TypeError or ValueError,
with a message; for command lines, the usage line and exit status 2). Anything else (a
crash, another exception type, a silently wrong answer) fails. Examples are few and the
shapes small (the "ci" hypothesis profile, conftest.py): the module runs in seconds.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from jax import lax

import jax_tsm2
from jax_tsm2 import _compat, abft, model, routing
from jax_tsm2.bench import cli as bench_cli
from jax_tsm2.clustering import KMeans, kmeans
from jax_tsm2.clustering import __main__ as kmeans_cli
from jax_tsm2.tune import cache
from jax_tsm2.tune import cli as tune_cli

ACTIONABLE = (TypeError, ValueError)

DTYPES = [jnp.float32, jnp.float64, jnp.bfloat16, jnp.float16, jnp.int32, jnp.bool_, jnp.complex64]
PRECISIONS = [None, "highest", "default", lax.Precision.HIGHEST, ("highest", "default"), "bogus", 3]
MODES = ["auto", "prefer", "always", "never"]

shapes = st.lists(st.integers(0, 4), min_size=0, max_size=4).map(tuple)


def _outcome(f, *args, **kwargs):
    """``("ok", result)`` or ``("error", exception type)``."""
    try:
        return "ok", f(*args, **kwargs)
    except Exception as err:  # compared below: same type as the reference, or actionable
        return "error", type(err)


def _assert_same(got, want):
    assert got[0] == want[0], (got, want)
    if got[0] == "error":
        assert got[1] is want[1], (got, want)
        return
    g, w = got[1], want[1]
    assert g.shape == w.shape and g.dtype == w.dtype and g.weak_type == w.weak_type
    g64, w64 = np.asarray(g, np.complex128), np.asarray(w, np.complex128)
    np.testing.assert_allclose(g64, w64, rtol=2e-2 if g.dtype.itemsize <= 2 else 1e-5, atol=1e-5)


def _operand(data, shape, dtype):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    x = rng.uniform(-2, 2, shape)
    return jnp.asarray(x).astype(dtype)


@given(
    data=st.data(),
    a_shape=shapes,
    b_shape=shapes,
    dtypes=st.tuples(st.sampled_from(DTYPES), st.sampled_from(DTYPES)),
    precision=st.sampled_from(PRECISIONS),
    mode=st.sampled_from(MODES),
)
def test_matmul_does_what_jnp_matmul_does(data, a_shape, b_shape, dtypes, precision, mode):
    a, b = _operand(data, a_shape, dtypes[0]), _operand(data, b_shape, dtypes[1])
    with jax_tsm2.custom_call_mode(mode):
        got = _outcome(jax_tsm2.matmul, a, b, precision=precision)
    _assert_same(got, _outcome(jnp.matmul, a, b, precision=precision))


dim_lists = st.lists(st.integers(-3, 4), max_size=3).map(tuple)


@given(
    data=st.data(),
    a_shape=shapes,
    b_shape=shapes,
    dims=st.tuples(dim_lists, dim_lists, dim_lists, dim_lists),
    dtype=st.sampled_from(DTYPES[:4]),
    mode=st.sampled_from(MODES),
)
def test_dot_general_does_what_lax_does(data, a_shape, b_shape, dims, dtype, mode):
    a, b = _operand(data, a_shape, dtype), _operand(data, b_shape, dtype)
    dn = ((dims[0], dims[1]), (dims[2], dims[3]))
    with jax_tsm2.custom_call_mode(mode):
        got = _outcome(jax_tsm2.dot_general, a, b, dn)
    want = _outcome(lax.dot_general, a, b, dn)
    if want[0] == "error":  # lax's own type, or ours where we check first: actionable
        assert got[0] == "error" and issubclass(got[1], ACTIONABLE), got
        return
    _assert_same(got, want)


odd_sizes = st.one_of(
    st.integers(-5, 70000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.text(max_size=3),
    st.none(),
)


@st.composite
def operand_shapes(draw):
    """Shapes of a product in a drawn layout, sometimes with one size made odd."""
    m, k, n = (draw(st.integers(0, 70000)) for _ in range(3))
    layout = draw(st.sampled_from(["nn", "nt", "tn", "xx", None]))
    a = [k, m] if layout == "tn" else [m, k]
    b = [n, k] if layout == "nt" else [k, n]
    if draw(st.booleans()):
        a.insert(0, draw(st.integers(1, 3)))
    if draw(st.integers(0, 2)) == 0:
        x = draw(st.sampled_from([a, b]))
        x[draw(st.integers(0, len(x) - 1))] = draw(odd_sizes)
    if draw(st.integers(0, 5)) == 0:
        x = draw(st.sampled_from([a, b]))
        x.append(1) if draw(st.booleans()) else x.clear()
    return a, b, layout


@given(
    shapes_layout=operand_shapes(),
    dtype=st.sampled_from([*DTYPES, "float32", "f99", None]),
    mode=st.sampled_from([*MODES, "fast", 1, None]),
    precision=st.sampled_from(PRECISIONS),
    platform=st.sampled_from(["cuda", "cpu", "tpu"]),
)
def test_explain_answers_exactly_when_its_arguments_are_valid(
    shapes_layout, dtype, mode, precision, platform
):
    a, b, layout = shapes_layout
    kw = {"dtype": dtype, "mode": mode, "precision": precision, "platform": platform}
    if layout is not None:
        kw["layout"] = layout
    valid = (
        (mode is None or mode in MODES)
        and dtype is not None
        and _outcome(jnp.dtype, dtype)[0] == "ok"
        and _outcome(_compat.canonicalize_precision, precision)[0] == "ok"
        and _outcome(routing.problem_of, a, b, layout or "nn")[0] == "ok"
    )
    try:
        e = jax_tsm2.explain(a, b, device=model.H100_SXM, show=False, **kw)
    except ACTIONABLE as err:
        assert not valid and str(err), (type(err), err)
        return
    assert valid
    assert e.path in ("tsm2r", "tsm2l", "tsm2s", "tsm2t", "xla")
    assert e.predicted.seconds >= 0 and str(e)


@pytest.mark.slow  # op-by-op compilation per example; test_abft.py covers the range by default
@given(
    rows=st.sampled_from([1, 7, 37]),
    k=st.sampled_from([1, 5, 64]),
    cols=st.sampled_from([1, 3]),
    dtype=st.sampled_from([jnp.float32, jnp.float64, jnp.bfloat16, jnp.float16]),
    exponents=st.tuples(st.integers(-160, 160), st.integers(-160, 160)),
    seed=st.integers(0, 2**16),
)
def test_abft_never_flags_a_clean_finite_product(rows, k, cols, dtype, exponents, seed):
    """Magnitudes anywhere in the dtype's range, either operand: where C is finite, the
    verdict is clean and C is jnp's."""
    info = jnp.finfo(dtype)
    lo, hi = math.log2(float(info.tiny)), math.log2(float(info.max))
    ea, eb = (float(np.clip(e, lo / 2, hi / 2)) for e in exponents)
    rng = np.random.default_rng(seed)
    sign = lambda shape: rng.choice(np.array([-1.0, 1.0]), shape)
    a = jnp.asarray(2.0**ea * rng.uniform(0.5, 1.5, (rows, k)) * sign((rows, k)), dtype)
    b = jnp.asarray(2.0**eb * rng.uniform(0.5, 1.5, (k, cols)) * sign((k, cols)), dtype)
    c, v = abft.abft_matmul(a, b)
    assume(bool(jnp.isfinite(c).all()))
    assert int(v.errors_detected) == 0 and int(v.col) == -1, (float(v.magnitude), ea, eb)
    np.testing.assert_array_equal(np.asarray(c, np.float64), np.asarray(a @ b, np.float64))


@given(
    a_shape=shapes,
    b_shape=shapes,
    dtype=st.sampled_from(DTYPES),
)
def test_abft_rejects_what_it_cannot_check(a_shape, b_shape, dtype):
    a, b = jnp.ones(a_shape, dtype), jnp.ones(b_shape, dtype)
    try:
        c, v = abft.abft_matmul(a, b)
    except ACTIONABLE as err:
        assert str(err)
        return
    assert len(a_shape) == len(b_shape) == 2 and a_shape[1] == b_shape[0]
    assert c.shape == (a_shape[0], b_shape[1]) and int(v.errors_detected) == 0


values = st.sampled_from([0.0, 1.0, -2.5, 1e30, np.nan, np.inf, -np.inf])


@settings(max_examples=10)
@given(
    n=st.sampled_from([4, 9]),
    d=st.sampled_from([0, 2]),
    k=st.sampled_from([1, 3, 12, 0, -1, 2.0, True, np.int64(2), "3"]),
    bad=st.lists(st.tuples(st.integers(0, 8), st.integers(0, 1), values), max_size=2),
    weights=st.sampled_from([None, "ones", "negative", "zeros", "nan", "some-zero"]),
    estimator=st.booleans(),
)
def test_kmeans_clusters_or_raises_scikit_learns_errors(n, d, k, bad, weights, estimator):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, d))
    for i, j, v in bad:
        if i < n and j < d:
            x[i, j] = v
    w = {
        None: None,
        "ones": np.ones(n),
        "negative": -np.ones(n),
        "zeros": np.zeros(n),
        "nan": np.full(n, np.nan),
        "some-zero": np.where(np.arange(n) % 2 == 0, 0.0, 1.0),
    }[weights]
    try:
        if estimator:
            km = KMeans(k, random_state=0, max_iter=20).fit(x, sample_weight=w)
            centres, labels, inertia = km.cluster_centers_, km.labels_, km.inertia_
        else:
            s = kmeans(jax.random.key(0), x, k, max_iter=20, sample_weight=w)
            centres, labels, inertia = s.centroids, s.labels, float(s.inertia)
    except ValueError as err:
        assert str(err)
        return
    # Accepted: then everything was valid, and the result is finite and consistent.
    assert np.isfinite(x).all() and d > 0 and weights in (None, "ones", "some-zero")
    kk = int(k)
    assert 1 <= kk <= n and not isinstance(k, (bool, float, str))
    assert centres.shape == (kk, d) and np.isfinite(np.asarray(centres)).all()
    assert labels.shape == (n,) and ((labels >= 0) & (labels < kk)).all()
    assert math.isfinite(inertia) and inertia >= 0


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=8)
    | st.sampled_from(["tsm2r", "xla", "float32/nn/1/10/8/8", cache.SCHEMA]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=20), inner),
    max_leaves=20,
)


@given(
    doc=json_values,
    shape=st.fixed_dictionaries(
        {
            "schema": st.sampled_from([cache.SCHEMA, "other", 3]),
            "version": st.sampled_from([cache.VERSION, 2, "1", None]),
            "entries": json_values,
            "measured_read_bytes_per_s": json_values,
        }
    ),
    raw=st.binary(max_size=64),
    nasty=st.sampled_from(
        [
            "[" * 100_000 + "]" * 100_000,  # past the parser's recursion limit
            '{"a": ' * 50_000 + "1" + "}" * 50_000,
            '{"schema": "jax_tsm2.tune", "version": ' + "9" * 5000 + "}",  # past int digits
            '{"schema": "jax_tsm2.tune", "version": 1e999}',
            "NaN",
            "\ufeff{}",
        ]
    ),
    which=st.sampled_from(["json", "shaped", "bytes", "nasty"]),
)
def test_the_tune_cache_answers_none_or_a_target_whatever_the_file(doc, shape, raw, nasty, which):
    key = model.H100_SXM.key
    path = cache.cache_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    if which == "bytes":
        path.write_bytes(raw)
    elif which == "nasty":
        path.write_text(nasty)
    elif which == "json":
        path.write_text(json.dumps(doc))
    else:
        shaped = dict(shape, device={"key": key})
        path.write_text(json.dumps(shaped))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        got = cache.lookup(key, "float32", "nn", None, 10, 8, 8)
        bw = cache.measured_bandwidth(key)
    assert got in (None, "tsm2r", "tsm2l", "tsm2s", "xla")
    assert bw is None or (isinstance(bw, (int, float)) and 0 < bw < math.inf)
    assert all(issubclass(w.category, RuntimeWarning) for w in seen)


words = st.sampled_from(
    ["0", "-1", "1", "7", "1e7", "2.5", "nan", "inf", "x", "", "f32", "bf16", "nn", "tn", "zz",
     "1x2x3", "1e400x1x1", "R:8x8x8", "R:0x1x1", "digits", "/dev/null/x", ","]
)  # fmt: skip
PARSERS = {
    "tune": (tune_cli.parser, ["--shapes", "--dtype", "--layout", "--max-reps", "--samples",
                               "--cache-dir", "--dry-run"]),
    "bench": (bench_cli.parser, ["--family", "--dtype", "--m", "--case", "--impl", "--repeats",
                                 "--warmup", "--target-ms", "--mem-fraction", "--time-budget",
                                 "--grid", "--grid-seed", "--tiny"]),
    "kmeans": (kmeans_cli.parser, ["--dataset", "--generate", "--k", "--init", "--max-iter",
                                   "--tol", "--seed", "--dtype"]),
}  # fmt: skip


@given(
    name=st.sampled_from(list(PARSERS)),
    argv=st.lists(st.tuples(st.integers(0, 12), words), max_size=4),
)
def test_command_lines_parse_or_answer_with_usage_and_status_2(name, argv):
    make, flags = PARSERS[name]
    args = [x for i, w in argv for x in (flags[i % len(flags)], w)]
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            make().parse_args(args)
        except SystemExit as exit_:
            assert exit_.code == 2 and err.getvalue().startswith("usage:"), err.getvalue()


@pytest.mark.parametrize("name", list(PARSERS))
def test_the_parsers_take_their_documented_examples(name):
    examples = {
        "tune": ["--shapes", "20480x20480x8,1e7x8x8", "--dtype", "f32,bf16", "--layout", "nn"],
        "bench": ["--family", "R,L", "--dtype", "f32", "--tiny", "--repeats", "3"],
        "kmeans": ["--generate", "200000,64,16", "--dtype", "float32"],
    }
    PARSERS[name][0]().parse_args(examples[name])

"""The benchmark harness (jax_tsm2.bench): end to end on CPU with tiny shapes, plus its parts.

The end-to-end runs call ``main`` in-process (a few seconds) and check the JSON schema that
other tools read (docs/harness.md) and the markdown table. ``jax_tsm2.matmul`` is
monkeypatched only where a test needs a wrong implementation, or if it does not exist yet.
"""

from __future__ import annotations

import json
import re
import statistics
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_tsm2
from jax_tsm2.bench import case, cli, report, suite, timing
from jax_tsm2.bench.runner import Options, run_suite

TOP_LEVEL = {
    "schema": str,
    "schema_version": int,
    "gpu": str,
    "platform": str,
    "date": str,
    "command_line": str,
    "versions": dict,
    "device": dict,
    "ceilings": dict,
    "impls": dict,
    "impls_skipped": dict,
    "options": dict,
    "summary": dict,
    "records": list,
}
RECORD_REQUIRED = {
    "family": str,
    "case": str,
    "dtype": str,
    "m": int,
    "k": int,
    "n": int,
    "impl": str,
    "status": str,
    "bytes": int,
    "flops": int,
    "gpu": str,
    "date": str,
}
RECORD_NULLABLE_NUMBERS = (
    "seconds",
    "ceiling_bytes_per_s",
    "gbps",
    "gflops",
    "pct_of_ceiling",
    "rel_error",
    "tolerance",
)


@pytest.fixture
def ensure_matmul(monkeypatch):
    """Until jax_tsm2.matmul exists, stand in jnp.matmul (tests only; never the harness)."""
    if not callable(getattr(jax_tsm2, "matmul", None)):
        monkeypatch.setattr(jax_tsm2, "matmul", jnp.matmul, raising=False)


def _tiny_opts(**kw) -> Options:
    base = dict(mode="tiny", dtypes=["f32"], repeats=1, warmup=0, max_calls=2)
    return Options(**{**base, **kw})


def test_end_to_end_cpu_json_and_markdown(tmp_path, capsys, ensure_matmul):
    pytest.importorskip("matplotlib")
    argv = ["--tiny", "--case", "R:96x320x16,L:1000x8x8", "--dtype", "f32,bf16"]
    argv += ["--repeats", "2", "--out", str(tmp_path), "--plot"]
    assert cli.main(argv) == 0
    printed = capsys.readouterr()
    assert "tsm2 GB/s" in printed.out and "96x320x16" in printed.out
    assert "[1/4]" in printed.err  # progress, one line per case, on stderr

    doc = json.loads((tmp_path / "bench.json").read_text())
    for key, kind in TOP_LEVEL.items():
        assert isinstance(doc[key], kind), key
    assert doc["schema"] == "jax_tsm2.bench" and doc["schema_version"] == 2
    if doc["platform"] == "cpu":
        assert doc["ceilings"]["read_bytes_per_s"] is None
        assert "torch" in doc["impls_skipped"]
    assert set(doc["impls"]) >= {"tsm2", "jnp", "jnp_highest"}

    records = doc["records"]
    cases = {(r["case"], r["dtype"]) for r in records}
    assert cases == {(c, d) for c in ("R:96x320x16", "L:1000x8x8") for d in ("f32", "bf16")}
    for rec in records:
        for key, kind in RECORD_REQUIRED.items():
            assert isinstance(rec[key], kind), (key, rec)
        for key in RECORD_NULLABLE_NUMBERS:
            assert rec[key] is None or isinstance(rec[key], int | float), (key, rec)
        assert rec["bytes"] == (rec["m"] * rec["k"] + rec["k"] * rec["n"] + rec["m"] * rec["n"]) * (
            4 if rec["dtype"] == "f32" else 2
        )
        if rec["impl"] in ("tsm2", "jnp", "jnp_highest"):
            assert rec["status"] == "ok", rec
            assert rec["seconds"] > 0 and rec["gbps"] > 0
            assert rec["rel_error"] <= rec["tolerance"]
            assert rec["calls"] >= 1 and rec["per_sample"] >= 1
            assert rec["seconds_isolated"] > 0
            assert rec["route"] in ("xla", "tsm2r", "tsm2l")
        if rec["impl"] == "tsm2":
            assert set(rec["speedup_over"]) >= {"jnp", "jnp_highest"}
        elif rec["status"] == "ok":
            assert rec["tsm2_speedup"] > 0
    assert doc["summary"]["geomean_tsm2_speedup"]["jnp"]["cases"] == 4

    md = (tmp_path / "bench.md").read_text()
    assert md.startswith("# jax_tsm2 benchmark")
    assert "| family | case | dtype | MB |" in md
    assert md.count("| R | 96x320x16 |") == 2 and md.count("| L | 1000x8x8 |") == 2
    assert (tmp_path / "roofline.png").stat().st_size > 1000

    merged = tmp_path / "merged"
    first = str(tmp_path / "bench.json")
    assert cli.main(["--merge", first, first, "--out", str(merged)]) == 0
    both = json.loads((merged / "bench.json").read_text())
    assert len(both["records"]) == 2 * len(records) and len(both["merged_from"]) == 2
    assert both["summary"]["geomean_tsm2_speedup"]["jnp"]["cases"] == 8


def test_wrong_implementation_is_reported_not_timed(monkeypatch):
    monkeypatch.setattr(jax_tsm2, "matmul", lambda a, b: jnp.matmul(a, b) * 1.1, raising=False)
    doc = run_suite(_tiny_opts(cases=["L:1000x8x8"], impls=["tsm2", "jnp"]), log=lambda _: None)
    recs = {r["impl"]: r for r in doc["records"]}
    assert recs["tsm2"]["status"] == "failed-check"
    assert recs["tsm2"]["seconds"] is None and recs["tsm2"]["rel_error"] > 5e-2
    assert recs["jnp"]["status"] == "ok"
    misses = doc["summary"]["checks"]["rl_peers"]["misses"]
    assert [m["case"] for m in misses] == ["L:1000x8x8"]
    table = report.text_table(doc)
    assert "FAIL" in table


def test_short_cases_take_more_samples(ensure_matmul):
    """A case estimated under short_case_s takes short_repeats samples per implementation
    (on CPU the estimate includes a 50 us launch, so the threshold is raised here)."""
    for short_case_s, want in ((1.0, 7), (1e-9, 2)):
        opts = _tiny_opts(cases=["L:1000x8x8"], impls=["tsm2", "jnp"], repeats=2)
        opts.short_case_s, opts.short_repeats = short_case_s, 7
        doc = run_suite(opts, log=lambda _: None)
        assert [len(r["samples"]) for r in doc["records"]] == [want, want]


def test_x64_flag_is_restored(ensure_matmul):
    before = jax.config.jax_enable_x64
    run_suite(_tiny_opts(cases=["R:96x320x16"], dtypes=["f64"], impls=["jnp"]), log=lambda _: None)
    assert jax.config.jax_enable_x64 == before


def test_suite_cases_bytes_and_flops():
    cases = suite.select_cases()
    r = [c for c in cases if c.family == "R"]
    ell = [c for c in cases if c.family == "L"]
    assert len(r) == (3 * 7 + 4) * 3 and len(ell) == 4 * 4 * 3
    assert suite.Case("R", "f32", 20480, 20480, 8) in cases
    assert suite.Case("L", "bf16", 10_000_000, 64, 64) in cases
    fam = suite.FAMILIES["L"]
    c = suite.Case("L", "f32", 10_000_000, 16, 16)
    assert fam.min_bytes(c) == (10_000_000 * 16 * 2 + 256) * 4  # 1.28 GB: read A, write C
    assert fam.flops(c) == 2 * 10_000_000 * 16 * 16


def test_case_selection_and_parsing():
    assert suite.parse_case("L:1e7x16x16") == ("L", (10_000_000, 16, 16))
    assert suite.parse_case("r:20480x20480x8") == ("R", (20480, 20480, 8))
    with pytest.raises(ValueError):
        suite.parse_case("Q:1x2x3")
    with pytest.raises(ValueError):
        suite.parse_case("R:1x2")
    picked = suite.select_cases(["R"], ["f32"], n=[8, 16])
    assert {c.n for c in picked} == {8, 16} and all(c.family == "R" for c in picked)
    assert len(suite.select_cases(["R", "L"], ["bf16"], mode="quick")) == 4
    with pytest.raises(ValueError):
        suite.select_cases(["R"], ["f8"])


def test_plan_respects_memory_and_l2():
    kw = dict(
        budget_bytes=10**9,
        l2_bytes=50 * 2**20,
        target_call_s=0.005,
        target_sample_s=0.02,
        max_calls=256,
    )
    small = timing.make_plan(640_000, 640_000, 4e-6, **kw)
    assert small.calls == 256 and small.per_sample >= 2
    big = timing.make_plan(600_000_000, 1000, 2e-4, **kw)
    assert big.calls == 1 and big.reason is None  # memory caps it
    huge = timing.make_plan(2 * 10**9, 10**6, 1e-3, **kw)
    assert huge.calls == 0 and huge.reason.startswith("does not fit")
    assert timing.make_plan(640_000, 640_000, 4e-6, per_sample=1, **kw).per_sample == 1


def test_unrolled_products_are_not_merged():
    """Every product of a call has its own buffers, so XLA keeps one dot per product."""
    rng = np.random.default_rng(0)
    a = [jnp.asarray(rng.standard_normal((64, 32), dtype=np.float32)) for _ in range(3)]
    b = [jnp.asarray(rng.standard_normal((32, 4), dtype=np.float32)) for _ in range(3)]
    # precision="highest": at default precision an H100 computes f32 products in TF32.
    compiled, _ = timing.compile_jax(partial(jnp.matmul, precision="highest"), [a, b])
    hlo = compiled.as_text()
    if jax.default_backend() == "cpu":
        assert hlo.count(" dot(") == 3
    else:  # each product stays at least one kernel (fusion, cuBLAS call or dot) of its own
        entry = hlo[hlo.index("ENTRY") :]
        kernels = [ln for ln in entry.splitlines() if re.search(r" (fusion|custom-call|dot)\(", ln)]
        assert len(kernels) >= 3, entry
    outs = timing.run_jax(compiled, [a, b])
    # Against float64, within f32's forward error for a 32-term dot (k eps |A| |B|): a
    # relative tolerance alone fails on entries that cancel to near zero, whatever the
    # summation order XLA's CPU dot picks on a given processor.
    a64, b64 = np.asarray(a[2], np.float64), np.asarray(b[2], np.float64)
    bound = 32 * np.finfo(np.float32).eps * (np.abs(a64) @ np.abs(b64))
    assert (np.abs(np.asarray(outs[2], np.float64) - a64 @ b64) <= bound).all()
    samples = timing.time_jax(compiled, [a, b], per_sample=2, repeats=2, warmup=0)
    assert len(samples) == 2 and all(s > 0 for s in samples)


def test_route_of_lowered_text():
    line = (
        '%0 = stablehlo.custom_call @tsm2_matmul(%arg0, %arg1) {backend_config = "", '
        "mhlo.backend_config = {kernel = 1 : i32}} : (tensor<8x8xf32>) -> tensor<8x8xf32>"
    )
    assert case.route_of(line) in ("tsm2l", "tsm2_matmul[1]")
    assert case.route_of("%0 = stablehlo.dot_general %arg0, %arg1") == "xla"
    assert case.route_of("stablehlo.custom_call @tsm2_other(%a) {}") == "tsm2_other"
    clock = f"%1 = stablehlo.custom_call @{timing.CLOCK_TARGET}() {{has_side_effect = true}}"
    assert case.route_of(clock) == "xla"  # the harness's timer is not a route


def test_rl_checks_and_speedups():
    def rec(impl, case, seconds, n=8, nbytes=10**9, pct=95.0, fam="R", dtype="f32"):
        return {
            "impl": impl,
            "case": case,
            "family": fam,
            "dtype": dtype,
            "n": n,
            "bytes": nbytes,
            "status": "ok",
            "seconds": seconds,
            "pct_of_ceiling": pct,
            "tsm2_speedup": None,
            "speedup_over": None,
        }

    a = [rec("tsm2", "R:a", 1.0), rec("jnp", "R:a", 2.0), rec("torch", "R:a", 1.5)]
    a.append(rec("tsm2_kernel", "R:a", 0.5))  # ours, not a peer: never the peer reference
    b = [rec("tsm2", "R:b", 1.0, pct=80.0), rec("jnp", "R:b", 1.0), rec("torch", "R:b", 0.9)]
    for group in (a, b):
        report.add_speedups(group)
    assert a[0]["speedup_over"] == {"jnp": 2.0, "torch": 1.5, "tsm2_kernel": 0.5}
    checks = report.checks(a + b)
    assert [m["case"] for m in checks["rl_bandwidth"]["misses"]] == ["R:b"]
    assert [m["case"] for m in checks["rl_peers"]["misses"]] == ["R:b"]
    assert checks["rl_speedup"]["geomean"] == pytest.approx(2.0**0.5)
    lines = report.summary_lines({"ceilings": {}, "summary": {"checks": checks}})[1:]
    assert lines[0].startswith("R/L bandwidth (>= 256 MB with small n at >= 90% of read ceil")
    assert "1/2 cases routed" in lines[0]
    assert lines[2] == "R/L speed-up (geomean vs jnp, target >= 1.5x): 1.41x MISS"
    assert report._clean({"x": float("nan"), "y": (1, 2.5)}) == {"x": None, "y": [1, 2.5]}


@pytest.mark.gpu
def test_gpu_ceiling_and_torch_peer():
    doc = run_suite(
        Options(mode="quick", cases=["L:100000x16x16"], dtypes=["f32"], repeats=2),
        log=lambda _: None,
    )
    assert doc["ceilings"]["read_bytes_per_s"] > 1e11
    assert doc["ceilings"]["read_method"] == "ffi:tsm2_stream_read"
    assert all(r["status"] == "ok" for r in doc["records"] if not r["status"].startswith("skip"))


@pytest.mark.gpu
@pytest.mark.timing
def test_gpu_device_clock_times_the_products():
    """The device clock's samples are the products' time: no faster than HBM allows, within
    the host clock's (which adds each call's dispatch: 30 us against 45-79 us per product
    here on an H100), steady, and the stamped programs still return the products."""
    assert timing.device_clock_available()
    rng = np.random.default_rng(1)
    a = [jnp.asarray(rng.standard_normal((4096, 4096), dtype=np.float32)) for _ in range(8)]
    b = [jnp.asarray(rng.standard_normal((4096, 8), dtype=np.float32)) for _ in range(8)]
    prod = partial(jnp.matmul, precision="highest")
    compiled, text = timing.compile_jax(prod, [a, b])
    assert compiled.clocked and timing.CLOCK_TARGET in text and case.route_of(text) == "xla"
    outs = timing.run_jax(compiled, [a, b])
    np.testing.assert_allclose(outs[7], np.asarray(a[7]) @ np.asarray(b[7]), rtol=1e-4, atol=1e-3)
    host: list[float] = []
    dev = timing.time_jax(compiled, [a, b], per_sample=4, repeats=3, host=host)
    assert len(dev) == 3 and len(host) == 3
    read = 4096 * 4096 * 4 / 3.5e12  # no faster than an H100/H200's HBM allows
    assert all(read < d < 1e-3 for d in dev), dev
    assert statistics.median(dev) <= 1.02 * statistics.median(host), (dev, host)
    assert max(dev) < 1.05 * min(dev), dev
    plain, _ = timing.compile_jax(prod, [a, b], clock=False)
    assert not plain.clocked and len(timing.run_jax(plain, [a, b])) == 8


# -- NT, TN, S and the gradient benchmark -------------------------------------------------

LAYOUT_RECORD_FIELDS = {"product": str, "operand_shapes": list, "output_shape": list}


def _expected_bytes(rec) -> int:
    m, k, n = rec["m"], rec["k"], rec["n"]
    size = suite.itemsize(rec["dtype"])
    if rec["family"] == "GRAD":  # A read twice, y once, x and the gradient once
        return (2 * m * k + m * n + 2 * k * n) * size
    return (m * k + k * n + m * n) * size  # every layout: the same three matrices


@pytest.mark.slow
def test_layout_families_and_grad_end_to_end_cpu(tmp_path, capsys, ensure_matmul):
    cases = "NT:300x96x16,S:8x320x96,TN:20000x8x8,GRAD:513x32x3"
    argv = ["--tiny", "--case", cases, "--dtype", "f32,f64,bf16", "--repeats", "2"]
    assert cli.main([*argv, "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "NT/TN/S peers (no slower" in printed and "gradient (jax.grad" in printed

    doc = json.loads((tmp_path / "bench.json").read_text())
    got = {(r["case"], r["dtype"]) for r in doc["records"]}
    want = {("NT:300x96x16", d) for d in ("f32", "bf16")}
    want |= {("S:8x320x96", d) for d in ("f32", "bf16")}
    want |= {("TN:20000x8x8", d) for d in ("f32", "f64")}  # the suite: TN is f32 and f64
    want |= {("GRAD:513x32x3", d) for d in ("f32", "f64", "bf16")}
    assert got == want
    shapes = {
        "NT": ([[300, 96], [16, 96]], [300, 16], "A @ B.T"),
        "S": ([[8, 320], [320, 96]], [8, 96], "A @ B"),
        "TN": ([[20000, 8], [20000, 8]], [8, 8], "A.T @ B"),
        "GRAD": ([[513, 32], [32, 3], [513, 3]], [32, 3], None),
    }
    for rec in doc["records"]:
        for key, kind in {**RECORD_REQUIRED, **LAYOUT_RECORD_FIELDS}.items():
            assert isinstance(rec[key], kind), (key, rec)
        ops, out, product = shapes[rec["family"]]
        assert rec["operand_shapes"] == ops and rec["output_shape"] == out
        assert product is None or rec["product"] == product
        assert rec["bytes"] == _expected_bytes(rec)
        if rec["impl"] in ("tsm2", "jnp", "jnp_highest"):
            assert rec["status"] == "ok", rec
            assert rec["seconds"] > 0 and rec["rel_error"] <= rec["tolerance"], rec
    # TN sums over m = 20000: its f32 tolerance grows with sqrt(m), not sqrt(k)
    tn = next(
        r
        for r in doc["records"]
        if r["case"] == "TN:20000x8x8" and r["impl"] == "jnp_highest" and r["dtype"] == "f32"
    )
    assert tn["tolerance"] == pytest.approx(2 * 2.0**-24 * 20000**0.5)

    checks = doc["summary"]["checks"]
    assert checks["layout_peers"]["cases"] == 6
    assert checks["layout_bandwidth"]["cases"] == 0  # tiny: < 256 MB
    grads = {r["dtype"]: r for r in checks["grad"]["results"]}
    assert set(grads) == {"f32", "f64", "bf16"}
    assert all(r["speedup"] > 0 and r["tsm2_seconds"] > 0 for r in grads.values())
    md = (tmp_path / "bench.md").read_text()
    assert "| GRAD | 513x32x3 |" in md and "| TN | 20000x8x8 |" in md


def _small_blocks(monkeypatch):
    """Float64 references in blocks of a few rows, so the blocked sums are exercised."""
    blocks = suite._row_blocks
    monkeypatch.setattr(suite, "_row_blocks", lambda rows, width: blocks(rows, width, elems=100))


@pytest.mark.parametrize("fam", ["NT", "S", "TN", "GRAD"])
def test_layout_references_are_float64_products(fam, monkeypatch):
    _small_blocks(monkeypatch)
    family = suite.FAMILIES[fam]
    c = suite.Case(fam, "f32", *{"NT": (301, 40, 7), "S": (3, 200, 50)}.get(fam, (507, 24, 5)))
    rng = np.random.default_rng(1)
    ops = [rng.standard_normal(s, dtype=np.float32) for s in family.operand_shapes(c)]
    ops64 = [x.astype(np.float64) for x in ops]
    want = {
        "NT": lambda a, b: a @ b.T,
        "S": lambda a, b: a @ b,
        "TN": lambda a, b: a.T @ b,
        "GRAD": lambda a, x, y: 2 * a.T @ (a @ x - y),
    }[fam](*ops64)
    assert want.shape == family.output_shape(c)
    rows = family.check_rows(c, rng)
    if fam in ("TN", "GRAD", "S"):  # small outputs: every row is checked
        assert np.array_equal(rows, np.arange(want.shape[0]))
    else:  # NT: rows of C are rows of A; first and last always among them
        assert rows[0] == 0 and rows[-1] == c.m - 1
    ref = family.reference([jnp.asarray(x) for x in ops], rows)
    np.testing.assert_allclose(ref, want[rows], rtol=1e-12, atol=1e-10)
    # the product as each JAX implementation writes it (jit, as the harness runs it)
    got = jax.jit(lambda *o: family.apply(partial(jnp.matmul, precision="highest"), *o))(*ops)
    err = np.linalg.norm(np.asarray(got, np.float64) - want) / np.linalg.norm(want)
    assert err < 1e-5, err


def test_grad_apply_is_jax_grad_of_the_loss():
    """GRAD's JAX apply is jax.grad of sum((A x - y)^2) through the given matmul: its jaxpr
    holds the forward product and the transpose of it."""
    family = suite.FAMILIES["GRAD"]
    a, x, y = (jnp.ones(s, jnp.float32) for s in ((64, 8), (8, 2), (64, 2)))
    calls = []

    def matmul(p, q):
        calls.append((p.shape, q.shape))
        return jnp.matmul(p, q)

    jaxpr = jax.make_jaxpr(lambda *o: family.apply(matmul, *o))(a, x, y)
    assert calls == [((64, 8), (8, 2))]  # traced once; the backward is its transpose
    assert str(jaxpr).count("dot_general") == 2


def test_torch_applies_match_numpy():
    """The torch forms of each family (views, autograd) on CPU tensors, where torch exists."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    for fam in ("NT", "S", "TN", "GRAD"):
        family = suite.FAMILIES[fam]
        c = suite.Case(fam, "f64", 33, 12, 5)
        ops = [rng.standard_normal(s) for s in family.operand_shapes(c)]
        got = family.apply(torch.matmul, *(torch.from_numpy(x) for x in ops))
        want = family.apply(np.matmul, *ops)
        np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-10)


def test_wrong_tn_result_fails_the_full_check(monkeypatch):
    """TN's check covers the whole k x n output: one wrong row is caught."""
    monkeypatch.setattr(
        jax_tsm2, "matmul", lambda a, b: jnp.matmul(a, b).at[-1].multiply(1.5), raising=False
    )
    doc = run_suite(_tiny_opts(cases=["TN:20000x8x8"], impls=["tsm2", "jnp"]), log=lambda _: None)
    recs = {r["impl"]: r for r in doc["records"]}
    assert recs["tsm2"]["status"] == "failed-check" and recs["jnp"]["status"] == "ok"
    assert [m["case"] for m in doc["summary"]["checks"]["layout_peers"]["misses"]] == [
        "TN:20000x8x8"
    ]


def test_layout_suite_cases_dtypes_and_bytes():
    cases = suite.select_cases(["NT", "S", "TN", "GRAD"])
    count = lambda fam: sum(1 for c in cases if c.family == fam)
    assert count("NT") == 4 * 2 and count("S") == 10 * 2 and count("TN") == 3 * 2
    assert {(c.m, c.k, c.n) for c in cases if c.family == "GRAD"} == {(1_000_000, 512, 8)}
    assert suite.Case("NT", "bf16", 250_000, 4096, 16) in cases
    assert suite.Case("S", "f32", 16, 8192, 14336) in cases
    assert suite.Case("TN", "f64", 10_000_000, 16, 16) in cases
    assert {c.dtype for c in cases if c.family == "TN"} == {"f32", "f64"}
    assert {c.dtype for c in cases if c.family in ("NT", "S")} == {"f32", "bf16"}
    every = suite.select_cases(["all"], ["f32"], mode="quick")
    assert {c.family for c in every} == set(suite.FAMILIES)
    tn = suite.FAMILIES["TN"]
    c = suite.Case("TN", "f32", 10_000_000, 16, 16)
    assert tn.min_bytes(c) == (2 * 10_000_000 * 16 + 256) * 4 and tn.contraction(c) == 10**7
    g = suite.FAMILIES["GRAD"]
    c = suite.Case("GRAD", "f32", 1_000_000, 512, 8)
    assert g.min_bytes(c) == (2 * 512 + 8) * 10**6 * 4 + 2 * 512 * 8 * 4
    assert g.flops(c) == 4 * 10**6 * 512 * 8
    with pytest.raises(ValueError, match="TN runs f32, f64"):
        suite.select_cases(["TN"], ["bf16"])
    with pytest.raises(SystemExit):
        cli.main(["--tiny", "--family", "TN", "--dtype", "bf16"])


def test_layout_and_gradient_checks():
    def rec(impl, case, seconds, nbytes=10**9, pct=90.0, fam="NT", dtype="f32", status="ok"):
        return {
            "impl": impl,
            "case": case,
            "family": fam,
            "dtype": dtype,
            "n": 16,
            "bytes": nbytes,
            "status": status,
            "seconds": seconds,
            "pct_of_ceiling": pct,
            "tsm2_speedup": None,
            "speedup_over": None,
        }

    groups = [
        [rec("tsm2", "NT:a", 1.0), rec("jnp", "NT:a", 2.0), rec("tsm2_kernel", "NT:a", 1.0)],
        [rec("tsm2", "TN:b", 1.0, pct=80.0, fam="TN"), rec("torch", "TN:b", 0.9, fam="TN")],
        [rec("tsm2", "S:c", 1.0, nbytes=10**8, pct=10.0, fam="S"), rec("jnp", "S:c", 1.5, fam="S")],
        [rec("tsm2", "R:d", 1.0, pct=10.0, fam="R")],  # an R/L case: not judged here
        [rec("tsm2", "GRAD:g", 1.0, fam="GRAD"), rec("jnp", "GRAD:g", 1.25, fam="GRAD")],
        [
            rec("tsm2", "GRAD:g", 1.0, fam="GRAD", dtype="bf16"),
            rec("jnp", "GRAD:g", 0.5, fam="GRAD", dtype="bf16"),
        ],
    ]
    for group in groups:
        report.add_speedups(group)
    checks = report.checks([r for g in groups for r in g])
    bw = checks["layout_bandwidth"]
    assert bw["cases"] == 2  # NT:a and TN:b; S:c is under 256 MB
    assert [m["case"] for m in bw["misses"]] == ["TN:b"]
    assert [m["case"] for m in bw["kernel_misses"]] == ["TN:b"]  # no forced-kernel record
    assert checks["layout_peers"]["cases"] == 3
    assert [(m["case"], m["fastest_peer"]) for m in checks["layout_peers"]["misses"]] == [
        ("TN:b", "torch")
    ]
    # Routed to XLA's own program: judged on the two records' pooled samples, so a noisy
    # tsm2 sample set does not make a miss (nor hide a real one against another peer).
    same = [
        dict(rec("tsm2", "S:e", 1.05, fam="S"), program="p1", samples=[1.05, 1.04, 1.06]),
        dict(rec("jnp", "S:e", 1.00, fam="S"), program="p1", samples=[1.00, 0.99, 1.01]),
        dict(rec("tsm2", "S:f", 1.05, fam="S"), program="p2", samples=[1.05, 1.04, 1.06]),
        dict(rec("jnp", "S:f", 1.00, fam="S"), program="p2", samples=[1.00, 0.99, 1.01]),
        dict(rec("torch", "S:f", 0.90, fam="S"), samples=[0.9]),
        dict(rec("tsm2", "S:g", 1.05, fam="S"), program="p3", samples=[1.05]),
        dict(rec("jnp", "S:g", 1.00, fam="S"), program="p4", samples=[1.00]),
    ]
    peers = report.checks(same)["layout_peers"]
    assert [(m["case"], m["fastest_peer"]) for m in peers["misses"]] == [
        ("S:f", "torch"),
        ("S:g", "jnp"),
    ]
    # Routed to XLA's dot, a miss to XLA's dot at another precision within 0.5% is an
    # XLA tie; a wider one, one to torch, or a kernel route's, is not.
    ties = [
        dict(rec("tsm2", "NT:h", 1.002, dtype="bf16"), route="xla"),
        rec("jnp_highest", "NT:h", 1.0, dtype="bf16"),
        dict(rec("tsm2", "NT:i", 1.01, dtype="bf16"), route="xla"),
        rec("jnp_highest", "NT:i", 1.0, dtype="bf16"),
        dict(rec("tsm2", "NT:j", 1.002, dtype="bf16"), route="xla"),
        rec("torch", "NT:j", 1.0, dtype="bf16"),
        dict(rec("tsm2", "NT:k", 1.002, dtype="bf16"), route="tsm2r"),
        rec("jnp", "NT:k", 1.0, dtype="bf16"),
    ]
    misses = report.checks(ties)["layout_peers"]["misses"]
    assert [(m["case"], m["xla_tie"]) for m in misses] == [
        ("NT:h", True),
        ("NT:i", False),
        ("NT:j", False),
        ("NT:k", False),
    ]
    tie_doc = {"ceilings": {}, "summary": {"checks": report.checks(ties)}}
    assert any("1/4 with XLA's dot tying XLA's dot" in s for s in report.summary_lines(tie_doc))
    grads = {r["dtype"]: r for r in checks["grad"]["results"]}
    assert grads["f32"]["speedup"] == pytest.approx(1.25) and grads["f32"]["pass"]
    assert not grads["bf16"]["pass"] and checks["grad"]["pass"] is False
    doc = {"ceilings": {}, "summary": {"checks": checks}}
    lines = report.summary_lines(doc)
    assert any(s.startswith("NT/TN/S bandwidth") and "1/2 cases routed" in s for s in lines)
    assert any("GRAD:g f32" in s and "1.25x pass" in s for s in lines)

"""The floor in the harness: the empty launch, each record's floor and floor fraction, the
floor summary (median, 10th percentile, geomean over jnp, shapes slower than jnp), the checks
against jnp, and family APP (products from real programs).

On CPU nothing measures a ceiling, so the ceilings are faked where a test needs a floor: the
records' floors must then follow from the fake read rate and launch time exactly.
"""

from __future__ import annotations

import json
import math
import statistics

import jax.numpy as jnp
import numpy as np
import pytest

from jax_tsm2.bench import case, ceilings, cli, floor, grid, report, runner, suite, timing
from jax_tsm2.bench.runner import Options, run_suite
from jax_tsm2.tune import timing as product_timing


def _tiny_opts(**kw) -> Options:
    base = dict(mode="tiny", dtypes=["f32"], repeats=2, warmup=0, max_calls=2)
    return Options(**{**base, **kw})


def _fake_ceilings(monkeypatch, read: float, launch: float) -> None:
    """Make a CPU run see a measured read ceiling and empty launch."""

    skipped = ceilings.skipped

    def measured(reason: str) -> dict:
        out = skipped(reason)
        out.update(read_bytes_per_s=read, launch_seconds=launch, launch_method="fake")
        return out

    monkeypatch.setattr(runner.ceilings, "skipped", measured)


# -- the floor of a record ------------------------------------------------------------------


def test_floor_is_the_larger_of_bytes_over_read_and_the_launch():
    read = {"read_bytes_per_s": 2e12, "launch_seconds": 4e-6}
    assert case.floor_of(10**9, read) == (5e-4, "bytes")
    assert case.floor_of(10**6, read) == (4e-6, "launch")  # 0.5 us of bytes: the launch binds
    assert case.floor_of(8 * 10**6, read) == (4e-6, "bytes")  # a tie: either, same value
    assert case.floor_of(10**9, {"read_bytes_per_s": 2e12}) == (None, None)
    assert case.floor_of(10**9, {"launch_seconds": 4e-6, "read_bytes_per_s": None}) == (None, None)


@pytest.mark.parametrize("launch", [1e-12, 10.0], ids=["bytes-bound", "launch-bound"])
def test_records_carry_the_floor_and_its_fraction(monkeypatch, launch):
    """Every record's floor is max(minimal bytes / read, launch) of its own case, each
    operand and the output counted once; the fraction is floor / the record's own time."""
    read = 1e9
    _fake_ceilings(monkeypatch, read, launch)
    cases = ["R:96x320x16", "TN:2000x16x32", "NT:300x96x16"]
    doc = run_suite(_tiny_opts(cases=cases, impls=["tsm2", "jnp"]), log=lambda _: None)
    assert doc["ceilings"]["launch_seconds"] == launch
    seen = set()
    for rec in doc["records"]:
        m, k, n = rec["m"], rec["k"], rec["n"]
        nbytes = (m * k + k * n + m * n) * 4  # the same three matrices in every layout
        want = max(nbytes / read, launch)
        assert rec["floor_seconds"] == pytest.approx(want, rel=1e-12)
        assert rec["floor_bound"] == ("launch" if launch > 1 else "bytes")
        assert rec["status"] == "ok" and rec["seconds"] > 0
        assert rec["floor_fraction"] == pytest.approx(want / rec["seconds"], rel=1e-12)
        seen.add(rec["case"])
    assert seen == set(cases)
    md = report.markdown(doc)
    assert "% floor" in md and "## Distance to the floor" in md
    assert any(s.startswith("empty launch: ") for s in report.summary_lines(doc))


def test_no_floor_without_a_launch_or_a_ceiling():
    doc = run_suite(_tiny_opts(cases=["L:1000x8x8"], impls=["jnp"]), log=lambda _: None)
    rec = doc["records"][0]
    assert doc["ceilings"]["launch_seconds"] is None
    assert rec["floor_seconds"] is None and rec["floor_fraction"] is None
    assert rec["seconds"] > 0  # timed all the same


# -- the empty launch ------------------------------------------------------------------------


def test_empty_launch_is_timed_like_a_case(monkeypatch):
    """R launches per call, each on its own few-byte buffer, through the harness's own
    compile and timer, with the plan's samples; the launch is their median."""
    compiled_with = []
    real_compile = timing.compile_jax

    def compile_jax(apply, copies, **kw):
        compiled_with.append(copies)
        return real_compile(apply, copies, **kw)

    samples = [3e-6, 1e-6, 9e-6, 2e-6, 4e-6]
    timed = {}

    def time_jax(compiled, copies, *, per_sample, repeats, warmup=1, host=None):
        timed.update(per_sample=per_sample, repeats=repeats, warmup=warmup)
        return samples[:repeats]

    # The launch is measured by the product's tune/ceilings.py, on its timing module.
    monkeypatch.setattr(product_timing, "compile_jax", compile_jax)
    monkeypatch.setattr(product_timing, "time_jax", time_jax)
    out = ceilings.measure_launch(
        calls=7, per_sample=3, repeats=5, warmup=2, apply=lambda x: x ^ jnp.uint32(1)
    )
    assert out["launch_seconds"] == 3e-6  # the median, not the mean (3.8e-6) nor the min
    assert out["launch_calls"] == 7 and out["launch_per_sample"] == 3
    assert timed == {"per_sample": 3, "repeats": 5, "warmup": 2}
    (copies,) = compiled_with
    assert len(copies) == 1 and len(copies[0]) == 7
    assert len({id(x) for x in copies[0]}) == 7  # a buffer of its own per launch
    assert all(x.nbytes == ceilings.LAUNCH_BYTES for x in copies[0])


def test_empty_launch_runs_and_reports_failure():
    out = ceilings.measure_launch(calls=4, per_sample=2, repeats=3, apply=lambda x: x + 1)
    assert out["launch_seconds"] > 0 and len(out["launch_samples"]) == 3

    def broken(x):
        raise RuntimeError("no such target")

    out = ceilings.measure_launch(calls=4, per_sample=2, repeats=3, apply=broken)
    assert out["launch_seconds"] is None and "no such target" in out["launch_error"]


def test_launch_is_planned_as_the_smallest_case():
    """The launch gets the plan of a product of a few bytes: the most products per call."""
    ctx = {
        "ceilings": {"read_bytes_per_s": 4e12},
        "platform": "gpu",
        "budget": 10**10,
        "device": type("D", (), {"l2_bytes": 50 * 2**20})(),
    }
    opts = Options(max_calls=64, repeats=5, short_repeats=15)
    plan, rounds = case.plan_case(ceilings.LAUNCH_BYTES, 4, ceilings.LAUNCH_BYTES, ctx, opts)
    small, small_rounds = case.plan_case(10**6, 10**5, 1_100_000, ctx, opts)
    assert plan.calls == small.calls == 64 and rounds == small_rounds == 15


# -- percentiles and geometric means -------------------------------------------------------


def test_percentile_interpolates_between_ranks():
    assert floor.percentile(list(range(1, 12)), 10) == 2.0  # the second of 11
    assert floor.percentile([10.0, 20.0], 10) == pytest.approx(11.0)
    assert floor.percentile([0.3, 0.1, 0.2], 50) == pytest.approx(0.2)  # order does not matter
    assert floor.percentile([5.0], 10) == 5.0 and floor.percentile([], 10) is None


def test_geomean():
    assert floor.geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert floor.geomean([0.5, 2.0, None, 0.0]) == pytest.approx(1.0)  # non-positive ignored
    assert floor.geomean([]) is None


# -- the floor summary on synthetic records -------------------------------------------------


def _rec(impl, label, seconds, floor_s, nbytes, *, dtype="f32", group="grid", **extra):
    rec = {
        "impl": impl,
        "case": label,
        "family": label.split(":")[0],
        "dtype": dtype,
        "bytes": nbytes,
        "status": "ok",
        "seconds": seconds,
        "floor_seconds": floor_s,
        "floor_bound": None,
        "route": "xla" if impl == "tsm2" else None,
        "n": 8,
        "pct_of_ceiling": None,
        "tsm2_speedup": None,
        "speedup_over": None,
    }
    if group == "grid":
        rec["grid"] = True
    elif group == "app":
        rec["app"] = "a program"
    return {**rec, **extra}


def _grid_records():
    us = 1e-6
    return [
        # over 64 MB; a forced kernel is the best
        _rec("tsm2", "R:a", 50 * us, 40 * us, 2 * 10**8),
        _rec("jnp", "R:a", 100 * us, 40 * us, 2 * 10**8),
        _rec("tsm2r", "R:a", 45 * us, 40 * us, 2 * 10**8, kernel="tsm2r"),
        # routed 11% slower than jnp: listed
        _rec("tsm2", "L:b", 10 * us, 5 * us, 10**6),
        _rec("jnp", "L:b", 9 * us, 5 * us, 10**6),
        # routed to jnp's own program: both at the pooled median 8.5 us (not 7 against 10)
        _rec(
            "tsm2", "L:c", 7 * us, 5 * us, 2 * 10**6, program="p", samples=[6 * us, 7 * us, 8 * us]
        ),
        _rec(
            "jnp",
            "L:c",
            10 * us,
            5 * us,
            2 * 10**6,
            program="p",
            samples=[9 * us, 10 * us, 11 * us],
        ),
        _rec("tsm2l", "L:c", 12 * us, 5 * us, 2 * 10**6, kernel="tsm2l"),
        # 4% slower than jnp: within the 5% allowed
        _rec("tsm2", "TN:d", 20.8 * us, 20 * us, 10**8),
        _rec("jnp", "TN:d", 20 * us, 20 * us, 10**8),
        # no floor measured: in the geomean, not in the fractions
        _rec("tsm2", "S:e", 10 * us, None, 3 * 10**6),
        _rec("jnp", "S:e", 20 * us, None, 3 * 10**6),
        # the same label in another dtype is another shape
        _rec("tsm2", "R:a", 80 * us, 40 * us, 2 * 10**8, dtype="f64"),
        _rec("jnp", "R:a", 80 * us, 40 * us, 2 * 10**8, dtype="f64"),
    ]


def test_floor_summary_fractions_geomean_and_slow_shapes():
    s = floor.summarize(_grid_records())
    assert list(s) == ["grid"]
    g = s["grid"]
    assert g["shapes"] == 6 and g["with_floor"] == 5
    routed = sorted([0.8, 0.5, 5 / 8.5, 20 / 20.8, 0.5])
    r = g["routed"]
    assert r["all"]["shapes"] == 5
    assert r["all"]["median"] == pytest.approx(5 / 8.5)
    # linear between ranks: position 0.1 * (5 - 1) = 0.4 of the sorted fractions
    assert r["all"]["p10"] == pytest.approx(routed[0] + 0.4 * (routed[1] - routed[0]))
    big = [0.8, 20 / 20.8, 0.5]  # R:a f32, TN:d, R:a f64
    assert r["over_64mb"]["shapes"] == 3
    assert r["over_64mb"]["median"] == pytest.approx(statistics.median(big))
    assert r["by_family"]["L"]["median"] == pytest.approx((0.5 + 5 / 8.5) / 2)
    assert set(r["by_family"]) == {"R", "L", "TN"}  # S has no floor
    b = g["best"]["all"]
    assert b["median"] == pytest.approx(statistics.median([40 / 45, 5 / 9, 5 / 8.5, 1.0, 0.5]))
    speedups = [2.0, 0.9, 1.0, 20 / 20.8, 2.0, 1.0]
    assert g["geomean_over_jnp"]["routed"] == pytest.approx(math.prod(speedups) ** (1 / 6))
    best = [100 / 45, 1.0, 1.0, 1.0, 2.0, 1.0]
    assert g["geomean_over_jnp"]["best"] == pytest.approx(math.prod(best) ** (1 / 6))
    assert [(e["case"], e["dtype"]) for e in g["slower_than_jnp"]] == [("L:b", "f32")]
    entry = {e["case"]: e for e in g["results"] if e["dtype"] == "f32"}
    assert entry["L:c"]["tsm2_seconds"] == entry["L:c"]["jnp_seconds"] == pytest.approx(8.5e-6)
    assert entry["R:a"]["best"] == "tsm2r"
    lines = floor.summary_lines(s)
    assert lines[0].startswith("floor (grid): routed median 59%, 10th percentile 50% over 5")
    assert "1 shapes routed over 1.05x jnp" in lines[1]
    md = "\n".join(floor.markdown(s))
    assert "| L:b | f32 | xla | 10.0 | 9.0 | 1.111 | 5.0 |" in md


def test_floor_summary_groups_grid_suite_and_app():
    recs = [
        *_grid_records()[:2],
        _rec("tsm2", "R:a", 1e-3, 5e-4, 10**9, group="suite"),
        _rec("tsm2", "R:a", 2e-3, 5e-4, 10**9, group="app"),
        _rec("jnp", "L:z", 1e-3, 5e-4, 10**9, group="suite"),  # no routed record: left out
    ]
    s = floor.summarize(recs)
    assert list(s) == ["grid", "suite", "app"]
    assert s["suite"]["routed"]["all"]["median"] == pytest.approx(0.5)
    assert s["app"]["routed"]["all"]["median"] == pytest.approx(0.25)
    assert floor.summarize([recs[-1]]) is None


def _passing_grid(n=floor.MIN_SHAPES):
    recs = []
    for i in range(n):
        recs += [
            _rec("tsm2", f"R:{i}", 1.0 / 0.9, 1.0, 10**8),
            _rec("jnp", f"R:{i}", 2.5 / 0.9, 1.0, 10**8),
        ]
    return recs


def test_grid_floor_check():
    check = floor.grid_check(floor.summarize(_passing_grid()))
    assert check["pass"] and check["median"] == pytest.approx(0.9) and not check["misses"]
    assert check["geomean_over_jnp"] == pytest.approx(2.5)
    short = floor.grid_check(floor.summarize(_passing_grid(floor.MIN_SHAPES - 1)))
    assert not short["pass"] and "fewer than 120" in short["misses"][0]
    recs = _passing_grid()
    recs[1]["seconds"] = recs[0]["seconds"] / 1.06  # one shape 6% slower than jnp
    check = floor.grid_check(floor.summarize(recs))
    assert not check["pass"] and check["misses"] == ["1 shapes over 1.05x jnp"]
    recs = _passing_grid()
    for rec in recs[: 2 * 13 : 2]:  # 13 of 120 routed shapes at 50%: the 10th percentile falls
        rec["seconds"] = 2.0
    check = floor.grid_check(floor.summarize(recs))
    assert check["p10"] == pytest.approx(0.5) and check["median"] == pytest.approx(0.9)
    assert check["misses"] == ["10th percentile 50% of the floor"]
    recs = _passing_grid()
    recs[0] = {**recs[0], "status": "error: boom", "seconds": None}
    assert "did not run" in floor.grid_check(floor.summarize(recs))["misses"][-1]
    assert floor.grid_check(floor.summarize(_grid_records()[:2])) is not None
    assert floor.grid_check(None) is None
    doc = {"records": _passing_grid()}
    summary = report.summarize(doc)
    assert summary["checks"]["grid_floor"]["pass"]
    lines = report.summary_lines({"ceilings": {}, **doc, "summary": summary})
    assert any(s.startswith("grid floor (") and s.endswith(": pass") for s in lines)


# -- the jnp check (suite and APP) ----------------------------------------------------------


def test_jnp_check_takes_the_faster_precision_and_allows_two_percent():
    recs = [
        _rec("tsm2", "R:a", 1.01, None, 10**8, group="suite"),
        _rec("jnp", "R:a", 1.0, None, 10**8, group="suite"),
        _rec("jnp_highest", "R:a", 1.2, None, 10**8, group="suite"),
        # jnp_highest is the faster: 3% slower than it is a miss, though faster than jnp
        _rec("tsm2", "R:b", 1.03, None, 10**8, group="suite"),
        _rec("jnp", "R:b", 1.1, None, 10**8, group="suite"),
        _rec("jnp_highest", "R:b", 1.0, None, 10**8, group="suite"),
        # jnp's own program: judged on the pooled median (1.0 against 0.99, not 1.1)
        _rec("tsm2", "L:e", 1.1, None, 10**8, group="suite", program="p", samples=[1.0, 1.1, 1.2]),
        _rec("jnp", "L:e", 1.0, None, 10**8, group="suite", program="p", samples=[0.9, 1.0, 1.0]),
        _rec("jnp_highest", "L:e", 0.99, None, 10**8, group="suite"),
        # cuBLAS is reported beside, not judged against
        _rec("tsm2", "TN:c", 0.9, None, 10**8, group="app"),
        _rec("jnp", "TN:c", 1.0, None, 10**8, group="app"),
        _rec("torch", "TN:c", 0.8, None, 10**8, group="app"),
        _rec("tsm2", "S:d", None, None, 10**8, group="app", status="error: boom"),
        _rec("jnp", "S:d", 1.0, None, 10**8, group="app"),
        _rec("tsm2", "L:g", 5.0, None, 10**8),  # a grid shape: not judged here
        _rec("jnp", "L:g", 1.0, None, 10**8),
    ]
    check = report.checks([r for r in recs if not r.get("grid")])["jnp_peers"]
    assert check["suite"] == {"cases": 3, "misses": 1}
    assert check["app"] == {"cases": 2, "misses": 1}
    assert [(m["case"], m["fastest"]) for m in check["misses"]] == [
        ("R:b", "jnp_highest"),
        ("S:d", "jnp"),
    ]
    assert check["misses"][0]["ratio"] == pytest.approx(1.03)
    assert check["misses"][1]["why"] == "error: boom"
    res = {r["case"]: r for r in check["results"]}
    assert res["L:e"]["ratio"] == pytest.approx(1.0 / 0.99)
    assert res["TN:c"]["torch_seconds"] == 0.8 and not res["TN:c"]["miss"]
    assert check["pass"] is False
    # the suite's own checks leave the APP products out
    checks = report.checks([r for r in recs if not r.get("grid")])
    assert checks["layout_peers"]["cases"] == 0 and checks["rl_peers"]["cases"] == 3
    lines = report.summary_lines({"ceilings": {}, "summary": {"checks": checks}})
    assert any(
        s.startswith("jnp peers (routed <= 1.02x") and "suite 2/3, APP 1/2" in s for s in lines
    )


# -- family APP -----------------------------------------------------------------------------

#: The products from real programs the APP family must hold: (family, m, k, n, dtype).
APP_REQUIRED = {
    ("R", 100_000, 2000, 32, "f32"),  # randomized SVD, the sketch
    ("TN", 100_000, 2000, 32, "f32"),  # randomized SVD, the projection
    ("TN", 1_000_000, 32, 32, "f32"),  # a Gram matrix
    ("R", 20_000, 20_000, 8, "f32"),  # block power iteration
    ("R", 20_000, 20_000, 8, "f64"),
    ("R", 32_768, 4096, 16, "bf16"),  # LoRA
    ("R", 32_768, 4096, 16, "f32"),
    ("TN", 32_768, 4096, 16, "bf16"),
    ("TN", 32_768, 4096, 16, "f32"),
    ("NT", 1_000_000, 128, 64, "f32"),  # k-means distances
    ("L", 1_000_000, 3, 3, "f32"),  # tiny k
    ("S", 1, 4096, 14336, "bf16"),  # decode
    ("S", 4, 4096, 14336, "bf16"),
}


def test_app_products():
    cases = suite.select_cases(["APP"])
    assert {(c.family, c.m, c.k, c.n, c.dtype) for c in cases} == APP_REQUIRED
    assert all(c.source for c in cases)
    by_shape = {}
    for c in cases:
        by_shape.setdefault((c.family, c.m, c.k, c.n), set()).add(c.source)
    assert all(len(s) == 1 for s in by_shape.values())  # one source per product
    assert len({next(iter(s)) for s in by_shape.values()}) == len(by_shape)
    # never a suite shape: records of a merged run are told apart by case and dtype
    suite_shapes = {(f, *s) for f, fam in suite.FAMILIES.items() for s in fam.shapes}
    assert not suite_shapes & set(by_shape)
    tiny = suite.select_cases(["APP"], mode="tiny")
    assert [(c.family, c.dtype, c.source) for c in tiny] == [
        (c.family, c.dtype, c.source) for c in cases
    ]
    assert all(suite.FAMILIES[c.family].min_bytes(c) < 10**7 for c in tiny)
    quick = suite.select_cases(["APP"], ["f32", "bf16"], mode="quick")
    assert 0 < len(quick) < len(cases) and {c.dtype for c in quick} <= {"f32", "bf16"}
    every = suite.select_cases(["all"])
    assert sum(c.source is not None for c in every) == len(cases)
    assert [c for c in every if c.source] == cases  # after the suite, in their own order
    assert suite.select_cases(["APP"], ["f64"]) == [c for c in cases if c.dtype == "f64"]
    with pytest.raises(ValueError, match="APP runs bf16, f32, f64"):
        suite.select_cases(["APP"], ["f16"])


@pytest.mark.slow
def test_app_end_to_end_cpu(tmp_path, capsys):
    argv = ["--tiny", "--family", "APP", "--dtype", "f32", "--repeats", "1"]
    assert cli.main([*argv, "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "jnp peers (routed <= 1.02x" in printed and "randomized SVD" in printed
    doc = json.loads((tmp_path / "bench.json").read_text())
    want = [c for c in suite.select_cases(["APP"], ["f32"], mode="tiny")]
    routed = [r for r in doc["records"] if r["impl"] == "tsm2"]
    assert [(r["case"], r["app"]) for r in routed] == [(c.label, c.source) for c in want]
    for rec in doc["records"]:
        assert rec["app"] == next(c.source for c in want if c.label == rec["case"])
        assert rec["status"] == "ok" or rec["impl"] == "torch", rec  # torch: CUDA only
        if rec["status"] == "ok":
            assert rec["rel_error"] <= rec["tolerance"]
            assert rec["prepare_seconds"] > 0 and rec["timing_seconds"] > 0
            assert rec["case_seconds"] >= rec["setup_seconds"] + rec["prepare_seconds"]
    checks = doc["summary"]["checks"]
    assert checks["jnp_peers"]["app"]["cases"] == len(want)
    assert checks["rl_peers"]["cases"] == 0 and checks["layout_peers"]["cases"] == 0
    assert list(doc["summary"]["floor"]) == ["app"]
    md = (tmp_path / "bench.md").read_text()
    assert "| case | dtype | MB | floor us | tsm2 us | % floor | route |" in md
    assert "| family | case | dtype | MB |" not in md  # no suite table
    assert "github.com/jax-ml/jax/issues/33004" in md


# -- the grid's coverage --------------------------------------------------------------------


def _prime(v: int) -> bool:
    return v > 2 and all(v % d for d in range(2, math.isqrt(v) + 1))


@pytest.mark.parametrize("seed", [0, 11])
def test_grid_covers_regions_dtypes_sizes_and_odd_primes(seed):
    cases = grid.draw(120, seed)
    for fam in grid.GRID_FAMILIES:
        mine = [c for c in cases if c.family == fam]
        assert len(mine) >= 10, fam
        dims = [v for c in mine for v in (c.m, c.k, c.n)]
        assert any(_prime(v) for v in dims), fam
        assert sum(v % 2 for v in dims) >= len(dims) // 4, fam  # odd sizes, not only even
    assert {c.dtype for c in cases} == set(grid.GRID_DTYPES)
    sizes = [suite.FAMILIES[c.family].min_bytes(c) for c in cases]
    assert min(sizes) >= 10**6 and max(sizes) <= 10**9
    assert min(sizes) < 5 * 10**6 and max(sizes) > 2 * 10**8  # spread over the window
    assert sum(s > floor.BIG_BYTES for s in sizes) >= 30  # shapes over 64 MB to summarize


def test_grid_size_and_seed_options():
    """--grid-size is --grid; --seed seeds the operands, and the grid unless --grid-seed does."""

    def opts(*argv):
        return cli.options(cli.parser().parse_args(list(argv)), list(argv))

    o = opts("--grid-size", "7", "--seed", "11")
    assert (o.grid, o.grid_seed, o.seed) == (7, 11, 11)
    o = opts("--grid", "--grid-seed", "3", "--seed", "2")
    assert (o.grid, o.grid_seed, o.seed) == (120, 3, 2)
    o = opts("--grid")
    assert (o.grid, o.grid_seed, o.seed) == (120, 0, 0)
    assert opts("--seed", "5", "--tiny").seed == 5


def test_grid_records_carry_a_floor_on_a_fake_ceiling(monkeypatch, tmp_path):
    _fake_ceilings(monkeypatch, 1e9, 1e-4)
    argv = ["--tiny", "--grid", "4", "--grid-seed", "5", "--repeats", "1", "--out", str(tmp_path)]
    assert cli.main(argv) == 0
    doc = json.loads((tmp_path / "bench.json").read_text())
    g = doc["summary"]["floor"]["grid"]
    by_shape = floor.shapes_of(doc["records"])
    assert g["shapes"] == len(by_shape) == 4
    fractions = []
    for recs in by_shape.values():
        times = floor.shape_seconds(recs)
        fractions.append(next(iter(recs.values()))["floor_seconds"] / times["tsm2"])
    assert g["routed"]["all"]["median"] == pytest.approx(statistics.median(fractions))
    assert g["routed"]["all"]["p10"] == pytest.approx(np.percentile(fractions, 10))
    md = (tmp_path / "bench.md").read_text()
    assert "### grid: 4 shapes" in md and "| all | 4 |" in md


@pytest.mark.gpu
@pytest.mark.timing
def test_gpu_no_implementation_beats_the_floor():
    """On a GPU the floor is a floor: the empty launch is a few microseconds by the device
    clock, and no implementation runs faster than the floor beyond noise, whether the launch
    binds (L 1e4 x 8 x 8 f32: 0.64 MB, about 0.15 us of bytes on an H200, under its ~1 us
    launch) or the bytes do (R 20480 x 20480 x 8 f32: 1.7 GB). A
    floor counting bytes twice, or a launch timed slower than the products' own, fails here."""
    cases = ["L:10000x8x8", "R:20480x20480x8", "S:1x4096x4096"]
    impls = ["tsm2", "jnp", "jnp_highest", "tsm2_kernel"]
    opts = Options(mode="quick", cases=cases, dtypes=["f32"], repeats=3, impls=impls)
    doc = run_suite(opts, log=lambda _: None)
    ceil = doc["ceilings"]
    assert ceil["launch_timing_method"] == "jax-jit-device-clock", ceil
    assert 0.3e-6 < ceil["launch_seconds"] < 30e-6, ceil["launch_seconds"]
    bounds = {}
    for rec in doc["records"]:
        assert rec["status"] == "ok", rec
        assert rec["floor_fraction"] <= 1.15, (rec["case"], rec["impl"], rec["floor_fraction"])
        bounds[rec["case"]] = rec["floor_bound"]
    assert bounds["L:10000x8x8"] == "launch" and bounds["R:20480x20480x8"] == "bytes"

"""The model and routing checks in the harness: ``--model`` (predicted beside measured, the
model's error) and ``--grid`` (the validation grid of random shapes, routing against the best
of each shape). CPU: tiny shapes, the forced kernels run the FFI target's reference loops; the
grid-routing judge runs on synthetic records."""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter

import jax
import jax.numpy as jnp
import pytest

import jax_tsm2
from jax_tsm2 import kernel_call, model
from jax_tsm2.bench import case, cli, grid, grid_report, impls, predict, report, suite, timing
from jax_tsm2.bench.runner import Options, run_suite
from jax_tsm2.routing import Problem

JAX_IMPLS = ("tsm2", "jnp", "jnp_highest")


# -- the grid's shapes ------------------------------------------------------------------------


def _in(value: int, interval: tuple[float, float]) -> bool:
    lo, hi = interval
    return math.ceil(lo) <= value <= math.floor(hi)


@pytest.mark.parametrize("spec", [grid.FULL, grid.TINY], ids=lambda s: s.name)
def test_grid_ranges_bytes_and_coverage(spec):
    cases = grid.draw(120, seed=3, spec=spec)
    assert len(cases) == 120 and len(set(cases)) == 120
    assert set(Counter(c.family for c in cases)) == set(grid.GRID_FAMILIES)
    assert set(Counter(c.dtype for c in cases)) == set(grid.GRID_DTYPES)
    for c in cases:
        size = suite.FAMILIES[c.family].min_bytes(c)
        assert spec.min_bytes <= size <= spec.max_bytes, c
        regions = spec.regions[c.family]
        assert any(all(map(_in, (c.m, c.k, c.n), r)) for r in regions), c


def test_grid_is_deterministic_per_seed():
    a = grid.draw(120, seed=0)
    assert a == grid.draw(120, seed=0)
    assert a[:30] == grid.draw(30, seed=0)  # the first N shapes of a larger grid
    assert a != grid.draw(120, seed=1)


def test_grid_fills_the_log_range():
    """Log-uniform: the sizes spread over decades, not bunched at the top of the range."""
    cases = [c for c in grid.draw(400, seed=0) if c.family == "L"]
    decades = Counter(int(math.log10(c.m)) for c in cases)
    assert set(decades) >= {4, 5, 6}, decades


def test_grid_selection_errors():
    with pytest.raises(ValueError, match="grid family"):
        grid.draw(5, families=["GRAD"])
    with pytest.raises(ValueError, match="grid dtype"):
        grid.draw(5, dtypes=["f8"])
    assert {c.family for c in grid.draw(20, families=["tn"])} == {"TN"}
    for argv in (["--grid", "5", "--case", "R:96x96x8"], ["--grid", "5", "--grid-start", "5"]):
        with pytest.raises(SystemExit):
            cli.main(["--tiny", *argv])


def test_grid_kernels_take_the_shape():
    dev = model.H100_SXM
    for c in grid.draw(120, seed=0):
        layout = grid.LAYOUT[c.family]
        kernels = grid.kernels_for(c, dev)
        assert kernels, c
        assert set(kernels) <= set(model.KERNELS_FOR_LAYOUT[layout])
        if c.family == "TN":
            assert kernels == ["tsm2t"]
        if c.m > model.S_MAX_M or layout != "nn":
            assert "tsm2s" not in kernels
        for k in kernels:
            pred = model.predict(grid.problem(c), suite.DTYPES[c.dtype].name, layout, k, dev)
            assert pred.supported, (c, k)


def test_forced_kernel_call_checks_operands():
    p = Problem(None, 3, 100, 2)
    f = kernel_call.kernel_product("tsm2t", p, "float32", "tn")
    a, b = jnp.ones((100, 3), jnp.float32), jnp.ones((100, 2), jnp.float32)
    assert float(f(a, b)[1, 1]) == 100.0
    with pytest.raises(TypeError, match="tsm2t"):
        f(a.astype(jnp.float16), b.astype(jnp.float16))
    with pytest.raises(TypeError, match="shapes"):
        f(a[:50], b[:50])
    with pytest.raises(ValueError, match="does not take layout"):
        kernel_call.kernel_product("tsm2t", p, "float32", "nn")


# -- the grid end to end on CPU ---------------------------------------------------------------


@pytest.mark.slow
def test_grid_end_to_end_cpu(tmp_path, capsys):
    argv = ["--tiny", "--grid", "6", "--grid-seed", "2", "--model", "--out", str(tmp_path)]
    assert cli.main(argv) == 0
    printed = capsys.readouterr()
    assert "grid routing (routed <=" in printed.out and "best kernel" in printed.out
    assert "[6/6]" in printed.err and "routed" in printed.err

    doc = json.loads((tmp_path / "bench.json").read_text())
    assert not (tmp_path / report.PARTIAL).exists()
    assert doc["grid"]["shapes"] == 6 and doc["grid"]["spec"] == "tiny"
    assert doc["tsm2_autotune"] is False
    assert "torch" in doc["impls_skipped"]
    want = [(c.label, c.dtype) for c in grid.draw(6, 2, grid.TINY)]
    shapes: dict = {}
    for rec in doc["records"]:
        assert rec["grid"] is True
        shapes.setdefault((rec["case"], rec["dtype"]), {})[rec["impl"]] = rec
    assert list(shapes) == want
    for (label, dtype), recs in shapes.items():
        c = suite.Case(*label.split(":")[:1], dtype, *map(int, label.split(":")[1].split("x")))
        kernels = grid.kernels_for(c, model.current_device())
        assert set(recs) == {"tsm2", "jnp", *kernels}
        for name, rec in recs.items():
            assert rec["status"] == "ok", rec
            assert rec["rel_error"] <= rec["tolerance"]
            assert rec["kernel"] == (name if name in kernels else None)
            assert rec["predicted_seconds"] > 0 and rec["predicted_target"]
            if rec["kernel"]:
                assert rec["predicted_target"] == rec["kernel"]
    routing = doc["summary"]["checks"]["grid_routing"]
    assert routing["shapes"] == 6 and routing["judged"] == 6 and not routing["kernel_failures"]
    assert routing["pass"] is False  # fewer than 100 shapes, whatever the times
    assert doc["summary"]["checks"]["rl_peers"]["cases"] == 0  # grid records stay out
    md = (tmp_path / "bench.md").read_text()
    assert "| family | case | dtype | MB | floor us | route | tsm2 us | % floor | model us |" in md

    # Two halves of a grid merge into the whole.
    assert cli.main([*argv[:5], "--grid-start", "4", "--out", str(tmp_path / "b")]) == 0
    half = json.loads((tmp_path / "b" / "bench.json").read_text())
    assert [r["grid_index"] for r in half["records"] if r["impl"] == "tsm2"] == [4, 5]


def test_grid_autotune_flag_lowers_the_routed_column_with_autotune_on(tmp_path, monkeypatch):
    """--autotune: the routed column (only) is traced and lowered under jax_tsm2.autotune();
    bench.json records it. On CPU nothing is timed (routing times in mode auto on CUDA)."""
    seen = []
    real = jax_tsm2.matmul

    def matmul(a, b):
        seen.append(jax_tsm2.get_autotune())
        return real(a, b)

    monkeypatch.setattr(jax_tsm2, "matmul", matmul)
    argv = ["--tiny", "--grid", "2", "--family", "R", "--autotune", "--out", str(tmp_path)]
    assert cli.main(argv) == 0
    doc = json.loads((tmp_path / "bench.json").read_text())
    assert doc["tsm2_autotune"] is True and doc["options"]["autotune"] is True
    assert "autotune on" in doc["impls"]["tsm2"]
    assert seen and all(seen)  # every product of the routed column; the others do not route
    assert {r["status"] for r in doc["records"]} == {"ok"}


def test_time_budget_and_checkpoint(tmp_path):
    seen = []

    def checkpoint(doc):
        seen.append(len(doc["records"]))
        report.write_partial(doc, tmp_path)

    opts = Options(mode="tiny", grid=4, families=grid.GRID_FAMILIES, dtypes=["f32"])
    opts.repeats, opts.warmup, opts.max_calls = 1, 0, 2
    doc = run_suite(opts, log=lambda _: None, checkpoint=checkpoint)
    assert len(seen) == 4 and seen == sorted(seen) and seen[-1] == len(doc["records"])
    # what a run killed after its last case leaves: --merge summarizes it
    partial = tmp_path / report.PARTIAL
    assert cli.main(["--merge", str(partial), "--out", str(tmp_path / "m")]) == 0
    merged = json.loads((tmp_path / "m" / "bench.json").read_text())
    assert merged["summary"]["checks"]["grid_routing"]["shapes"] == 4
    opts.time_budget_s = 1e-9
    doc = run_suite(opts, log=lambda _: None)
    assert doc["stopped_early"]["cases_run"] == 0 and doc["records"] == []
    assert any(s.startswith("stopped early: 0 of 4") for s in report.summary_lines(doc))


# -- --model ----------------------------------------------------------------------------------


def test_model_fields_on_a_tiny_cpu_run(tmp_path, capsys):
    cases = "R:96x320x16,L:1000x8x8,NT:300x96x16,TN:20000x8x8,GRAD:513x32x3"
    argv = ["--tiny", "--case", cases, "--dtype", "f32", "--model", "--out", str(tmp_path)]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "model us" in out and "err %" in out and "model error (median" in out
    doc = json.loads((tmp_path / "bench.json").read_text())
    assert doc["model"]["name"] == model.current_device().name
    for rec in doc["records"]:
        assert {"predicted_seconds", "predicted_target", "model_error"} <= set(rec)
        if rec["family"] == "GRAD" or rec["impl"] == "torch":
            assert rec["predicted_seconds"] is None  # the model has nothing for these
            continue
        assert rec["impl"] in JAX_IMPLS and rec["status"] == "ok"
        assert rec["predicted_seconds"] > 0
        want = (rec["predicted_seconds"] - rec["seconds"]) / rec["seconds"]
        assert rec["model_error"] == pytest.approx(want)
        if rec["impl"] == "jnp_highest":
            assert rec["predicted_target"] == "xla (highest)"
    error = doc["summary"]["checks"]["model_error"]
    assert error["suite"]["records"] == 12 and error["grid"] is None  # 4 cases x 3 impls
    assert set(error["suite"]["per_impl"]) == set(JAX_IMPLS)
    errors = [abs(r["model_error"]) for r in doc["records"] if r["model_error"] is not None]
    assert len(errors) == 12
    assert error["suite"]["median_abs_error"] == pytest.approx(statistics.median(errors))
    assert "`model us`" in (tmp_path / "bench.md").read_text()


def test_a_calibrated_gpu_gets_the_calibrated_prediction(monkeypatch):
    """On a GPU the driver describes and that has a calibration, the prediction is the
    model at the calibration's read ceiling times the probes' correction near the shape;
    XLA's dot at highest precision (never probed) keeps the model."""
    import dataclasses

    from jax_tsm2.tune import calibrate

    dev = dataclasses.replace(model.H100_SXM, source="driver")
    probe = {"dtype": "float32", "layout": "nn", "batch": None, "m": 10**6, "k": 8, "n": 8,
             "seconds": {"tsm2l": 9e-5, "xla": 4e-5}}  # fmt: skip
    gpu = {"key": dev.key, "name": dev.name, "cc": [9, 0], "sm_count": 132}
    doc = {"schema": calibrate.SCHEMA, "version": calibrate.VERSION, "read_bytes_per_s": 4e12,
           "launch_seconds": 2e-6, "device": gpu, "made": {}, "records": [probe]}  # fmt: skip
    data = calibrate.CalibrationData.from_json(doc)
    corr = calibrate.Corrections(data, dev)
    monkeypatch.setattr(calibrate, "corrections_for", lambda d: (corr, None))
    rec = {"family": "L", "dtype": "f32", "operand_shapes": [[10**6, 8], [8, 8]],
           "status": "ok", "seconds": 5e-5}  # fmt: skip
    jnp_impl = next(i for i in impls.jax_impls() if i.name == "jnp")
    got = predict.fields(rec, jnp_impl, dev, {}, "gpu")
    p = model.problem_from(((10**6, 8), (8, 8)), "nn")
    raw = model.predict(p, "float32", "nn", "xla", device=corr.device).seconds
    factor, support = corr.factor("xla", p, "float32", "nn")
    assert support == pytest.approx(1.0) and factor != pytest.approx(1.0)
    assert got["predicted_source"] == "calibration"
    assert got["predicted_seconds"] == pytest.approx(raw * factor)
    assert got["model_error"] == pytest.approx((raw * factor - 5e-5) / 5e-5)
    highest = next(i for i in impls.jax_impls() if i.name == "jnp_highest")
    assert predict.fields(rec, highest, dev, {}, "gpu")["predicted_source"] == "model"
    # Without a calibration, or on the preset: the model.
    monkeypatch.setattr(calibrate, "corrections_for", lambda d: None)
    assert predict.fields(rec, jnp_impl, dev, {}, "gpu")["predicted_source"] == "model"


def test_model_off_adds_nothing():
    opts = Options(mode="tiny", cases=["L:1000x8x8"], dtypes=["f32"], impls=["jnp"])
    opts.repeats, opts.warmup, opts.max_calls = 1, 0, 2
    doc = run_suite(opts, log=lambda _: None)
    assert "predicted_seconds" not in doc["records"][0] and "model" not in doc
    assert "model_error" not in doc["summary"]["checks"]


ROUTE_CASES = [
    ("R", "f32", 20480, 20480, 8),
    ("L", "bf16", 10_000_000, 8, 8),
    ("L", "f32", 10_000_000, 8, 8),
    ("NT", "bf16", 1_000_000, 8, 8),
    ("NT", "f32", 1_000_000, 256, 16),
    ("TN", "f32", 10_000_000, 16, 16),
    ("TN", "f64", 1_000_000, 64, 64),
    ("TN", "bf16", 10_000_000, 16, 16),
    ("TN", "f32", 100_000, 16, 16),
    ("S", "f32", 4, 4096, 4096),
]


@pytest.mark.parametrize("mode", ["auto", "always"])
@pytest.mark.parametrize("fam,dtype,m,k,n", ROUTE_CASES)
def test_routed_target_is_what_the_cuda_lowering_emits(fam, dtype, m, k, n, mode):
    """predict.routed_target (what --model predicts for tsm2) names the kernel that
    jax_tsm2.matmul's CUDA lowering calls for the family's product, transposes folded."""
    family = suite.FAMILIES[fam]
    c = suite.Case(fam, dtype, m, k, n)
    rec = {"family": fam, "dtype": dtype, "operand_shapes": family.operand_shapes(c)}
    ops = [jax.ShapeDtypeStruct(s, suite.DTYPES[dtype]) for s in family.operand_shapes(c)]
    with jax_tsm2.custom_call_mode(mode):  # conftest.py enables x64 (f64 operands)
        fn = jax.jit(lambda *o: family.apply(jax_tsm2.matmul, *o))
        text = fn.trace(*ops).lower(lowering_platforms=("cuda",)).as_text()
    target, layout = predict.routed_target(rec, mode)
    assert case.route_of(text) == target
    assert layout in predict.FAMILY_LAYOUTS[fam]


# -- grid routing on synthetic records-----------------------------------------------------------


def _rec(impl, label, seconds, kernel=None, status="ok", route="xla", dtype="f32"):
    fam = label.split(":")[0]
    return {
        "impl": impl,
        "case": label,
        "family": fam,
        "dtype": dtype,
        "m": 1000,
        "k": 64,
        "n": 8,
        "bytes": 10**6,
        "grid": True,
        "kernel": kernel,
        "status": status,
        "seconds": seconds if status == "ok" else None,
        "route": route if impl == "tsm2" else None,
    }


def test_grid_routing_misses_and_passes():
    shapes = [
        # a 9% loss to a kernel: within 1.10x
        [_rec("tsm2", "L:a", 1.09), _rec("jnp", "L:a", 1.09), _rec("tsm2l", "L:a", 1.0, "tsm2l")],
        # 20% slower than the best kernel: a miss
        [_rec("tsm2", "R:b", 1.2), _rec("jnp", "R:b", 1.25), _rec("tsm2r", "R:b", 1.0, "tsm2r")],
        # routed a kernel, XLA's dot 30% faster: a miss against XLA
        [_rec("tsm2", "TN:c", 1.3, route="tsm2t"), _rec("jnp", "TN:c", 1.0)],
        # a kernel that fails its check is no reference, and is listed
        [
            _rec("tsm2", "S:d", 1.0),
            _rec("jnp", "S:d", 1.0),
            _rec("tsm2s", "S:d", 0.5, "tsm2s", status="failed-check"),
        ],
        # the routed path failed: a miss whatever the times
        [_rec("tsm2", "NT:e", 1.0, status="error: boom"), _rec("jnp", "NT:e", 1.0)],
        # nothing to compare with: not judged
        [_rec("tsm2", "NT:f", 1.0), _rec("jnp", "NT:f", 1.0, status="failed-check")],
    ]
    records = [r for group in shapes for r in group]
    records.append({**_rec("jnp", "R:x", 1.0), "grid": False})  # suite records are ignored
    b = grid_report.grid_routing(records)
    assert b["shapes"] == 6 and b["judged"] == 5
    assert [(m["case"], m["best"]) for m in b["misses"]] == [
        ("R:b", "tsm2r"),
        ("TN:c", "xla"),
        ("NT:e", "xla"),
    ]
    assert b["misses"][0]["ratio"] == pytest.approx(1.2) and b["misses"][2]["ratio"] is None
    assert [x["case"] for x in b["not_judged"]] == ["NT:f"]
    assert b["kernel_failures"] == [
        {"case": "S:d", "dtype": "f32", "kernel": "tsm2s", "status": "failed-check"}
    ]
    assert b["worst_ratio"] == pytest.approx(1.3) and b["pass"] is False
    assert b["routes"] == {"xla": 4, "tsm2t": 1}
    lines = grid_report.summary_lines(b)
    assert lines[0].startswith("grid routing (routed") and "2/5 shapes within" in lines[0]
    assert any("1 forced-kernel records failed: tsm2s S:d f32" in s for s in lines)
    md = "\n".join(grid_report.misses_markdown(b))
    assert "| R:b | f32 | xla | 1200000.0 |" in md and "1.200x of tsm2r" in md


def test_grid_routing_passes_with_enough_shapes():
    records = []
    for i in range(grid_report.MIN_SHAPES):
        label = f"L:{i}"
        records += [_rec("tsm2", label, 1.0), _rec("jnp", label, 1.0)]
        records.append(_rec("tsm2l", label, 0.95, "tsm2l"))  # 5% faster: within 1.10x
    b = grid_report.grid_routing(records)
    assert b["judged"] == 100 and not b["misses"] and b["pass"] is True
    doc = {"ceilings": {}, "records": records, "summary": report.summarize({"records": records})}
    lines = report.summary_lines(doc)
    assert any("100/100 shapes within" in s and s.endswith("pass") for s in lines)
    assert not any(s.startswith("R/L ") for s in lines)  # a grid-only run: no R/L checks


def _timed(rec, samples, program):
    return {**rec, "samples": samples, "seconds": statistics.median(samples), "program": program}


def test_grid_routing_pools_one_program_timed_twice():
    """Routed to XLA's own program (equal digests): the two medians are noise, so both count
    as the pooled median. Different programs, or no digest, are never pooled."""
    noisy = [12.3, 8.8, 9.2, 13.9, 6.1]  # H100, L 150977x4x4 f16, us
    quiet = [8.2, 7.2, 7.5, 22.1, 6.1]
    same = [
        _timed(_rec("tsm2", "L:a", 0), noisy, "d1"),
        _timed(_rec("jnp", "L:a", 0), quiet, "d1"),
        _timed(_rec("tsm2l", "L:a", 0, "tsm2l"), [10.7] * 5, "k1"),
    ]
    b = grid_report.grid_routing(same)
    v = b["results"][0]
    assert v["pooled_seconds"] == pytest.approx(8.5) and v["ratio"] == pytest.approx(1.0)
    assert not b["misses"] and b["pooled"] == 1
    lines = grid_report.summary_lines(b)
    assert any("1 shapes compiled to a reference's own program (1 XLA's dot's" in s for s in lines)
    for other in ("d2", None):  # a different program, or none recorded: medians as measured
        recs = [same[0] | {"program": other}, same[1], same[2]]
        b = grid_report.grid_routing(recs)
        assert b["results"][0]["pooled_seconds"] is None and b["pooled"] == 0
        assert b["misses"] and b["misses"][0]["ratio"] == pytest.approx(9.2 / 7.5)


def test_grid_routing_pools_the_routed_kernel_with_the_same_forced_kernel():
    """Routed to TSM2L, which was also forced: one program (H100, L 35969x6x32 f32, us),
    pooled with the forced kernel's samples, and judged against XLA's dot as before."""
    recs = [
        _timed(_rec("tsm2", "L:a", 0), [17.5, 17.7, 18.0, 14.5, 16.1], "k1"),
        _timed(_rec("jnp", "L:a", 0), [17.0, 38.2, 13.4, 14.4, 14.2], "x1"),
        _timed(_rec("tsm2l", "L:a", 0, "tsm2l"), [14.3, 22.6, 15.0, 13.5, 13.8], "k1"),
    ]
    b = grid_report.grid_routing(recs)
    v = b["results"][0]
    assert v["pooled_with"] == "tsm2l" and v["pooled_seconds"] == pytest.approx(15.55)
    assert v["best"] == "xla" and v["ratio"] == pytest.approx(15.55 / 14.4)
    assert not b["misses"] and b["pooled"] == 1 and b["pooled_with_xla"] == 0
    lines = grid_report.summary_lines(b)
    assert any("(0 XLA's dot's, 1 a forced kernel's)" in s for s in lines)


def test_program_digest_tells_programs_apart():
    """Same program, same digest (jnp and the routed path where it lowers to XLA's dot on CPU);
    a different one (another op, another precision) differs."""
    a = [jnp.ones((100, 16), jnp.float32) + i for i in range(2)]
    b = [jnp.ones((16, 8), jnp.float32) + i for i in range(2)]

    def digest(f):
        return timing.program_digest(timing.compile_jax(f, [a, b])[0])

    plain = digest(jnp.matmul)
    assert plain and plain == digest(lambda x, y: jax_tsm2.matmul(x, y))
    assert plain != digest(lambda x, y: 2 * jnp.matmul(x, y))
    assert plain != digest(lambda x, y: jnp.matmul(x, y, precision="highest"))


def test_gpus_splits_the_grid_over_child_processes_and_merges(tmp_path, capsys):
    """``--gpus 2`` runs two children on disjoint slices of the same draw and merges them
    into the document a single run of the grid gives (the same shapes, in order)."""
    argv = ["--tiny", "--grid", "5", "--grid-seed", "3", "--dtype", "f32", "--impl", "jnp"]
    assert cli.main([*argv, "--gpus", "2", "--out", str(tmp_path / "two")]) == 0
    log = capsys.readouterr().err
    assert "[gpu 0]" in log and "[gpu 1]" in log
    doc = json.loads((tmp_path / "two" / "bench.json").read_text())
    assert [r["case"] for r in doc["records"]] == [
        c.label for c in grid.draw(5, 3, grid.TINY, dtypes=["f32"])
    ]
    assert len(doc["merged_from"]) == 2 and doc["grid"]["shapes"] == 5
    assert "--gpus 2" in doc["command_line"]


def test_gpus_answers_bad_requests_with_usage(capsys, monkeypatch):
    for argv, why in [
        (["--tiny", "--gpus", "2"], "needs --grid"),
        (["--tiny", "--grid", "4", "--gpus", "0"], "an integer >= 1"),
    ]:
        with pytest.raises(SystemExit) as exc:
            cli.main(argv)
        assert exc.value.code == 2 and why in capsys.readouterr().err
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    with pytest.raises(SystemExit):
        cli.main(["--tiny", "--grid", "4", "--gpus", "2"])
    assert "lists 1 GPUs for 2" in capsys.readouterr().err


def test_xla_records_carry_xlas_plan_whatever_the_calibration(monkeypatch):
    """A run routed with a calibration of rules (or none) still records XLA's plan on each
    record of XLA's dot at default precision, so a replay can weigh plans against rules on
    it; at highest precision, and off a GPU (no plan), nothing is recorded."""
    import dataclasses

    from jax_tsm2.model import xla_plan
    from jax_tsm2.tune import calibrate

    plan = xla_plan.XlaPlan(3e6, 3, 0.0, ("fusion:kLoop", "fusion:kLoop", "fusion:kCustom"))
    asked = []

    def fake_plan(p, dtype, layout, precision="default"):
        asked.append((p.m, p.k, p.n, dtype, layout))
        return plan

    monkeypatch.setattr(xla_plan, "plan", fake_plan)
    monkeypatch.setattr(calibrate, "corrections_for", lambda d: None)
    dev = dataclasses.replace(model.H100_SXM, source="driver")
    rec = {"family": "NT", "dtype": "f32", "operand_shapes": [[4099, 31], [7, 31]],
           "status": "ok", "seconds": 5e-5}  # fmt: skip
    by_name = {i.name: i for i in impls.jax_impls()}
    got = predict.fields(rec, by_name["jnp"], dev, {}, "gpu")
    assert xla_plan.XlaPlan.from_json(got["xla_plan"]) == plan
    assert asked == [(4099, 31, 7, "float32", "nt")]
    assert "xla_plan" not in predict.fields(rec, by_name["jnp_highest"], dev, {}, "gpu")
    monkeypatch.setattr(xla_plan, "plan", lambda *a, **k: None)
    assert "xla_plan" not in predict.fields(rec, by_name["jnp"], dev, {}, "gpu")

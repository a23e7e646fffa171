"""The calibration: its probe design, its file, and the corrections routing decides with.

A fake timer stands in for the GPU: "true" times are the model's prediction
times a known factor per target, so the fitted corrections and the decisions
they lead to can be checked exactly.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import threading
import time
import types
import warnings

import filelock
import pytest

from jax_tsm2 import model
from jax_tsm2.problem import Problem
from jax_tsm2.tune import cache, calibrate, calibration_files

DEV = model.H100_SXM
LAUNCH = 5e-6
# The model as a calibration with that launch corrects it: its floors at the launch.
CALIBRATED = calibrate.measured_floor(model.CALIBRATION, LAUNCH)


def _model_seconds(target, p, dtype, layout):
    dev = DEV.with_bandwidth(3.0e12)
    return model.predict(p, dtype, layout, target, dev, CALIBRATED).seconds


def fake_timer(factors: dict[str, float]):
    def timer(target, p, dtype, layout):
        return _model_seconds(target, p, dtype, layout) * factors.get(target, 1.0)

    return timer


def measured(factors, **design):
    probes = calibrate.design(**design)
    return calibrate.measure(
        probes, fake_timer(factors), DEV, read_bytes_per_s=3.0e12, launch_seconds=LAUNCH, log=None
    )


def test_program_probes_are_the_real_programs_products():
    from jax_tsm2 import programs
    from jax_tsm2.bench import grid, suite

    probes = calibrate.program_probes()
    apps = programs.APP_CASES
    assert len(probes) == len({(a.shape, a.family, d) for a in apps for d in a.dtypes})
    for q in probes:
        assert q.layout == calibrate.FAMILY_LAYOUT[q.family]
    # The harness's problem of each product is the probe's.
    for a in apps:
        assert a.problem()[0] == grid.problem(suite.Case(a.family, a.dtypes[0], *a.shape))
    # A.T @ Q of a randomized SVD: 100000 rows, a 2000 x 32 result
    assert calibrate.Probe("TN", "float32", "tn", Problem(None, 2000, 100_000, 32)) in probes
    data = calibrate.measure(
        probes[:3], fake_timer({}), DEV, read_bytes_per_s=3.0e12, launch_seconds=5e-6, log=None
    )
    assert [r.problem for r in data.records] == [q.problem for q in probes[:3]]
    assert all("xla" in r.seconds for r in data.records)


def test_design_is_deterministic_even_and_inside_the_window():
    probes = calibrate.design(per_cell=3)
    assert probes == calibrate.design(per_cell=3)
    assert probes != calibrate.design(per_cell=3, seed=1)
    cells = {(q.family, q.dtype) for q in probes}
    assert len(cells) == len(calibrate.REGIONS) * len(calibrate.DTYPES)
    # round robin: the first len(cells) probes are one per cell
    assert len({(q.family, q.dtype) for q in probes[: len(cells)]}) == len(cells)
    for q in probes:
        size = calibrate.problem_bytes(q.problem, q.dtype)
        assert calibrate.MIN_BYTES <= size <= calibrate.MAX_PROBE_BYTES, q
        assert q.layout == calibrate.FAMILY_LAYOUT[q.family]
    with pytest.raises(ValueError, match="per_cell"):
        calibrate.design(per_cell=0)
    with pytest.raises(ValueError, match="unknown family"):
        calibrate.design(families=("Q",))


def test_corrections_recover_the_factor_near_the_probes():
    data = measured({"tsm2l": 1.3, "tsm2r": 0.8, "xla": 1.1}, per_cell=4, families=("L",))
    corr = calibrate.Corrections(data, DEV)
    for r in data.records:
        for target, want in (("tsm2l", 1.3), ("xla", 1.1)):
            if target in r.seconds:
                f, support = corr.factor(target, r.problem, r.dtype, r.layout)
                assert support >= 1.0
                # shrunk towards 1 by the prior, never past the truth
                assert 1.0 < f <= want + 1e-9
                assert math.log(f) > 0.7 * math.log(want)


def test_corrections_far_from_every_probe_fall_back_to_the_pooled_probes():
    """With no probe of its own cell near, a shape takes its layout's probes in every dtype,
    and with none of the layout near either, the target's mean over all its probes: the
    GPU's general departure from the model, here 2x for XLA's dot, shrunk by the prior."""
    data = measured({"xla": 2.0, "tsm2l": 0.5}, per_cell=2, families=("L",), dtypes=("float32",))
    corr = calibrate.Corrections(data, DEV)
    # tn has one kind of rows, that of whole vectors: the probes of that kind stand in.
    n = sum(calibrate.rows_aligned(r.problem, r.dtype, r.layout) for r in data.records)
    pooled = math.exp(n * math.log(2.0) / (n + calibrate.PRIOR_WEIGHT))
    f, support = corr.factor("xla", Problem(None, 3, 5_000_000, 2), "float32", "tn")
    assert support == 0.0 and f == pytest.approx(pooled)  # no tn probe at all
    # f64 rows of one element, not whole vectors: probes of both kinds stand in.
    far = Problem(None, 10**7, 1, 1)
    every = math.exp(len(data.records) * math.log(2.0) / (len(data.records) + 0.25))
    f, support = corr.factor("xla", far, "float64", "nn")
    assert support == 0.0 and f == pytest.approx(every, rel=1e-2)  # the nn probes, far
    assert corr.factor("tsm2l", far, "float64", "nn")[0] < 1.0
    assert corr.factor("tsm2s", far, "float64", "nn") == (1.0, 0.0)  # a target never probed


def test_the_calibrated_model_floors_at_the_measured_launch():
    data = measured({}, per_cell=2, families=("L",), dtypes=("float32",))
    corr = calibrate.Corrections(data, DEV)
    assert corr.calibration.t_floor == corr.calibration.xla_t_floor == LAUNCH
    tiny = Problem(None, 1000, 4, 4)
    raw = model.predict(tiny, "float32", "nn", "xla", corr.device)
    calibrated = model.predict(tiny, "float32", "nn", "xla", corr.device, corr.calibration)
    assert raw.seconds == model.CALIBRATION.xla_t_floor and raw.bound == "launch"
    assert calibrated.seconds < raw.seconds
    # At every probe, a model that is right to a factor of one is left alone.
    for r in data.records:
        for target in r.seconds:
            assert corr.factor(target, r.problem, r.dtype, r.layout)[0] == pytest.approx(1.0)


@pytest.mark.parametrize("kernel_factor, want", [(0.5, "kernel"), (3.0, "xla")])
def test_decide_follows_the_measurements(kernel_factor, want):
    # The model's own preference aside, the measured factors decide.
    data = measured(
        {"tsm2r": kernel_factor, "tsm2l": kernel_factor, "xla": 1.0},
        per_cell=4,
        families=("R",),
        dtypes=("float32",),
    )
    corr = calibrate.Corrections(data, DEV)
    for r in data.records:
        names = [t for t in r.seconds if t != "xla"]
        truth = {t: s for t, s in r.seconds.items()}
        d = calibrate.decide(r.problem, r.dtype, r.layout, names, corr)
        fastest = min(truth, key=truth.__getitem__)
        if want == "xla":
            assert d.target == "xla", (r, d)
        elif truth["xla"] > 1.6 * truth[fastest]:
            assert d.target != "xla", (r, d)
        assert d.target in (*names, "xla")
        assert d.reason and d.rule in calibrate.RULES


def test_a_product_the_calibration_timed_is_decided_by_its_own_times():
    """XLA's dot can change algorithm between neighbouring shapes: a probe of exactly the
    product decides it, whatever its neighbours say; a neighbour is still corrected."""
    data = measured({"tsm2r": 0.5, "xla": 1.0}, per_cell=4, families=("R",), dtypes=("float32",))
    corr = calibrate.Corrections(data, DEV)
    base = data.records[0]
    names = [t for t in base.seconds if t != "xla"]
    assert calibrate.decide(base.problem, "float32", "nn", names, corr).target != "xla"
    # The same product timed again with XLA's dot reading its operands once, 3x faster
    # than everything nearby says.
    fast = {**base.seconds, "xla": min(base.seconds.values()) / 3}
    timed = calibrate.Record("float32", "nn", base.problem, fast)
    data2 = dataclasses.replace(data, records=(timed, *data.records[1:]))
    corr2 = calibrate.Corrections(data2, DEV)
    d = calibrate.decide(base.problem, "float32", "nn", names, corr2)
    assert d.target == "xla" and "at this shape" in d.reason and d.rule == "measured"
    assert d.seconds["xla"] == fast["xla"]
    # At highest precision the probe (timed at the default) does not decide.
    high = calibrate.decide(base.problem, "float32", "nn", names, corr2, "highest")
    assert "at this shape" not in high.reason
    # One row more is another product: it is corrected as before.
    near = Problem(None, base.problem.m + 1, base.problem.k, base.problem.n)
    assert "at this shape" not in calibrate.decide(near, "float32", "nn", names, corr2).reason


def test_margin_grows_where_no_probe_is_near():
    data = measured({"tsm2l": 0.7}, per_cell=2, families=("L",), dtypes=("float32",))
    corr = calibrate.Corrections(data, DEV)
    near = data.records[0]
    d_near = calibrate.decide(near.problem, "float32", "nn", ["tsm2l", "tsm2r"], corr)
    # An octave fewer rows, rows of the same kind (rows_aligned: probes of the other kind
    # never count), still inside the sizes probed.
    far = Problem(None, near.problem.m // 2, near.problem.k, near.problem.n)
    d_far = calibrate.decide(far, "float32", "nn", ["tsm2l"], corr)
    assert d_near.margin < d_far.margin <= calibrate.FAR_MARGIN


def test_probes_correct_only_shapes_of_their_own_kind_of_rows():
    """XLA's dot and the kernels run rows of whole 16-byte vectors differently: a probe
    with such rows says nothing of a shape whose rows are not, and the other way round."""
    data = measured({"xla": 2.0}, per_cell=4, families=("R",), dtypes=("float32",))
    kinds = {calibrate.rows_aligned(r.problem, r.dtype, r.layout) for r in data.records}
    assert kinds == {True, False}  # the design draws both kinds
    corr = calibrate.Corrections(data, DEV)
    for r in data.records:
        p = r.problem
        f, support = corr.factor("xla", p, "float32", "nn")
        assert support >= 1.0 and f > 1.5
        # One element more per row flips the kind (f32: 4 elements per vector).
        other = Problem(None, p.m, p.k + 1 if p.k % 4 == 0 else p.k + (4 - p.k % 4), p.n)
        assert calibrate.rows_aligned(other, "float32", "nn") != calibrate.rows_aligned(
            p, "float32", "nn"
        )
        # The other kind's probes add no support: the correction rests on its own kind's,
        # shrunk towards the layout's probes of the kinds that may stand in for it.
        kind = calibrate.rows_aligned(other, "float32", "nn")
        same = [
            q for q in data.records if calibrate.rows_aligned(q.problem, q.dtype, q.layout) == kind
        ]
        only = calibrate.Corrections(dataclasses.replace(data, records=tuple(same)), DEV)
        got, want = (
            corr.factor("xla", other, "float32", "nn"),
            only.factor("xla", other, "float32", "nn"),
        )
        assert got[1] == pytest.approx(want[1])
        assert got[0] == pytest.approx(want[0], rel=0.1)


def test_tsm2l_probes_correct_only_shapes_of_their_own_code_path():
    """TSM2L's L tile and its tensor-core tile share a cell (f32, rows of whole vectors) and
    err on opposite sides of the model: each corrects the shapes of its own path, and a path
    no probe of the cell ran (the row-per-thread kernel) takes the whole cell's correction.
    The bound far from the probes stays over both."""
    tile, mma, row = (
        Problem(None, 10**6, 16, 4),
        Problem(None, 10**6, 16, 16),
        Problem(None, 10**6, 8, 8),
    )
    paths = {"L": tile, "L mma": mma, "row": row}
    for want, p in paths.items():
        assert model.predict(p, "float32", "nn", "tsm2l", DEV, CALIBRATED).params["tile"] == want
    factors = {tile: 0.7, mma: 1.4}
    records = tuple(
        calibrate.Record(
            "float32", "nn", p, {"tsm2l": f * _model_seconds("tsm2l", p, "float32", "nn")}
        )
        for p, f in factors.items()
    )
    data = calibrate.CalibrationData({"key": "GPU"}, 3.0e12, LAUNCH, records, {})
    corr = calibrate.Corrections(data, DEV)
    f_tile = corr.factor("tsm2l", tile, "float32", "nn")[0]
    f_mma = corr.factor("tsm2l", Problem(None, 2 * 10**6, 16, 32), "float32", "nn")[0]
    assert f_tile < 0.75 and f_mma > 1.3
    f_row = corr.factor("tsm2l", row, "float32", "nn")[0]
    assert 0.75 < f_row < 1.3
    # The prediction routing already made (decide) names the path as predicting again would.
    for p in paths.values():
        pred = model.predict(p, "float32", "nn", "tsm2l", corr.device, corr.calibration)
        assert corr.factor("tsm2l", p, "float32", "nn", pred) == corr.factor(
            "tsm2l", p, "float32", "nn"
        )
    assert corr.extreme("tsm2l", tile, "float32", "nn") == pytest.approx(1.4, rel=1e-6)
    # No bf16 probe: the layout's probes of the same path stand in.
    half_tile = Problem(None, 10**6, 24, 4)
    assert (
        model.predict(half_tile, "bfloat16", "nn", "tsm2l", DEV, CALIBRATED).params["tile"] == "L"
    )
    assert corr.factor("tsm2l", half_tile, "bfloat16", "nn")[0] < 0.8


def test_tn_probes_correct_shapes_of_either_kind_of_rows():
    """In tn the kinds are one: XLA's dot reads a row-major A.T @ B several times over and
    TSM2T's flat stages read rows of any length alike, so probes whose rows are whole
    vectors correct a shape whose rows are not."""
    data = measured({"xla": 2.0, "tsm2t": 0.5}, per_cell=4, families=("TN",), dtypes=("float32",))
    aligned = tuple(r for r in data.records if calibrate.rows_aligned(r.problem, "float32", "tn"))
    assert aligned, "the design draws rows of whole vectors"
    corr = calibrate.Corrections(dataclasses.replace(data, records=aligned), DEV)
    for r in aligned:
        p = r.problem
        wide = max(p.m, p.n)  # rows_aligned looks at the wider operand's rows
        other = Problem(None, p.m + (p.m == wide), p.k, p.n + (p.n == wide and p.m != wide))
        assert not calibrate.rows_aligned(other, "float32", "tn")
        for target, want in (("xla", 2.0), ("tsm2t", 0.5)):
            f, support = corr.factor(target, other, "float32", "tn")
            assert support > 0.9 and f == pytest.approx(want, rel=0.35), (target, other)
        assert corr.extreme("tsm2t", other, "float32", "tn") is not None


def test_a_failing_target_is_left_out_and_an_all_failing_run_raises():
    def timer(target, p, dtype, layout):
        if target == "tsm2r":
            raise RuntimeError("this build has no tsm2r")
        return 1e-4

    probes = calibrate.design(per_cell=1, families=("R",), dtypes=("float32",))
    data = calibrate.measure(
        probes, timer, DEV, read_bytes_per_s=3e12, launch_seconds=5e-6, log=None
    )
    assert all("tsm2r" not in r.seconds and "xla" in r.seconds for r in data.records)
    with pytest.raises(RuntimeError, match="measured nothing"):
        calibrate.measure(
            probes, lambda *a: math.nan, DEV, read_bytes_per_s=3e12, launch_seconds=5e-6, log=None
        )


def test_budget_stops_starting_probes():
    probes = calibrate.design(per_cell=2)
    data = calibrate.measure(
        probes,
        fake_timer({}),
        DEV,
        read_bytes_per_s=3e12,
        launch_seconds=5e-6,
        budget_s=0.0,
        log=None,
    )
    assert 1 <= len(data.records) < len(probes)


class Clock:
    """A monotonic clock that advances only when told (``tick``)."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def tick(self, seconds):
        self.now += seconds


@pytest.mark.parametrize("batched", [False, True])
def test_the_budget_holds_the_whole_run(monkeypatch, batched):
    """A probe (a batch of probes, compiled together) is started only where one as long as
    the last still fits what is left, and a batch where a whole one does not fit shrinks to
    what does: with probes of 1 s and a budget of 5.5 s, five run one by one, and in batches
    of two, two whole batches and one of a probe; the run ends within the budget (stopping
    only once the budget had passed, both ran six, to 6 s; stopping at whole batches, four
    in batches)."""
    clock = Clock()
    monkeypatch.setattr(calibrate, "time", types.SimpleNamespace(monotonic=clock))
    probes = calibrate.design(per_cell=12, families=("R",), dtypes=("float32",))
    assert len(probes) > 8
    if batched:
        timer = Batched()
        run = timer.run

        def run_one_second(prep):  # each probe of a batch takes a second to time
            clock.tick(1.0)
            return run(prep)

        timer.run = run_one_second
    else:
        inner = fake_timer({})
        per_probe = {}

        def timer(target, p, dtype, layout):  # each probe takes a second in all
            clock.tick(1.0 / len(per_probe.setdefault(p, calibrate.tuner.candidates(
                p, dtype, layout, DEV))))  # fmt: skip
            return inner(target, p, dtype, layout)

    data = calibrate.measure(
        probes, timer, DEV, read_bytes_per_s=3e12, launch_seconds=5e-6, budget_s=5.5,
        log=None, workers=1,
    )  # fmt: skip
    # Batches of two probes (one worker): 2 s each; at 4 s a third would end at 6 s > 5.5,
    # and a batch of one ends at 5 s.
    assert len(data.records) == 5
    assert clock.now <= 5.5


def test_file_round_trip_and_lookup(tmp_path, monkeypatch):
    monkeypatch.setenv("JAX_TSM2_CACHE_DIR", str(tmp_path))
    data = measured({"xla": 1.2}, per_cell=1, families=("TN",), dtypes=("float64",))
    path = calibrate.store(data)
    assert path.parent == tmp_path
    found = calibrate.load(data.key)
    assert found is not None and found[1] == path
    assert found[0].records == data.records
    assert found[0].read_bytes_per_s == data.read_bytes_per_s
    assert calibrate.load("some-other-gpu") is None


def test_calibrations_can_be_turned_off(tmp_path, monkeypatch):
    """JAX_TSM2_CALIBRATION=off hides the user's and the shipped calibrations alike, and
    routing on the GPU then says so; an unknown value warns and leaves them on."""
    monkeypatch.setenv("JAX_TSM2_CACHE_DIR", str(tmp_path))
    data = measured({"xla": 1.2}, per_cell=1, families=("TN",), dtypes=("float64",))
    calibrate.store(data)
    others = sorted(calibrate.SHIPPED_DIR.glob("calibration-*.json"))
    shipped = next(p for p in others if p.name != calibrate.file_name(data.key))
    shipped_key = calibrate.CalibrationData.from_json(json.loads(shipped.read_text())).key
    for value in ("off", "0", "False", " no "):
        monkeypatch.setenv(calibrate.ENV_VAR, value)
        assert calibrate.load(data.key) is None and calibrate.load(shipped_key) is None
    monkeypatch.setenv(calibrate.ENV_VAR, "maybe")
    with pytest.warns(RuntimeWarning, match="neither on nor off"):
        assert calibrate.load(data.key) is not None
    monkeypatch.setenv(calibrate.ENV_VAR, "on")
    assert calibrate.load(shipped_key)[1] == shipped


def test_store_waits_for_the_lock_beside_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("JAX_TSM2_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cache, "LOCK_TIMEOUT_S", 0.2)
    data = measured({"xla": 1.2}, per_cell=1, families=("TN",), dtypes=("float64",))
    path = calibrate.user_path(data.key)
    # Another writer (a separate lock object, as another process would hold) has the file.
    with cache.file_lock(path), pytest.raises(filelock.Timeout):
        calibrate.store(data)
    assert not path.exists()
    assert calibrate.store(data) == path
    assert calibrate.load(data.key)[0].records == data.records


def _write(path, text):
    path.write_text(text)


@pytest.mark.parametrize(
    "content, why",
    [
        ("[" * 100_000 + "]" * 100_000, "not valid"),
        (
            '{"schema": "jax_tsm2.calibration", "version": 1, "read_bytes_per_s": '
            + "9" * 5000
            + "}",
            "",
        ),
        ('{"schema": "other"}', "not a jax_tsm2.calibration"),
        ("\xff\xfe garbage", ""),
    ],
)
def test_an_untrustworthy_file_warns_and_is_ignored(tmp_path, monkeypatch, content, why):
    monkeypatch.setenv("JAX_TSM2_CACHE_DIR", str(tmp_path))
    key = DEV.key
    _write(calibrate.user_path(key), content)
    with pytest.warns(RuntimeWarning, match="ignoring calibration"):
        assert calibrate.load(key) is None or calibrate.load(key)[1] != calibrate.user_path(key)


def test_a_record_with_bad_fields_invalidates_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("JAX_TSM2_CACHE_DIR", str(tmp_path))
    data = measured({}, per_cell=1, families=("S",), dtypes=("bfloat16",))
    doc = data.to_json()
    doc["records"][0]["seconds"] = {"tsm2s": -1.0}
    calibrate.user_path(data.key).write_text(json.dumps(doc))
    with pytest.warns(RuntimeWarning, match="probe record time"):
        assert calibration_files._read(calibrate.user_path(data.key), data.key, "x") is None


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_in_place_of_the_file_never_blocks(tmp_path, monkeypatch):
    monkeypatch.setenv("JAX_TSM2_CACHE_DIR", str(tmp_path))
    os.mkfifo(calibrate.user_path(DEV.key))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        calibration_files._read(calibrate.user_path(DEV.key), DEV.key, "x")
    assert any("not a regular file" in str(w.message) for w in caught)


def test_a_broken_user_file_falls_back_to_the_shipped_one_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("JAX_TSM2_CACHE_DIR", str(tmp_path))
    shipped = sorted(calibrate.SHIPPED_DIR.glob("calibration-*.json"))[0]
    key = calibrate.CalibrationData.from_json(json.loads(shipped.read_text())).key
    _write(calibrate.user_path(key), '{"schema": "other"}')
    says = f"Routing uses the calibration shipped.*{shipped.name}"
    with pytest.warns(RuntimeWarning, match=says):
        found = calibrate.load(key)
    assert found is not None and found[1] == shipped


def test_store_refuses_what_load_would_ignore(tmp_path):
    data = measured({}, per_cell=1, families=("S",), dtypes=("bfloat16",))
    bad = dataclasses.replace(data, read_bytes_per_s=-1.0)
    with pytest.raises(ValueError):
        calibrate.store(bad, tmp_path / "c.json")
    assert not (tmp_path / "c.json").exists()
    assert calibrate.store(data, tmp_path / "c.json").is_file()


def test_shipped_calibrations_are_valid_and_found(tmp_path, monkeypatch):
    """Every calibration shipped with the package parses, carries its provenance, and is
    what ``load`` finds for its GPU when the user has none of their own."""
    monkeypatch.setenv("JAX_TSM2_CACHE_DIR", str(tmp_path))
    shipped = sorted(calibrate.SHIPPED_DIR.glob("calibration-*.json"))
    assert shipped, "the package ships at least one calibration"
    for path in shipped:
        data = calibrate.CalibrationData.from_json(json.loads(path.read_text()))
        assert path.name == calibrate.file_name(data.key)
        assert data.made.get("command", "").startswith("python -m jax_tsm2.tune --calibrate")
        assert len(data.made.get("kernels", "")) == 12  # the digest of the kernels it timed
        assert len(data.records) >= 20 and data.read_bytes_per_s > 1e12
        found = calibrate.load(data.key)
        assert found is not None and found[1] == path


def test_far_from_the_probes_the_measured_bounds_decide():
    # TN f32: the kernel measured at 0.4-0.5 of the model everywhere, XLA's dot at 1.0-1.2.
    def timer(target, p, dtype, layout):
        t = _model_seconds(target, p, dtype, layout)
        wobble = 1.0 + 0.2 * ((p.m * 7 + p.n) % 5) / 4  # 1.0 .. 1.2, varies by shape
        return t * (0.4 * wobble if target == "tsm2t" else wobble)

    probes = calibrate.design(per_cell=6, families=("TN",), dtypes=("float32",))
    data = calibrate.measure(
        probes, timer, DEV, read_bytes_per_s=3.0e12, launch_seconds=LAUNCH, log=None
    )
    corr = calibrate.Corrections(data, DEV)
    slowest = corr.extreme("tsm2t", probes[0].problem, "float32", "tn")
    fastest = corr.extreme("xla", probes[0].problem, "float32", "tn")
    assert 0.4 <= slowest <= 0.48 + 1e-9 and 1.0 - 1e-9 <= fastest <= 1.2
    # Inside the probed sizes, between probes: every measurement says the kernel wins.
    ms, ks, ns = zip(*[(q.problem.m, q.problem.k, q.problem.n) for q in probes], strict=True)
    mid = lambda v: int(math.sqrt(min(v) * max(v)))
    between = Problem(None, mid(ms), mid(ks), 3)
    d = calibrate.decide(between, "float32", "tn", ["tsm2t"], corr)
    assert d.target == "tsm2t", d
    # Far outside them nothing bounds XLA's dot: it is assumed at its best, and kept.
    outside = Problem(None, 8 * max(ms), 20 * max(ks), 8 * max(ns))
    assert corr.extreme("xla", outside, "float32", "tn") is None
    d = calibrate.decide(outside, "float32", "tn", ["tsm2t"], corr)
    assert (d.target, d.rule) == ("xla", "unprobed"), d
    assert "tsm2t" in d.reason and "no kernel takes" not in d.reason


def _aligned_only(data: calibrate.CalibrationData) -> calibrate.CalibrationData:
    keep = tuple(r for r in data.records if calibrate.rows_aligned(r.problem, r.dtype, r.layout))
    assert keep and len(keep) < len(data.records), "the design draws both kinds of rows"
    return dataclasses.replace(data, records=keep)


@pytest.mark.parametrize("kernel_factor, want", [(0.5, "tsm2s"), (3.0, "xla")])
def test_where_no_probe_of_its_dtype_and_kind_spans_a_shape_the_layouts_probes_bound_it(
    kernel_factor, want
):
    """S probes in f32 with rows of whole vectors only; an f16 shape whose rows are not. No
    probe of its own cell spans it, so the layout's probes in every dtype stand in: TSM2S
    is taken at the least favourable correction they measured, and runs where even that
    beats XLA's dot, corrected from its probes of the layout."""
    data = _aligned_only(
        measured({"tsm2s": kernel_factor}, per_cell=4, families=("S",), dtypes=("float32",))
    )
    corr = calibrate.Corrections(data, DEV)
    probe = max(data.records, key=lambda r: r.problem.k * r.problem.n).problem
    shape = Problem(None, probe.m, probe.k, probe.n + 1)
    assert not calibrate.rows_aligned(shape, "float16", "nn")
    assert corr.extreme("tsm2s", shape, "float16", "nn") is None  # nothing of its own cell
    assert corr.layout_extreme("tsm2s", shape, "float16", "nn") == pytest.approx(kernel_factor)
    assert model.predict(shape, "float16", "nn", "tsm2s", DEV).bound != "launch"
    d = calibrate.decide(shape, "float16", "nn", ["tsm2s"], corr)
    assert d.target == want, d
    # At 3x, TSM2S is also predicted below MIN_FLOOR_FRACTION of the read ceiling, which
    # keeps XLA's dot before the bound is weighed.
    slow = d.seconds["tsm2s"] * calibrate.MIN_FLOOR_FRACTION > calibrate.xla_best_case(
        shape, "float16", corr.device, data.launch_seconds
    )
    assert ("one pass at the read ceiling" if slow else "least favourable correction") in d.reason
    assert d.rule == ("floor fraction" if slow else "layout bound")
    if want == "tsm2s":
        assert d.margin == calibrate.BASE_MARGIN
    # Outside the sizes any probe of the layout spans, no bound is known: XLA's dot.
    outside = Problem(None, shape.m, 64 * shape.k, shape.n)
    assert corr.layout_extreme("tsm2s", outside, "float16", "nn") is None
    assert calibrate.decide(outside, "float16", "nn", ["tsm2s"], corr).target == "xla"


def test_a_kernels_layout_bound_comes_from_the_probes_near_the_shape():
    """R probes in two regimes of nn f32 (rows aligned): thousands of rows against a
    skinny B, where TSM2R measured at the model, and a few rows against a wide B, at 5x.
    An f16 R shape of odd rows (no probe of its own cell) is bounded by the probes near
    it, not by the other regime's; with fewer than two near, by all of them."""

    def record(m, k, n, factor):
        p = Problem(None, m, k, n)
        secs = {t: _model_seconds(t, p, "float32", "nn") * f
                for t, f in (("tsm2r", factor), ("xla", 1.0))}  # fmt: skip
        return calibrate.Record("float32", "nn", p, secs)

    skinny = [record(4096, 4096, 4, 1.0), record(8192, 2048, 8, 1.2)]
    wide = [record(2, 8192, 8192, 5.0), record(8, 4096, 16384, 5.0)]
    data = dataclasses.replace(measured({}, per_cell=1, families=("R",)), records=())
    corr = calibrate.Corrections(dataclasses.replace(data, records=(*skinny, *wide)), DEV)
    shape = Problem(None, 6001, 3001, 5)
    assert not calibrate.rows_aligned(shape, "float16", "nn")
    assert corr.extreme("tsm2r", shape, "float16", "nn") is None
    assert corr.layout_extreme("tsm2r", shape, "float16", "nn") == pytest.approx(1.2)
    # The same layout, with one skinny probe only: no local bound, the layout's maximum.
    alone = calibrate.Corrections(dataclasses.replace(data, records=(skinny[0], *wide)), DEV)
    assert alone.layout_extreme("tsm2r", shape, "float16", "nn") == pytest.approx(5.0)
    # XLA's dot keeps its most favourable correction over the whole layout.
    assert corr.layout_extreme("xla", shape, "float16", "nn") == pytest.approx(1.0)


def test_a_kernels_own_bound_comes_from_its_regime():
    """Probes of one cell (nn f32, rows aligned) in two regimes: R shapes, where TSM2R
    measured at 1-1.2x its model, and L shapes (millions of rows, k of a few), at 5x. An R
    shape of the cell is bounded by the R probes near it; an L shape by the L probes; a
    shape near only one probe of its cell by its layout's probes near it in every dtype;
    and only where none is near by the whole cell."""

    def record(dtype, m, k, n, factor):
        p = Problem(None, m, k, n)
        secs = {t: _model_seconds(t, p, dtype, "nn") * f
                for t, f in (("tsm2r", factor), ("xla", 1.0))}  # fmt: skip
        return calibrate.Record(dtype, "nn", p, secs)

    r_probes = [record("float32", 8192, 16384, 4, 1.0), record("float32", 16384, 8192, 8, 1.2)]
    l_probes = [record("float32", 4_000_000, 8, 4, 5.0), record("float32", 8_000_000, 4, 8, 5.0)]
    data = dataclasses.replace(measured({}, per_cell=1, families=("R",)), records=())
    corr = calibrate.Corrections(dataclasses.replace(data, records=(*r_probes, *l_probes)), DEV)
    r_shape, l_shape = Problem(None, 12000, 12000, 4), Problem(None, 6_000_000, 4, 4)
    assert calibrate.rows_aligned(r_shape, "float32", "nn")
    assert corr.extreme("tsm2r", r_shape, "float32", "nn") == pytest.approx(1.2)
    assert corr.extreme("tsm2r", l_shape, "float32", "nn") == pytest.approx(5.0)
    # One R probe of its own cell near: the layout's R probes in f64 bound it.
    f64 = [record("float64", 8000, 16000, 4, 1.5), record("float64", 16000, 8000, 8, 1.5)]
    one = (r_probes[0], *l_probes, *f64)
    corr = calibrate.Corrections(dataclasses.replace(data, records=one), DEV)
    assert corr.extreme("tsm2r", r_shape, "float32", "nn") == pytest.approx(1.5)
    # Nothing near in any dtype: the cell's least favourable correction.
    far = (r_probes[0], *l_probes)
    corr = calibrate.Corrections(dataclasses.replace(data, records=far), DEV)
    assert corr.extreme("tsm2r", r_shape, "float32", "nn") == pytest.approx(5.0)


def test_a_kernel_predicted_far_below_the_read_ceiling_never_beats_xla():
    """XLA's dot is predicted 3x slower than TSM2S, but TSM2S itself is predicted at a
    third of one pass at the read ceiling: XLA's dot may run another algorithm there, so
    routing keeps it; at twice that fraction the kernel is picked."""
    p = Problem(None, 14, 9976, 7952)
    best_case = calibrate.xla_best_case(p, "float64", DEV.with_bandwidth(4e12), 2e-6)
    for fraction, want in ((0.3, "xla"), (0.6, "tsm2s")):
        secs = {"tsm2s": best_case / fraction, "xla": 3 * best_case / fraction}
        probe = calibrate.Record("float64", "nn", p, secs)
        data = calibrate.CalibrationData({"key": "GPU"}, 4e12, 2e-6, (probe,), {})
        corr = calibrate.Corrections(data, DEV)
        near = Problem(None, 14, 9977, 7952)  # not the probe itself: decided by prediction
        d = calibrate.decide(near, "float64", "nn", ["tsm2s"], corr)
        assert d.target == want, (fraction, d.reason)
        assert d.seconds["xla"] > 2 * d.seconds["tsm2s"]
        if want == "xla":
            assert "one pass at the read ceiling" in d.reason and d.rule == "floor fraction"
        else:
            assert d.rule == "predicted"


def test_an_f64_kernel_needs_more_of_the_read_ceiling_than_others():
    """The same probe, TSM2R predicted at the fraction of one pass at the read ceiling halfway
    between the two thresholds and XLA's dot 3x slower: in f32 the kernel is picked, in f64
    (whose kernels run further from the ceiling, where XLA's dot's fast algorithm wins more
    often) XLA's dot keeps it."""
    frac = (calibrate.MIN_FLOOR_FRACTION + calibrate.MIN_FLOOR_FRACTION_F64) / 2
    assert calibrate.MIN_FLOOR_FRACTION < frac < calibrate.MIN_FLOOR_FRACTION_F64
    p = Problem(None, 16613, 4626, 12)
    for dtype, want in (("float32", "tsm2r"), ("float64", "xla")):
        best_case = calibrate.xla_best_case(p, dtype, DEV.with_bandwidth(4e12), 2e-6)
        secs = {"tsm2r": best_case / frac, "xla": 3 * best_case / frac}
        probe = calibrate.Record(dtype, "nt", p, secs)
        data = calibrate.CalibrationData({"key": "GPU"}, 4e12, 2e-6, (probe,), {})
        corr = calibrate.Corrections(data, DEV)
        near = Problem(None, 16614, 4626, 12)  # not the probe itself: decided by prediction
        d = calibrate.decide(near, dtype, "nt", ["tsm2r"], corr)
        assert d.target == want, (dtype, d.reason)
        if want == "xla":
            assert f"below {calibrate.MIN_FLOOR_FRACTION_F64:.0%}" in d.reason


def test_the_layouts_probes_never_decide_at_the_models_launch_floor():
    """A product small enough that the model's own constants put the kernel or XLA's dot at
    their per-call floor: no probe measured there, and the layout's probes do not decide
    it, though the calibrated model (floored at the measured launch) does not put it there."""
    data = _aligned_only(measured({"tsm2s": 0.3}, per_cell=4, families=("S",), dtypes=("float32",)))
    corr = calibrate.Corrections(data, DEV)
    tiny = Problem(None, 2, 1200, 1201)
    assert corr.layout_extreme("tsm2s", tiny, "float16", "nn") is not None
    assert model.predict(tiny, "float16", "nn", "tsm2s", DEV).bound == "launch"
    assert model.predict(tiny, "float16", "nn", "tsm2s", DEV, corr.calibration).bound != "launch"
    d = calibrate.decide(tiny, "float16", "nn", ["tsm2s"], corr)
    assert d.target == "xla" and "tsm2s" not in d.seconds and d.rule == "unprobed"


def test_xla_dot_on_whole_vector_rows_borrows_no_probe_with_rows_that_are_not():
    """XLA's dot reads rows of whole vectors at least as fast as others: probes whose rows
    are not never stand in for it on a shape whose rows are (they would make XLA's dot
    look slower than it runs), while probes whose rows are stand in for either kind."""
    data = measured({"xla": 3.0}, per_cell=4, families=("R",), dtypes=("float32",))
    for kind in (True, False):
        keep = tuple(
            r for r in data.records if calibrate.rows_aligned(r.problem, r.dtype, r.layout) == kind
        )
        corr = calibrate.Corrections(dataclasses.replace(data, records=keep), DEV)
        p = keep[0].problem
        whole = 8 * (p.k // 8)  # bf16: 8 elements to a 16-byte vector
        for shape in (Problem(None, p.m, whole, p.n), Problem(None, p.m, whole + 1, p.n)):
            aligned = calibrate.rows_aligned(shape, "bfloat16", "nn")
            bound = corr.layout_extreme("xla", shape, "bfloat16", "nn")
            assert (bound is None) == (aligned and not kind), (kind, shape)
            assert corr.layout_extreme("tsm2r", shape, "bfloat16", "nn") is not None


class Batched:
    """A timer with ``prepare`` and ``run``, as ``tuner.GpuTimer`` has: it records which
    threads prepared and that nothing is prepared while a probe is timed."""

    def __init__(self, fail_prepare=(), fail_run=()):
        self.threads, self.ran, self.preparing = set(), [], 0
        self.fail_prepare, self.fail_run = fail_prepare, fail_run
        self.lock = threading.Lock()

    def prepare(self, targets, p, dtype, layout):
        with self.lock:
            self.preparing += 1
        self.threads.add(threading.get_ident())
        time.sleep(0.01)
        with self.lock:
            self.preparing -= 1
        if p in self.fail_prepare:
            raise RuntimeError("compile failed")
        return (tuple(targets), p, dtype, layout)

    def run(self, prep):
        targets, p, dtype, layout = prep
        assert self.preparing == 0, "a probe was timed while another compiled"
        self.ran.append(p)
        if p in self.fail_run:
            raise RuntimeError("out of memory")
        return {
            t: RuntimeError("not built") if t == "tsm2r" else fake_timer({})(t, p, dtype, layout)
            for t in targets
        }


def test_batched_timer_compiles_in_threads_and_times_in_order():
    probes = calibrate.design(per_cell=2, families=("R", "L"), dtypes=("float32",))
    bad_prep, bad_run = probes[1].problem, probes[2].problem
    timer = Batched(fail_prepare={bad_prep}, fail_run={bad_run})
    data = calibrate.measure(
        probes, timer, DEV, read_bytes_per_s=3e12, launch_seconds=5e-6, log=None, workers=2
    )
    assert len(timer.threads) == 2
    assert timer.ran == [q.problem for q in probes if q.problem != bad_prep]
    # Targets that failed are left out; probes where every target failed are dropped.
    assert [r.problem for r in data.records] == [
        q.problem for q in probes if q.problem not in (bad_prep, bad_run)
    ]
    assert all("tsm2r" not in r.seconds and "xla" in r.seconds for r in data.records)
    # The same probes through the one-by-one path measure the same.
    alone = calibrate.measure(
        probes[3:], fake_timer({}), DEV, read_bytes_per_s=3e12, launch_seconds=5e-6, log=None
    )
    assert [r.seconds["xla"] for r in alone.records] == [r.seconds["xla"] for r in data.records[1:]]


def test_batched_timer_stops_at_the_budget():
    probes = calibrate.design(per_cell=3)
    timer = Batched()
    data = calibrate.measure(
        probes, timer, DEV, read_bytes_per_s=3e12, launch_seconds=5e-6, budget_s=0.0,
        log=None, workers=2,
    )  # fmt: skip
    assert len(data.records) == 1 and len(timer.ran) == 1


def test_gpu_timer_prepares_and_runs_on_any_backend():
    """``tuner.GpuTimer`` compiles a probe's operand generator and programs, then times them
    (on CPU through the FFI targets' reference loops)."""
    from jax_tsm2.tune import tuner

    timer = tuner.GpuTimer(samples=1, max_reps=2, target_call_s=1e-5, target_sample_s=1e-5)
    p = Problem(None, 37, 29, 5)
    prep = timer.prepare(["tsm2r", "xla"], p, "float32", "nn")
    assert set(prep.programs) == {"tsm2r", "xla"} and not prep.failed
    got = timer.run(prep)
    assert list(got) == ["tsm2r", "xla"]
    assert all(isinstance(v, float) and 0 < v < 1 for v in got.values())
    bad = timer.prepare(["nonsense"], p, "float32", "nn")
    assert isinstance(timer.run(bad)["nonsense"], ValueError)

"""XLA's compiled plan as the model's account of XLA's dot: parsed from the optimized HLO,
carried by calibrations and harness records, and what calibrated routing predicts from."""

from __future__ import annotations

import json

import jax
import pytest

from jax_tsm2 import model
from jax_tsm2.model import xla_plan
from jax_tsm2.problem import Problem
from jax_tsm2.tune import calibrate

# The entry computation of an H100's optimized HLO for an f16 product whose contraction
# (17230) is padded: two copy fusions, the GEMM (a tuple with its workspace), a slice.
PADDED = """HloModule jit__lambda

%fused_pad (param_0: f16[15556,17230]) -> f16[15556,17232] {
  %param_0 = f16[15556,17230]{1,0} parameter(0)
  ROOT %pad = f16[15556,17232]{1,0} pad(%param_0, %c), padding=0_0x0_2
}

ENTRY %main.4 (Arg_0.1: f16[15556,17230], Arg_1.2: f16[17230,4]) -> f16[15556,4] {
  %Arg_0.1 = f16[15556,17230]{1,0} parameter(0)
  %Arg_1.2 = f16[17230,4]{1,0} parameter(1)
  %pad = f16[15556,17232]{1,0} fusion(%Arg_0.1), kind=kLoop, calls=%fused_pad
  %pad.1 = f16[17232,8]{1,0} fusion(%Arg_1.2), kind=kLoop, calls=%fused_pad.1
  %g = (f16[15556,8], s8[64]) custom-call(%pad,%pad.1), custom_call_target="__cublas$lt$matmul"
  %gte = f16[15556,8]{1,0} get-tuple-element(%g), index=0
  ROOT %slice = f16[15556,4]{1,0} fusion(%gte), kind=kLoop, calls=%fused_slice
}
"""
P = Problem(None, 15556, 17230, 4)
MINIMAL = (P.m * P.k + P.k * P.n + P.m * P.n) * 2


def test_a_plan_counts_the_entrys_kernels_and_takes_xlas_bytes():
    cost = [{"bytes accessed": 3.0 * MINIMAL, "flops": 2.0 * P.m * P.k * P.n}]
    q = xla_plan.plan_from(PADDED, cost)
    assert q.ops == (
        "fusion:kLoop",
        "fusion:kLoop",
        "custom-call:__cublas$lt$matmul",
        "fusion:kLoop",
    )
    assert q.kernels == 4 and q.bytes == 3.0 * MINIMAL
    assert xla_plan.XlaPlan.from_json(json.loads(json.dumps(q.to_json()))) == q


def test_costs_xla_does_not_know_are_kept_as_unknown_and_predict_the_minimal_bytes():
    # XLA's cost analysis says -1 for a cuBLAS call it did not fuse (seen for an f64
    # 14 x 1155 x 6260 product on an H100); a calibration carrying such a plan must load.
    text = PADDED.replace("kind=kLoop", "kind=kInput")
    q = xla_plan.plan_from(text, {"bytes accessed": -1.0, "flops": -1.0})
    assert (q.bytes, q.flops) == (0.0, 0.0)
    written = {"bytes": -1.0, "kernels": 1, "flops": -1.0, "ops": ["custom-call:x"]}
    assert xla_plan.XlaPlan.from_json(written).bytes == 0.0
    rec = _record(P, {"xla": 1e-4}, q)
    data = calibrate.CalibrationData({"key": "GPU"}, 3.0e12, 2e-6, (rec,), {})
    doc = json.loads(json.dumps(data.to_json()))
    doc["records"][0]["xla_plan"] = written
    assert calibrate.CalibrationData.from_json(doc).records[0].xla_plan.bytes == 0.0
    dev = model.H100_SXM.with_bandwidth(3.0e12)
    cal = calibrate.measured_floor(model.CALIBRATION, 2e-6)
    pred = model.predict(P, "float16", "nn", "xla", dev, cal, xla_plan=q)
    assert pred.params["operand_passes"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    "bad",
    [None, [], {"kernels": 1}, {"bytes": float("nan"), "kernels": 1}, {"bytes": 10, "kernels": 0},
     {"bytes": 10, "kernels": True}, {"bytes": "10", "kernels": 1},
     {"bytes": 10, "kernels": 1, "ops": [1]}],
)  # fmt: skip
def test_a_malformed_plan_is_refused(bad):
    with pytest.raises(ValueError):
        xla_plan.XlaPlan.from_json(bad)


def test_the_model_predicts_xla_from_the_plans_bytes_and_kernels():
    dev = model.H100_SXM.with_bandwidth(3.0e12)
    cal = calibrate.measured_floor(model.CALIBRATION, 2e-6)
    once = xla_plan.XlaPlan(float(MINIMAL), 1, 0.0, ("fusion:kCustom",))
    thrice = xla_plan.XlaPlan(3.0 * MINIMAL, 4, 0.0, ("fusion:kLoop",) * 4)
    a, b = (model.predict(P, "float16", "nn", "xla", dev, cal, xla_plan=q) for q in (once, thrice))
    assert a.params["operand_passes"] == pytest.approx(1.0)
    assert b.params["operand_passes"] == pytest.approx(3.0, rel=1e-3)
    # Three times the bytes and three more launches.
    want = 3 * (a.seconds - cal.xla_t_launch) + 4 * cal.xla_t_launch
    assert b.seconds == pytest.approx(want, rel=1e-6)
    assert "as XLA compiled it: 4 kernel(s)" in b.reason


def test_a_cublas_call_adds_its_own_pass_to_the_plans_bytes():
    """XLA's cost analysis counts no bytes for a cuBLAS call's operands and result: two copy
    fusions, cuBLAS and a slice report 2x the minimal bytes, where the same plan on XLA's own
    GEMM fusion reports 3x. The model adds the call's pass, so both read three times over;
    a plan whose bytes XLA does not know keeps the minimal bytes, nothing added."""
    dev = model.H100_SXM.with_bandwidth(3.0e12)
    cal = calibrate.measured_floor(model.CALIBRATION, 2e-6)
    cublas = xla_plan.plan_from(PADDED, {"bytes accessed": 2.0 * MINIMAL})
    fused = xla_plan.XlaPlan(3.0 * MINIMAL, 4, 0.0, ("fusion:kLoop",) * 2 + ("fusion:kCustom",) * 2)
    assert cublas.cublas and not fused.cublas
    a, b = (model.predict(P, "float16", "nn", "xla", dev, cal, xla_plan=q) for q in (cublas, fused))
    assert a.bytes == b.bytes == 3 * MINIMAL
    assert a.seconds == pytest.approx(b.seconds, rel=1e-9)
    unknown = xla_plan.XlaPlan(0.0, 1, 0.0, ("custom-call:__cublas$lt$matmul",))
    lone = model.predict(P, "float16", "nn", "xla", dev, cal, xla_plan=unknown)
    assert lone.bytes == MINIMAL and lone.params["operand_passes"] == pytest.approx(1.0)


def _record(p, seconds, plan):
    return calibrate.Record("float16", "nn", p, seconds, plan)


def test_a_calibration_keeps_its_probes_plans_and_predicts_from_them():
    dev = model.H100_SXM
    near = Problem(None, 15000, 17000, 4)
    nbytes = (near.m * near.k + near.k * near.n + near.m * near.n) * 2
    probe_plan = xla_plan.XlaPlan(3.0 * nbytes, 4, 0.0, ("fusion:kLoop",) * 4)
    # XLA's dot measured at exactly what its plan predicts (factor 1).
    cal = calibrate.measured_floor(model.CALIBRATION, 2e-6)
    dev_bw = dev.with_bandwidth(3.0e12)
    xla_s = model.predict(near, "float16", "nn", "xla", dev_bw, cal, xla_plan=probe_plan).seconds
    rec = _record(near, {"xla": xla_s, "tsm2r": xla_s / 2}, probe_plan)
    data = calibrate.CalibrationData({"key": "GPU"}, 3.0e12, 2e-6, (rec,), {})
    data = calibrate.CalibrationData.from_json(json.loads(json.dumps(data.to_json())))
    assert data.records[0].xla_plan == probe_plan

    asked = []

    def plans(p, dtype, layout):
        asked.append((p, dtype, layout))
        return xla_plan.XlaPlan(float(MINIMAL), 1, 0.0, ("fusion:kCustom",))

    corr = calibrate.Corrections(data, dev, plans=plans)
    assert corr.planned
    assert corr.factor("xla", near, "float16", "nn")[0] == pytest.approx(1.0, rel=1e-6)
    # The neighbour reads its operands once: XLA's dot is predicted from that plan.
    d = calibrate.decide(P, "float16", "nn", ["tsm2r"], corr)
    assert asked == [(P, "float16", "nn")]
    once = xla_plan.XlaPlan(float(MINIMAL), 1, 0.0, ("fusion:kCustom",))
    want = model.predict(P, "float16", "nn", "xla", dev_bw, corr.calibration, xla_plan=once)
    f = corr.factor("xla", P, "float16", "nn")[0]
    assert d.seconds["xla"] == pytest.approx(want.seconds * f, rel=0.05)


def test_a_calibration_without_plans_keeps_the_models_rules():
    p = Problem(None, 15000, 17000, 4)
    rec = _record(p, {"xla": 1e-4, "tsm2r": 5e-5}, None)
    data = calibrate.CalibrationData({"key": "GPU"}, 3.0e12, 2e-6, (rec,), {})

    def plans(*_):
        raise AssertionError("a calibration without plans asked for one")

    corr = calibrate.Corrections(data, model.H100_SXM, plans=plans)
    assert not corr.planned and corr.xla_plan(P, "float16", "nn") is None
    calibrate.decide(P, "float16", "nn", ["tsm2r"], corr)


def test_measure_records_the_plan_a_timer_makes():
    probes = calibrate.design(per_cell=1, dtypes=("float32",), families=("R",))
    plan = xla_plan.XlaPlan(1e6, 2, 0.0, ("fusion:kLoop", "fusion:kCustom"))

    class Timer:
        def __call__(self, target, p, dtype, layout):
            return 1e-4

        def xla_plan(self, p, dtype, layout):
            return plan

    data = calibrate.measure(
        probes, Timer(), model.H100_SXM, read_bytes_per_s=3e12, launch_seconds=2e-6, log=None
    )
    assert [r.xla_plan for r in data.records] == [plan] * len(probes)


def test_no_plan_off_a_gpu():
    if jax.default_backend() == "gpu":
        pytest.skip("a GPU process: see test_a_gpu_plan_accounts_for_the_operands")
    assert xla_plan.plan(P, "float16", "nn") is None


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["nn", "nt", "tn"])
def test_a_gpu_plan_accounts_for_the_operands(layout):
    p = Problem(None, 4099, 1031, 7)
    q = xla_plan.plan(p, "float32", layout)
    assert q is not None and q.kernels >= 1
    assert q.bytes >= 0.99 * (p.m * p.k + p.k * p.n + p.m * p.n) * 4
    assert xla_plan.plan(p, "float32", layout) is q  # cached

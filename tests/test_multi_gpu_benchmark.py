"""benchmarks/multi_gpu.py on CPU devices: one process with 4 devices, two processes started by
``python -m jax_tsm2.launch`` (gloo between them), its report's arithmetic and its usage errors.

The timings on CPU mean nothing; what is checked is that every step runs, that the files are
written, that the compiled programs communicate as the sharding says (no all-gather for the
row-sharded product, one all-reduce for the sharded contraction) and that sharded k-means equals
one device's, in one process and across processes.
"""

from __future__ import annotations

import doctest
import importlib
import json
import sys
from pathlib import Path

import pytest
from _helpers import BENCHMARKS, package_env, run_python

SCRIPT = str(BENCHMARKS / "multi_gpu.py")


def _env(n_devices: int) -> dict[str, str]:
    env = package_env(JAX_PLATFORMS="cpu")
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={n_devices}"
    env.pop("JAX_TSM2_CUSTOM_CALL", None)
    return env


def _files(out: Path, stem: str, plot: bool = True) -> dict:
    for suffix in (".json", ".md"):
        assert (out / f"{stem}{suffix}").is_file(), sorted(p.name for p in out.iterdir())
    if plot:  # a plot needs timings and matplotlib
        pytest.importorskip("matplotlib")
        assert (out / f"{stem}.png").stat().st_size > 0
    return json.loads((out / f"{stem}.json").read_text())


def _assert_checks_pass(doc: dict, counts: list[int], dtypes: list[str]) -> None:
    checks = [r for r in doc["records"] if r.get("kind") == "check"]
    assert sorted((r["dtype"], r["n_devices"]) for r in checks) == sorted(
        (d, n) for d in dtypes for n in counts
    ), checks
    for r in checks:
        assert r["passes"] and r["labels_differ"] == 0, r
        assert r["centroids_rel_diff"] <= r["rtol"] and r["inertia_rel_diff"] <= r["rtol"], r


def _timed(doc: dict) -> dict:
    return {(r["bench"], r["n_devices"]): r for r in doc["records"] if r.get("kind") == "time"}


@pytest.mark.slow
def test_quick_run_on_4_cpu_devices_writes_its_files(tmp_path):
    argv = [SCRIPT, "--quick", "--gpus", "1,4", "--scaling", "strong", "--dtypes", "f32"]
    r = run_python([*argv, "--out", str(tmp_path)], env=_env(4), timeout=240)
    assert r.returncode == 0, (r.stdout + r.stderr)[-5000:]
    doc = _files(tmp_path, "scaling")
    assert doc["provenance"]["processes"] == 1 and len(doc["provenance"]["devices"]) == 4
    assert doc["provenance"]["env"]["NCCL_NVLS_ENABLE"] == "0"
    assert not [r for r in doc["records"] if r.get("error") or r.get("skipped")], doc["records"]
    timed = _timed(doc)
    assert set(timed) == {(b, n) for b in ("row", "contraction", "kmeans") for n in (1, 4)}
    row, con = timed["row", 4], timed["contraction", 4]
    assert not row["a_gathered"] and sum(row["collectives"].values()) == 0, row
    assert row["communication_ok"] and row["per_device"] == "2048 x 512"
    assert con["collectives"]["all-reduce"] == 1 and con["communication_ok"], con
    assert timed["kmeans", 4]["per_iter_s"] is not None
    _assert_checks_pass(doc, [4], ["f32"])
    rows = {(s["bench"], s["n_devices"]): s for s in doc["summary"]}
    assert rows["row", 1]["speedup"] == pytest.approx(1.0)
    want = timed["row", 1]["time_s"] / timed["row", 4]["time_s"]  # strong: the same problem
    assert rows["row", 4]["speedup"] == pytest.approx(want)
    md = (tmp_path / "scaling.md").read_text()
    assert "No all-gather in any row-sharded program" in md and "| PASS |" in md


@pytest.mark.slow
def test_two_processes_one_device_each_match_one_device(tmp_path):
    """The multi-process path: sharded k-means across two processes (gloo) equals process 0's
    one-device run on the same data and initial centroids."""
    bench = [sys.executable, SCRIPT, "--quick", "--check-only", "--dtypes", "f32"]
    launch = ["-m", "jax_tsm2.launch", "--nproc", "2", "--timeout", "200", "--"]
    r = run_python([*launch, *bench, "--out", str(tmp_path)], env=_env(1), timeout=240)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-5000:]
    assert "[0] kmeans check f32 on 2 devices:" in out and "PASS" in out, out[-5000:]
    doc = _files(tmp_path, "scaling-processes", plot=False)
    assert doc["provenance"]["processes"] == 2
    assert "jax_tsm2.launch --nproc 2" in doc["provenance"]["launcher"]
    _assert_checks_pass(doc, [2], ["f32"])
    assert not (tmp_path / "scaling.json").exists()


@pytest.mark.slow
def test_full_quick_run_on_4_cpu_devices(tmp_path):
    """Every workload, scaling, dtype and device count of --quick (a minute or two on CPU)."""
    r = run_python([SCRIPT, "--quick", "--out", str(tmp_path)], env=_env(4), timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-5000:]
    doc = _files(tmp_path, "scaling")
    assert not [r for r in doc["records"] if r.get("error") or r.get("skipped")]
    keys = {(r["bench"], r["scaling"], r["dtype"], r["n_devices"]) for r in doc["records"]
            if r.get("kind") == "time"}  # fmt: skip
    assert len(keys) == 3 * 2 * 2 * 3
    _assert_checks_pass(doc, [4, 2], ["f32", "bf16"])


def test_a_spent_time_budget_skips_steps_and_still_writes_files(tmp_path):
    argv = [SCRIPT, "--quick", "--benchmarks", "row", "--dtypes", "f32", "--time-budget", "1"]
    r = run_python([*argv, "--out", str(tmp_path)], env=_env(2), timeout=240)
    assert r.returncode == 0, (r.stdout + r.stderr)[-5000:]
    doc = json.loads((tmp_path / "scaling.json").read_text())
    assert doc["records"] and all(r.get("skipped") for r in doc["records"]), doc["records"]
    assert "Not measured:" in (tmp_path / "scaling.md").read_text()


@pytest.mark.parametrize(
    "argv",
    [
        ["--gpus", "0"],
        ["--gpus", "x"],
        ["--gpus", "64"],  # more devices than there are
        ["--benchmarks", "gemm"],
        ["--dtypes", "f64"],
        ["--scaling", "sideways"],
        ["--modes", "sometimes"],
        ["--repeats", "0"],
        ["--time-budget", "0"],
        ["--no-check", "--check-only"],
        [],  # --out is required
    ],
)
def test_bad_arguments_get_the_usage_and_status_2(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    for name in ("NCCL_NVLS_ENABLE", "NVSHMEM_DISABLE_NVLS"):  # main sets them: restored after
        monkeypatch.setenv(name, "0")
    multi_gpu = importlib.import_module("multi_gpu")
    out = [] if not argv else ["--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit) as exit_:
        multi_gpu.main([*argv, *out])
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err
    assert err.startswith("usage:") and "error:" in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["multi_gpu", "scaling_report"])
def test_docstring_examples(name, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    result = doctest.testmod(importlib.import_module(name))
    assert result.failed == 0 and result.attempted > 0

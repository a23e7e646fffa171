"""benchmarks/routing_replay.py: calibrated routing scored against measured runs, on CPU."""

from __future__ import annotations

import json
from pathlib import Path

from _helpers import BENCHMARKS, package_env, run_python

SCRIPT = str(BENCHMARKS / "routing_replay.py")
GPU = {"key": "NVIDIA-H200-sm90-132sm", "name": "NVIDIA H200", "cc": [9, 0], "sm_count": 132}


def _calibration(path: Path) -> Path:
    """One TN f32 probe, 32 x 1e6 x 32, where TSM2T took a third of XLA's dot's time."""
    probe = {"dtype": "float32", "layout": "tn", "batch": None, "m": 32, "k": 10**6, "n": 32,
             "seconds": {"tsm2t": 6.0e-5, "xla": 1.8e-4}}  # fmt: skip
    doc = {"schema": "jax_tsm2.calibration", "version": 1, "device": GPU, "made": {},
           "read_bytes_per_s": 4.4e12, "launch_seconds": 1.0e-6, "records": [probe]}  # fmt: skip
    path.write_text(json.dumps(doc))
    return path


def _run(path: Path, cases: dict[str, tuple[int, dict[str, float]]]) -> Path:
    """A harness run of TN f32 products ``32 x k x 32`` with the given measured seconds."""
    records = [
        {"family": "TN", "case": name, "dtype": "f32", "status": "ok", "impl": impl,
         "operand_shapes": [[k, 32], [k, 32]], "seconds": s}
        for name, (k, seconds) in cases.items() for impl, s in seconds.items()
    ]  # fmt: skip
    path.write_text(json.dumps({"device": {"name": "NVIDIA H200", "sm_count": 132},
                                "records": records}))  # fmt: skip
    return path


def _replay(*args: str):
    return run_python([SCRIPT, *args], env=package_env(JAX_PLATFORMS="cpu"), timeout=240)


def test_scores_picks_against_the_measurements(tmp_path):
    cal = _calibration(tmp_path / "cal.json")
    run = _run(
        tmp_path / "bench.json",
        {
            # At the probe, as probed: the kernel is picked, and was fastest.
            "TN:probed": (10**6, {"jnp": 1.8e-4, "tsm2t": 6.2e-5}),
            # At the probe's shape, but measured slower than jnp: the pick is a loss.
            "TN:slower": (10**6, {"jnp": 1.8e-4, "tsm2t": 4.0e-4}),
            # Ten octaves from the probe: XLA's dot is kept, and the kernel it left was 2x.
            "TN:far": (1024, {"jnp": 8.0e-6, "tsm2t": 4.0e-6}),
        },
    )
    r = _replay(str(cal), str(run), "--verbose")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "3 products" in out and "2 misses" in out and "1 losses" in out, out
    misses = out.split("misses:")[1].split("losses:")[0]
    assert "TN:far" in misses and "TN:slower" in misses and "TN:probed" not in misses, out


def test_bad_arguments_get_the_usage(tmp_path):
    r = _replay(str(tmp_path / "missing.json"), str(tmp_path / "run.json"))
    assert r.returncode == 2 and "usage:" in r.stderr and "no such file" in r.stderr
    (tmp_path / "cal.json").write_text("{}")
    (tmp_path / "run.json").write_text("{}")
    r = _replay(str(tmp_path / "cal.json"), str(tmp_path / "run.json"))
    assert r.returncode == 2 and "not a calibration file" in r.stderr
    _calibration(tmp_path / "cal.json")
    r = _replay(str(tmp_path / "cal.json"), str(tmp_path / "run.json"))
    assert r.returncode == 2 and "not a harness run" in r.stderr


def test_replays_routing_without_a_calibration(tmp_path):
    """``none``: routing as on a GPU with no calibration. TN f32 32 x 1e6 x 32: the model
    alone predicts TSM2T slower than XLA's dot at its best (one pass), so XLA's dot is kept
    whatever was measured; a kernel measured 3x faster is then a miss, never a loss."""
    run = _run(tmp_path / "bench.json", {"TN:gram": (10**6, {"jnp": 1.8e-4, "tsm2t": 6.0e-5})})
    r = _replay("none", "--theoretical-tbps", "4.8", str(run), "--verbose")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 products: routed 1.000x" in r.stdout and "1 misses" in r.stdout, r.stdout
    assert "0 losses" in r.stdout and "picks xla" in r.stdout, r.stdout
    r = _replay("none", str(run))
    assert r.returncode == 2 and "usage:" in r.stderr and "--theoretical-tbps" in r.stderr

"""benchmarks/read_by_size.py: the read's floor fraction by size, put at a grid's shapes (CPU)."""

from __future__ import annotations

import importlib.util
import json
import math

import pytest
from _helpers import BENCHMARKS, package_env, run_python

SCRIPT = str(BENCHMARKS / "read_by_size.py")
H200_CURVE = BENCHMARKS / "results" / "h200" / "read_by_size.json"


def _module():
    spec = importlib.util.spec_from_file_location("read_by_size", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ROWS = [
    {"bytes": 2**20, "fraction": 0.6},
    {"bytes": 2**22, "fraction": 0.4},
    {"bytes": 2**28, "fraction": 0.9},
]


@pytest.mark.parametrize(
    ("nbytes", "want"),
    [
        (2**20, 0.6),  # a measured size
        (2**21, 0.5),  # halfway in log size between 1 MiB and 4 MiB
        (2**25, 0.65),  # 3 of the 6 doublings from 4 MiB to 256 MiB
        (10, 0.6),  # below the sizes measured: the smallest's
        (2**40, 0.9),  # above: the largest's
    ],
)
def test_fraction_interpolates_in_log_size(nbytes, want):
    assert math.isclose(_module().fraction_at(ROWS, nbytes), want, rel_tol=1e-12)


def _grid(tmp_path, cases):
    """A harness grid of f32 products ``(m, k, n, floor_s, routed_s, jnp_s)``."""
    records = []
    for m, k, n, floor, routed, jnp_s in cases:
        case = f"R:{m}x{k}x{n}"
        shapes = [[m, k], [k, n]]
        for impl, secs in (("tsm2", routed), ("jnp", jnp_s)):
            records.append({"case": case, "dtype": "f32", "family": "R", "impl": impl,
                            "status": "ok", "seconds": secs, "floor_seconds": floor,
                            "operand_shapes": shapes})  # fmt: skip
    path = tmp_path / "grid.json"
    path.write_text(json.dumps({"records": records}))
    return path


def test_report_puts_each_shape_at_the_read_of_its_bytes(tmp_path):
    curve = tmp_path / "curve.json"
    curve.write_text(json.dumps({"rows": ROWS}))
    # Exactly 1 MiB and 256 MiB of f32: m k + k + m = (m + 1)(k + 1) - 1 elements.
    one, big = (4, 2**18 // 5, 1), (4, (2**26 + 1) // 5 - 1, 1)
    grid = _grid(tmp_path, [(*one, 1e-6, 5e-6, 2e-6), (*big, 6e-5, 1e-4, 6e-5)])
    out = run_python([SCRIPT, "--report", str(curve), "--grid", str(grid)], env=package_env())
    assert out.returncode == 0, out.stderr
    # Reads 0.6 and 0.9; routed 0.2 and 0.6; fastest 0.5 and 1.0.
    assert "2 shapes; a read of their bytes median 0.75, p10 0.60" in out.stdout, out.stdout
    assert "routed median 0.40, p10 0.20; fastest median 0.75, p10 0.50" in out.stdout


def test_the_h200_curve_rises_to_the_ceiling():
    """The committed H200 measurement: below half of the floor at a few MB (the launch and the
    DRAM latency), within 5% of it from a few hundred MB."""
    rows = json.loads(H200_CURVE.read_text())["rows"]
    mod = _module()
    assert min(r["fraction"] for r in rows if r["bytes"] < 8e6) < 0.5
    assert mod.fraction_at(rows, 4e8) > 0.95
    assert all(0 < r["fraction"] <= 1.02 for r in rows)


@pytest.mark.parametrize(
    "args",
    [[], ["--report", "x.json"], ["--out", "x.json", "--blocks", "2,eight"]],
    ids=["nothing", "report-without-grid", "bad-blocks"],
)
def test_bad_arguments_get_a_usage_message(args):
    out = run_python([SCRIPT, *args], env=package_env(JAX_PLATFORMS="cpu"))
    assert out.returncode == 2
    assert out.stderr.startswith("usage:"), out.stderr

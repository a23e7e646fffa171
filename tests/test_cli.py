"""Every command line answers bad arguments with its usage line, a message naming the
argument, and exit status 2: never a traceback, never a run with a meaningless setting."""

from __future__ import annotations

import subprocess
import sys

import pytest
from _helpers import package_env

from jax_tsm2 import demo, launch
from jax_tsm2.bench import cli as bench_cli
from jax_tsm2.clustering import __main__ as kmeans_cli
from jax_tsm2.tune import cli as tune_cli


def _fake_timer(target, p, dtype, layout):
    raise AssertionError("a bad command line must not reach the timing")


MAINS = {
    "tune": lambda argv: tune_cli.main(argv, timer=_fake_timer),
    "bench": bench_cli.main,
    "kmeans": kmeans_cli.main,
    "demo": demo.main,
    "launch": launch.main,
}

BAD = {
    "tune": [
        ["--shapes", "garbage"],
        ["--shapes", "1x2"],
        ["--shapes", "0x1x1"],
        ["--shapes", "2.5x2x2"],
        ["--shapes", "1e400x1x1"],
        ["--shapes", "nanx1x1"],
        ["--shapes", ","],
        ["--shapes", "10x10x10", "--dtype", "f99"],
        ["--shapes", "10x10x10", "--dtype", "int32"],
        ["--shapes", "10x10x10", "--layout", "zz"],
        ["--shapes", "10x10x10", "--max-reps", "0"],
        ["--shapes", "10x10x10", "--samples", "-1"],
        ["--shapes", "10x10x10", "--cache-dir", "/dev/null/sub"],
        ["--dtype", "f32"],
        ["--bogus"],
    ],
    "bench": [
        ["--repeats", "0"],
        ["--short-repeats", "-1"],
        ["--warmup", "-1"],
        ["--per-sample", "0"],
        ["--max-calls", "0"],
        ["--target-ms", "0"],
        ["--target-ms", "inf"],
        ["--time-budget", "-1"],
        ["--mem-fraction", "2"],
        ["--ceiling-gb", "0"],
        ["--seed", "x"],
        ["--grid-seed", "-3"],
        ["--grid", "-1"],
        ["--grid", "5", "--grid-start", "7"],
        ["--impl", "bogus"],
        ["--family", "bogus"],
        ["--dtype", "f99"],
        ["--m", "garbage"],
        ["--case", "garbage"],
        ["--case", "R:0x1x1"],
        ["--case", "R:1e400x1x1"],
        ["--merge", "/nonexistent/bench.json"],
        ["--plot"],
    ],
    "kmeans": [
        ["--generate", "1,2"],
        ["--generate", "a,b,c"],
        ["--generate", "0,5,2"],
        ["--generate", "100,0,3"],
        ["--generate", "10,2,20"],
        ["--generate", "100,2,3", "--k", "0"],
        ["--generate", "100,2,3", "--k", "200"],
        ["--generate", "100,2,3", "--max-iter", "0"],
        ["--generate", "100,2,3", "--tol", "-1"],
        ["--generate", "100,2,3", "--tol", "nan"],
        ["--generate", "100,2,3", "--seed", "-1"],
        ["--dataset", "nope"],
        ["--dtype", "int8"],
    ],
    "demo": [["--m", "0"], ["--m", "-5"], ["--k", "0"], ["--n", "-1"], ["--m", "x"]],
    "launch": [
        ["--nproc", "0", "--", "true"],
        ["--nproc", "x", "--", "true"],
        ["--nproc", "2"],
        ["--nproc", "2", "--"],
        ["--nproc", "2", "--timeout", "0", "--", "true"],
        ["--nproc", "2", "--timeout", "-1", "--", "true"],
        ["--nproc", "2", "--timeout", "inf", "--", "true"],
        ["--nproc", "2", "--port", "70000", "--", "true"],
        ["--nproc", "2", "--port", "0", "--", "true"],
        ["--bogus", "--", "true"],
    ],
}


@pytest.mark.parametrize(
    ("name", "argv"), [(name, argv) for name, argvs in BAD.items() for argv in argvs], ids=str
)
def test_bad_arguments_get_the_usage_and_status_2(name, argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        MAINS[name](argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err
    assert err.startswith("usage:") and "error:" in err and "Traceback" not in err, err


def test_a_bad_merge_file_is_a_usage_error(tmp_path, capsys):
    for text in ("not json", "[" * 100_000, '{"cases": 3}'):
        path = tmp_path / "bench.json"
        path.write_text(text)
        with pytest.raises(SystemExit) as exit_:
            bench_cli.main(["--merge", str(path)])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and "--merge" in err and "Traceback" not in err, err


def test_tune_s_cache_dir_holds_for_its_run_only(tmp_path, monkeypatch):
    from jax_tsm2.tune import cache

    monkeypatch.setenv(cache.ENV_DIR, str(tmp_path / "before"))
    timer = lambda target, p, dtype, layout: {"xla": 1e-3}.get(target, 2e-3)
    argv = ["--shapes", "1e6x8x8", "--cache-dir", str(tmp_path / "run")]
    assert tune_cli.main(argv, timer=timer) == 0
    assert list((tmp_path / "run").glob("tune-*.json"))
    assert cache.cache_dir() == tmp_path / "before"


@pytest.mark.parametrize(
    ("module", "argv"),
    [
        ("jax_tsm2.tune", ["--shapes", "garbage"]),
        ("jax_tsm2.bench", ["--repeats", "0"]),
        ("jax_tsm2.clustering", ["--generate", "1,2"]),
        ("jax_tsm2.demo", ["--n", "0"]),
        ("jax_tsm2.launch", ["--nproc", "0", "--", "true"]),
    ],
)
def test_the_entry_points_exit_with_2(module, argv):
    r = subprocess.run(
        [sys.executable, "-m", module, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env=package_env(),
    )
    assert r.returncode == 2, r.stderr
    assert "usage:" in r.stderr and "Traceback" not in r.stderr, r.stderr

"""The autotuner (python -m jax_tsm2.tune) with a fake timer, and its per-GPU cache."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time
import warnings

import platformdirs
import pytest
from _helpers import PACKAGE_ROOT, package_env

from jax_tsm2 import model
from jax_tsm2.routing import Problem
from jax_tsm2.tune import cache, cli, tuner

H100 = model.H100_SXM
KEY = H100.key
DEV = {"key": KEY, "name": H100.name, "cc": [9, 0], "sm_count": 132}


@pytest.fixture(autouse=True)
def cache_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.ENV_DIR, str(tmp_path))
    return tmp_path


def fake_timer(times):
    calls = []

    def timer(target, p, dtype, layout):
        calls.append((target, p, dtype, layout))
        t = times[target]
        if isinstance(t, Exception):
            raise t
        return t

    timer.calls = calls
    return timer


def test_cache_dir_precedence(monkeypatch, tmp_path):
    assert cache.cache_dir() == tmp_path
    monkeypatch.delenv(cache.ENV_DIR)
    assert cache.cache_dir() == pathlib.Path(
        platformdirs.user_cache_dir("jax_tsm2", appauthor=False)
    )
    if sys.platform.startswith("linux"):
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
        assert cache.cache_dir() == tmp_path / "xdg" / "jax_tsm2"
        monkeypatch.delenv("XDG_CACHE_HOME")
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        assert cache.cache_dir() == tmp_path / "home" / ".cache" / "jax_tsm2"


# Each writer stores its entries one store() at a time, as online tuning does, after
# waiting for a start file so that the two processes' read-merge-writes interleave.
_WRITER = """
import os, pathlib, sys, time
from jax_tsm2.tune import cache
who, count, start = sys.argv[1], int(sys.argv[2]), pathlib.Path(sys.argv[3])
(start.parent / f"ready-{who}").touch()
while not start.exists():
    time.sleep(0.001)
dev = {"key": sys.argv[4], "name": "H100", "cc": [9, 0], "sm_count": 132}
target = {"a": "tsm2r", "b": "xla"}[who]
m0 = {"a": 1000, "b": 2000}[who]
for i in range(count):
    cache.store(dev, {cache.entry_key("float32", "nn", None, m0 + i, 8, 8): {"target": target}})
"""


def test_two_processes_storing_at_once_both_land(tmp_path):
    count = 40
    start = tmp_path / "go"
    env = package_env(**{cache.ENV_DIR: str(tmp_path / "cache")})
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, who, str(count), str(start), KEY],
            env=env,
            cwd=PACKAGE_ROOT,
        )
        for who in ("a", "b")
    ]
    try:
        deadline = time.monotonic() + 120
        while not all((tmp_path / f"ready-{w}").exists() for w in "ab"):
            assert all(p.poll() is None for p in procs), "a writer exited before starting"
            assert time.monotonic() < deadline, "writers did not start"
            time.sleep(0.01)
        start.touch()
        assert [p.wait(timeout=120) for p in procs] == [0, 0]
    finally:
        for p in procs:
            p.kill()
    entries = json.loads((tmp_path / "cache" / cache.cache_path(KEY).name).read_text())["entries"]
    want = {cache.entry_key("float32", "nn", None, 1000 + i, 8, 8): "tsm2r" for i in range(count)}
    want |= {cache.entry_key("float32", "nn", None, 2000 + i, 8, 8): "xla" for i in range(count)}
    assert {k: v["target"] for k, v in entries.items()} == want


def test_parse_shape():
    assert cli.parse_shape("1e7x8x8") == Problem(None, 10**7, 8, 8)
    assert cli.parse_shape("4x100x16x16") == Problem(4, 100, 16, 16)
    for bad in ("10x10", "axbxc", "0x1x1"):
        with pytest.raises(ValueError):
            cli.parse_shape(bad)


def test_tune_stores_winners_and_lookup_finds_them():
    timer = fake_timer({"tsm2r": 3e-3, "tsm2l": 1e-3, "tsm2s": 9e-3, "xla": 2e-3})
    logs = []
    out = tuner.tune(
        [Problem(None, 10**6, 8, 8), Problem(None, 20480, 20480, 8)],
        ["float32"], ["nn"], timer=timer, device=H100, log=logs.append,
    )  # fmt: skip
    assert out["float32/nn/1/1000000/8/8"]["target"] == "tsm2l"
    # k = 20480: TSM2L would run TSM2R's tile, so it is not timed separately.
    assert "tsm2l" not in out["float32/nn/1/20480/20480/8"]["seconds"]
    assert out["float32/nn/1/20480/20480/8"]["target"] == "xla"
    assert cache.lookup(KEY, "float32", "nn", None, 10**6, 8, 8) == "tsm2l"
    assert cache.lookup(KEY, "float32", "nn", 1, 10**6, 8, 8) == "tsm2l"  # batch None == 1
    assert cache.lookup(KEY, "float32", "nt", None, 10**6, 8, 8) is None
    assert cache.lookup("other-gpu", "float32", "nn", None, 10**6, 8, 8) is None
    assert any("wrote 2 entries" in line for line in logs)
    assert {c[0] for c in timer.calls} == {"tsm2r", "tsm2l", "xla"}


def test_failing_candidate_is_left_out():
    timer = fake_timer(
        {"tsm2r": 3e-3, "tsm2l": 1e-3, "tsm2s": RuntimeError("not built"), "xla": 2e-3}
    )
    out = tuner.tune([Problem(None, 8, 4096, 4096)], ["float32"], ["nn"], timer=timer,
                   device=H100, log=lambda s: None)  # fmt: skip
    e = out["float32/nn/1/8/4096/4096"]
    assert "tsm2s" in e["failed"] and "tsm2s" not in e["seconds"]
    timer = fake_timer(
        {"xla": float("nan"), "tsm2r": RuntimeError("x"), "tsm2l": RuntimeError("y")}
    )
    out = tuner.tune([Problem(None, 10**6, 8, 8)], ["float32"], ["nn"], timer=timer,
                   device=H100, log=lambda s: None)  # fmt: skip
    assert out == {}


def test_a_timer_with_time_all_times_the_candidates_together():
    """GpuTimer-style timers time every candidate of a shape in one call (taking turns); a
    candidate that failed comes back as its exception and is left out."""
    calls = []

    class Together:
        def __call__(self, *args):
            raise AssertionError("tune() should call time_all")

        def time_all(self, targets, p, dtype, layout):
            calls.append(tuple(targets))
            times = {"tsm2r": 3e-3, "tsm2s": RuntimeError("not built"), "xla": 2e-3}
            return {t: times[t] for t in targets}

    out = tuner.tune([Problem(None, 8, 4096, 4096)], ["float32"], ["nn"], timer=Together(),
                   device=H100, log=lambda s: None)  # fmt: skip
    e = out["float32/nn/1/8/4096/4096"]
    assert calls == [("tsm2r", "tsm2s", "xla")]
    assert e["target"] == "xla" and set(e["seconds"]) == {"tsm2r", "xla"}
    assert e["failed"] == {"tsm2s": "RuntimeError: not built"}


def test_cli_main_with_fake_timer(cache_in_tmp, capsys):
    timer = fake_timer({"tsm2r": 3e-3, "tsm2l": 1e-3, "tsm2s": 9e-3, "xla": 2e-3})
    assert cli.main(["--shapes", "1e6x8x8", "--dtype", "f32,bf16", "--dry-run"], timer=timer) == 0
    assert not list(cache_in_tmp.iterdir())
    assert cli.main(["--shapes", "1e6x8x8", "--dtype", "bf16", "--layout", "nt"], timer=timer) == 0
    assert cache.lookup(KEY, "bfloat16", "nt", None, 10**6, 8, 8) == "tsm2l"
    assert "tsm2l wins" in capsys.readouterr().out


def _write(text):
    path = cache.cache_path(KEY)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _valid_doc(**over):
    doc = {
        "schema": cache.SCHEMA, "version": cache.VERSION, "device": dict(DEV),
        "measured_read_bytes_per_s": 3.0e12,
        "entries": {"float32/nn/1/1000/8/8": {"target": "tsm2l"}},
    }  # fmt: skip
    doc.update(over)
    return doc


@pytest.mark.parametrize(
    "text,why",
    [
        ("{not json", "not valid JSON"),
        ("", "not valid JSON"),
        ("[1, 2]", "not a jax_tsm2.tune file"),
        (json.dumps(_valid_doc(schema="other")), "not a jax_tsm2.tune file"),
        (json.dumps(_valid_doc(version=99)), "version 99"),
        (json.dumps(_valid_doc(device={"key": "NVIDIA-A100-sm80-108sm"})), "written for GPU"),
        (json.dumps(_valid_doc(device="h100")), "written for GPU"),
        (json.dumps(_valid_doc(entries=[1])), "no 'entries'"),
    ],
)
def test_corrupt_or_foreign_file_is_ignored_with_a_warning(text, why):
    _write(text)
    with pytest.warns(RuntimeWarning, match=why):
        assert cache.lookup(KEY, "float32", "nn", None, 1000, 8, 8) is None
    assert cache.measured_bandwidth(KEY) is None
    # The model and explain() still work.
    assert model.choose((1000, 8, 8), "float32", device=H100).xla.seconds > 0


def test_binary_garbage_is_ignored():
    path = cache.cache_path(KEY)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.warns(RuntimeWarning, match="ignoring tune cache"):
        assert cache.lookup(KEY, "float32", "nn", None, 1000, 8, 8) is None


def test_malformed_entries_are_skipped_not_the_file():
    doc = _valid_doc()
    doc["entries"].update({
        "float32/nn/1/1000/8/16": {"target": "tsm2t"},  # tsm2t does not take nn
        "float32/xx/1/1000/8/16": {"target": "xla"},
        "garbage": 3,
        "float32/nn/1/1000/8/32": "xla",
    })  # fmt: skip
    _write(json.dumps(doc))
    with pytest.warns(RuntimeWarning, match="4 malformed entries skipped"):
        assert cache.lookup(KEY, "float32", "nn", None, 1000, 8, 8) == "tsm2l"
    assert cache.lookup(KEY, "float32", "nn", None, 1000, 8, 16) is None
    assert cache.measured_bandwidth(KEY) == 3.0e12


def test_warns_once_per_file_version_and_rereads_on_change():
    path = _write("{bad")
    with pytest.warns(RuntimeWarning):
        cache.lookup(KEY, "float32", "nn", None, 1000, 8, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache.lookup(KEY, "float32", "nn", None, 1000, 8, 8) is None
    path.write_text(json.dumps(_valid_doc()) + " " * 7)  # a new size: re-read
    assert cache.lookup(KEY, "float32", "nn", None, 1000, 8, 8) == "tsm2l"


def test_store_replaces_an_untrusted_file_and_merges_a_trusted_one():
    _write(json.dumps(_valid_doc(device={"key": "someone-else"})))
    with pytest.warns(RuntimeWarning):
        cache.store(DEV, {"float32/nn/1/5/5/5": {"target": "xla"}})
    assert cache.lookup(KEY, "float32", "nn", None, 5, 5, 5) == "xla"
    cache.store(DEV, {"float32/nn/1/6/6/6": {"target": "tsm2r"}}, measured_read_bytes_per_s=2e12)
    assert cache.lookup(KEY, "float32", "nn", None, 5, 5, 5) == "xla"
    assert cache.lookup(KEY, "float32", "nn", None, 6, 6, 6) == "tsm2r"
    assert cache.measured_bandwidth(KEY) == 2e12
    with pytest.raises(ValueError, match="malformed"):
        cache.store(DEV, {"float32/nn/1/6/6/6": {"target": "tsm2t"}})
    assert not list(cache.cache_dir().glob("*.tmp"))


@pytest.mark.parametrize(
    "text,why",
    [
        ("[" * 100_000 + "]" * 100_000, "RecursionError"),
        ('{"a": ' * 50_000 + "1" + "}" * 50_000, "RecursionError"),
        (json.dumps(_valid_doc(version=7)).replace('"version": 7', '"version": ' + "7" * 5000),
         "digits"),
        ('{"schema": "jax_tsm2.tune", "version": 1, "device": {"key": "' + KEY + '"}, '
         '"measured_read_bytes_per_s": ' + "9" * 5000 + ', "entries": {}}', "digits"),
    ],
)  # fmt: skip
def test_a_file_the_parser_chokes_on_is_ignored_everywhere(text, why):
    """Deep nesting and huge integers make json.loads raise RecursionError / ValueError: the
    cache, routing and explain() carry on as with no cache, after one warning."""
    import jax
    import jax.numpy as jnp

    import jax_tsm2
    from jax_tsm2 import routing

    _write(text)
    with pytest.warns(RuntimeWarning, match=why):
        assert cache.lookup(KEY, "float32", "nn", None, 1000, 8, 8) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per file version
        assert cache.measured_bandwidth(KEY) is None
        a = jax.ShapeDtypeStruct((10**6, 8), jnp.float32)
        b = jax.ShapeDtypeStruct((8, 8), jnp.float32)
        r = routing.route(a, b, jnp.float32, platform="cuda", mode="auto", device=H100)
        assert r.layer != "tune cache"
        e = jax_tsm2.explain(a, b, mode="auto", device=H100, show=False)
        assert e.tuned is None


def test_a_fifo_in_place_of_the_file_does_not_block(tmp_path):
    """Opening a FIFO for reading waits for a writer: the cache must not open it at all."""
    import threading

    path = cache.cache_path(KEY)
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    got = {}

    def look():
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            got["target"] = cache.lookup(KEY, "float32", "nn", None, 1000, 8, 8)
            got["warnings"] = [str(x.message) for x in w]

    t = threading.Thread(target=look, daemon=True)
    t.start()
    t.join(timeout=20)
    if t.is_alive():  # release the reader blocked in open() before failing
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        t.join(timeout=5)
        pytest.fail("cache.lookup blocked on a FIFO")
    assert got["target"] is None
    assert any("not a regular file" in m for m in got["warnings"]), got["warnings"]


def test_a_directory_or_an_oversized_file_is_ignored(monkeypatch):
    path = cache.cache_path(KEY)
    path.mkdir(parents=True)
    with pytest.warns(RuntimeWarning, match="not a regular file"):
        assert cache.lookup(KEY, "float32", "nn", None, 1000, 8, 8) is None
    path.rmdir()
    monkeypatch.setattr(cache, "MAX_BYTES", 1000)
    doc = _valid_doc()
    doc["padding"] = "x" * 2000
    _write(json.dumps(doc))
    with pytest.warns(RuntimeWarning, match="more than the 1000"):
        assert cache.lookup(KEY, "float32", "nn", None, 1000, 8, 8) is None


@pytest.mark.parametrize("bw", [float("nan"), float("inf"), -1.0, 0, True, "3e12", [3e12]])
def test_a_bad_measured_bandwidth_is_dropped_and_the_entries_kept(bw):
    _write(json.dumps(_valid_doc(measured_read_bytes_per_s=bw)))
    assert cache.measured_bandwidth(KEY) is None
    assert cache.lookup(KEY, "float32", "nn", None, 1000, 8, 8) == "tsm2l"
    assert model.current_device().bandwidth() > 0

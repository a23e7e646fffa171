"""conftest.py's options for runs split over GPU-machine calls: ``--shard I/N`` (the parts of a
run are disjoint and together make it whole) and ``--unreached FILE`` (what a run cut short left
undone)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import shard_of


def test_every_test_id_falls_in_exactly_one_part():
    ids = [f"tests/test_x.py::test_{i}[{i % 7}]" for i in range(3000)]
    for parts in (1, 2, 3, 5):
        counts = [0] * parts
        for nodeid in ids:
            part = shard_of(nodeid, parts)
            assert 1 <= part <= parts
            assert shard_of(nodeid, parts) == part  # stable
            counts[part - 1] += 1
        assert sum(counts) == len(ids)
        assert min(counts) > 0.8 * len(ids) / parts  # a hash, so close to even


def _collected(*args: str) -> set[str]:
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider",
         "tests/test_shards.py", "tests/test_calibrate.py", *args],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    return set(re.findall(r"^(tests/\S+::\S+)$", r.stdout, re.M))


def test_the_shards_of_a_run_partition_it():
    whole = _collected()
    halves = [_collected("--shard", f"{i}/2") for i in (1, 2)]
    assert whole and all(halves)
    assert halves[0].isdisjoint(halves[1]) and halves[0] | halves[1] == whole


def test_a_bad_shard_gets_a_usage_error():
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--shard", "3/2", "tests/test_shards.py"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert r.returncode == 4 and "I must be between 1 and N" in r.stderr + r.stdout


# test_b interrupts its run (with CUT set) as TEST_TIMEOUT does: SIGINT to the process that
# runs the session (pytest-xdist's controller is a worker's parent).
_CUT_AT_B = """
import os, signal, time

def test_a(): pass

def test_b():
    if os.environ.get("CUT"):
        worker = os.environ.get("PYTEST_XDIST_WORKER")
        os.kill(os.getppid() if worker else os.getpid(), signal.SIGINT)
        time.sleep(3)

def test_c(): pass
def test_d(): pass
"""


@pytest.mark.parametrize("workers", [["-p", "no:xdist"], ["-n", "1"]], ids=["serial", "xdist"])
def test_a_run_cut_short_lists_what_it_did_not_reach(tmp_path, workers):
    """Interrupted in ``test_b``, a run lists ``test_c`` and ``test_d`` (and ``test_b`` where
    it did not finish) as not reached, from the selection that pytest-xdist's controller takes
    from its workers too. Fed back as ``@FILE``, they run; a run that finishes lists none."""
    (tmp_path / "test_cut.py").write_text(_CUT_AT_B)
    here = str(Path(__file__).parent)  # conftest.py, loaded as a plugin by name
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}  # ours
    env["PYTHONPATH"] = os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])

    def pytest_(*args: str, **more: str) -> subprocess.CompletedProcess:
        # Python leaves SIGINT ignored where it starts so (a job put in the background by a
        # shell without job control): the session gets back its KeyboardInterrupt handler.
        main = (
            "import signal, sys, pytest; signal.signal(signal.SIGINT, signal.default_int_handler)"
            "; sys.exit(pytest.main(sys.argv[1:]))"
        )
        return subprocess.run(
            [sys.executable, "-c", main, "-q", "-p", "conftest", "-p", "no:cacheprovider",
             "--rootdir", str(tmp_path), *args],
            capture_output=True, text=True, check=False, cwd=tmp_path, env={**env, **more},
        )  # fmt: skip

    cut, rest = tmp_path / "cut.unreached", tmp_path / "rest.unreached"
    r = pytest_(*workers, "--unreached", str(cut), "test_cut.py", CUT="1")
    assert r.returncode == 2, r.stdout + r.stderr  # interrupted
    left = cut.read_text().splitlines()
    assert left[-2:] == ["test_cut.py::test_c", "test_cut.py::test_d"], left
    assert set(left) <= {"test_cut.py::test_b", "test_cut.py::test_c", "test_cut.py::test_d"}
    r = pytest_(*workers, f"@{cut}", "--unreached", str(rest))
    assert r.returncode == 0 and f"{len(left)} passed" in r.stdout, r.stdout + r.stderr
    assert rest.read_text() == ""

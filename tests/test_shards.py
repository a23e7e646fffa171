"""``--shard I/N`` (conftest.py): the parts of a run are disjoint and together make it whole."""

import re
import subprocess
import sys

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

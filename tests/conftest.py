"""Shared pytest setup: float64 on, deterministic hypothesis profiles, which tests run.

- x64 is enabled for the whole suite so that float64 is a real dtype under test
  (and the reference for the others).
- Tests marked `gpu` are deselected (not collected as skips) unless this process
  has a CUDA device and the extension was built with the CUDA targets; one line
  of the summary says how many and why.
- Tests marked `slow` (the rest of the parameter matrices whose representative
  slice runs by default, scikit-learn's conformance suite, end-to-end command
  lines) are deselected unless `--run-slow` is given or a `-m` expression picks
  the tests itself (`-m gpu` on a GPU machine runs every GPU test). CI runs them.
- `--shard I/N` keeps the I-th of N fixed parts of whatever else runs (by a hash
  of each test's id), so that a suite too long for one GPU-machine call runs
  whole in N calls (benchmarks/gpu_session.sh SHARD).
- `--unreached FILE` writes, when the session ends (interrupted too), the ids of
  the selected tests that did not finish, one a line: what a run cut short left
  undone, for `pytest @FILE` to run next.
- Hypothesis is derandomized: the same examples every run. The default run
  uses profile "quick" (fewer examples), `--run-slow` profile "ci";
  HYPOTHESIS_PROFILE=dev gives more, randomized examples.
- The autotuner's cache directory points at an empty temporary directory, so
  that routing in mode "auto" never depends on the machine's own tune cache.
"""

from __future__ import annotations

import os
import zlib

import jax
import pytest
from hypothesis import HealthCheck, settings

jax.config.update("jax_enable_x64", True)

import jax_tsm2  # noqa: E402  (after x64: importing registers the FFI targets)
from jax_tsm2 import _ffi  # noqa: E402

_DETERMINISTIC = {
    "derandomize": True,
    "deadline": None,
    "print_blob": True,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much],
}
settings.register_profile("ci", max_examples=12, **_DETERMINISTIC)
settings.register_profile("quick", max_examples=3, **_DETERMINISTIC)
settings.register_profile("dev", max_examples=200, deadline=None)

_DESELECTED = pytest.StashKey[dict[str, str]]()


def pytest_addoption(parser):
    parser.addoption(
        "--run-slow",
        action="store_true",
        help="also run the tests marked slow (CI does; so does any -m expression)",
    )

    parser.addoption(
        "--shard",
        default=None,
        metavar="I/N",
        help="run only part I of N of the selected tests (1 <= I <= N), split by test id",
    )
    parser.addoption(
        "--unreached",
        default=None,
        metavar="FILE",
        help="at the end (interrupted too), write the ids of the selected tests that did not run",
    )


def shard_of(nodeid: str, parts: int) -> int:
    """The part (1..parts) a test belongs to: stable across runs, machines and processes."""
    return zlib.crc32(nodeid.encode()) % parts + 1


def _shard(config) -> tuple[int, int] | None:
    spec = config.getoption("--shard")
    if spec is None:
        return None
    try:
        part, parts = (int(x) for x in spec.split("/"))
    except ValueError:
        raise pytest.UsageError(f"--shard takes I/N, such as 1/2; got {spec!r}") from None
    if not 1 <= part <= parts:
        raise pytest.UsageError(f"--shard {spec}: I must be between 1 and N")
    return part, parts


def _runs_slow(config) -> bool:
    return bool(config.getoption("--run-slow") or config.getoption("markexpr"))


def pytest_configure(config):
    default = "ci" if _runs_slow(config) else "quick"
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", default))
    path = config.getoption("--unreached")
    if path is not None and not hasattr(config, "workerinput"):  # the controller writes it
        config.pluginmanager.register(_Unreached(path), "tsm2_unreached")


def gpu_unavailable_reason() -> str | None:
    if not _ffi.cuda_backend_present():
        return "no CUDA device in this process"
    if not _ffi.cuda_targets_available():
        return "jax_tsm2 was built without the CUDA targets (TSM2_CUDA=OFF?)"
    return None


@pytest.hookimpl(trylast=True)  # after -m and -k: count only what they left
def pytest_collection_modifyitems(config, items):
    """Deselects what this run leaves out; a skip per test would flood the summary."""
    rules = []
    reason = gpu_unavailable_reason()
    if reason is not None:
        rules.append(("gpu", reason))
    if not _runs_slow(config):
        rules.append(("slow", "run them with --run-slow"))
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: other workers share the GPU
        rules.append(("timing", "they time the GPU, which other workers share: run them alone"))
    notes, dropped = {}, set()
    for marker, why in rules:
        hit = [item for item in items if marker in item.keywords and item not in dropped]
        if hit:
            dropped.update(hit)
            notes[marker] = f"deselected {len(hit)} {marker} tests: {why}"
    if (shard := _shard(config)) is not None:
        part, parts = shard
        other = [i for i in items if i not in dropped and shard_of(i.nodeid, parts) != part]
        if other:
            dropped.update(other)
            notes["shard"] = f"deselected {len(other)} tests of other shards than {part}/{parts}"
    if dropped:
        config.hook.pytest_deselected(items=[item for item in items if item in dropped])
        items[:] = [item for item in items if item not in dropped]
    config.stash[_DESELECTED] = notes
    if hasattr(config, "workeroutput"):  # a pytest-xdist worker: tell the controller
        config.workeroutput["tsm2_deselected"] = notes


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist's controller collects nothing: it takes the notes of its workers."""
    notes = getattr(node, "workeroutput", {}).get("tsm2_deselected")
    if notes is not None:
        node.config.stash[_DESELECTED] = notes


class _Unreached:
    """``--unreached FILE``: the selected tests that did not finish, written at the end."""

    def __init__(self, path: str) -> None:
        self.path, self.selected, self.reported = path, [], set()

    def pytest_collection_finish(self, session):
        self.selected = [item.nodeid for item in session.items]

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids):
        # pytest-xdist's controller collects nothing; each worker sends the whole selection.
        self.selected = list(ids)

    def pytest_runtest_logreport(self, report):
        if report.when == "teardown":  # a test cut short in its call runs again
            self.reported.add(report.nodeid)

    def pytest_sessionfinish(self, session):
        with open(self.path, "w") as f:
            f.writelines(t + "\n" for t in self.selected if t not in self.reported)


def pytest_terminal_summary(terminalreporter, config):
    for note in config.stash.get(_DESELECTED, {}).values():
        terminalreporter.write_line(note)


@pytest.fixture(autouse=True)
def _empty_tune_cache(tmp_path_factory, monkeypatch):
    from jax_tsm2.tune import cache

    monkeypatch.setenv(cache.ENV_DIR, str(tmp_path_factory.mktemp("tune_cache")))


@pytest.fixture(autouse=True)
def _restore_custom_call_mode():
    """A test that sets the global mode or autotune switch must not leak it into the next."""
    before, autotune = jax_tsm2.get_custom_call_mode(), jax_tsm2.get_autotune()
    yield
    jax_tsm2.set_custom_call_mode(before)
    jax_tsm2.set_autotune(autotune)

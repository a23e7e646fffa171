"""``python -m jax_tsm2.launch``: the processes it starts, what each sees, and its failures.

The children here are plain Python one-liners (no JAX), so each test takes about a second;
a launch that runs JAX across processes is in test_sharding.py (``_distributed_worker.py``)
and test_multi_gpu_benchmark.py.
"""

from __future__ import annotations

import io
import signal
import subprocess
import sys
import time

import pytest
from _helpers import PACKAGE_ROOT, package_env, run_python

from jax_tsm2 import launch

PRINT_ENV = (
    "import os; e = os.environ; print(e['JAX_PROCESS_ID'], e['JAX_NUM_PROCESSES'], "
    "e['JAX_COORDINATOR_ADDRESS'], e['CUDA_VISIBLE_DEVICES'], e['NCCL_NVLS_ENABLE'], "
    "e['NVSHMEM_DISABLE_NVLS'])"
)


def _launch(code: str, nproc: int, **kwargs) -> tuple[int, list[str]]:
    buf = io.StringIO()
    status = launch.launch([sys.executable, "-c", code], nproc, out=buf, **kwargs)
    return status, buf.getvalue().splitlines()


def test_each_process_gets_its_id_its_gpu_and_no_multicast():
    env = {k: v for k, v in package_env().items() if k != "CUDA_VISIBLE_DEVICES"}
    env["NCCL_NVLS_ENABLE"] = "1"  # the caller's setting does not reach the processes
    status, lines = _launch(PRINT_ENV, 3, env=env, port=23456)
    assert status == 0, lines
    assert sorted(lines) == [f"[{r}] {r} 3 localhost:23456 {r} 0 1" for r in range(3)]


def test_the_callers_gpu_list_is_dealt_out_in_order():
    env = dict(package_env(), CUDA_VISIBLE_DEVICES="5, 7,2")
    status, lines = _launch(PRINT_ENV, 2, env=env)
    assert status == 0, lines
    assert sorted(line.split()[4] for line in lines) == ["5", "7"]
    with pytest.raises(ValueError, match="lists 3 GPUs for 4"):
        launch.launch([sys.executable, "-c", "pass"], 4, env=env)


def test_a_failing_process_fails_the_run_and_stops_the_others():
    code = (
        "import os, sys, time\n"
        "rank = int(os.environ['JAX_PROCESS_ID'])\n"
        "print('up', flush=True)\n"
        "if rank == 1:\n"
        "    time.sleep(0.5); sys.exit(3)\n"
        "time.sleep(120); print('should not get here')\n"
    )
    t0 = time.monotonic()
    status, lines = _launch(code, 3)
    assert status == 3, lines
    assert time.monotonic() - t0 < 30  # the sleepers were stopped, not waited for
    assert sorted(lines) == ["[0] up", "[1] up", "[2] up"]


def test_a_process_killed_by_a_signal_reports_it_as_a_shell_does():
    code = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    status, _ = _launch(code, 2)
    assert status == 128 + 9


def test_the_timeout_stops_every_process_with_124():
    t0 = time.monotonic()
    status, lines = _launch("import time; print('up', flush=True); time.sleep(120)", 2, timeout=1)
    assert status == launch.TIMED_OUT == 124
    assert time.monotonic() - t0 < 30
    assert sorted(lines) == ["[0] up", "[1] up"]


def test_output_without_a_final_newline_and_stderr_are_forwarded():
    code = "import sys; sys.stderr.write('to stderr\\n'); sys.stdout.write('no newline')"
    status, lines = _launch(code, 1)
    assert status == 0
    assert sorted(lines) == ["[0] no newline", "[0] to stderr"]


def test_initialize_is_a_no_op_outside_the_launcher(monkeypatch):
    monkeypatch.delenv(launch.ENV_PROCESS_ID, raising=False)
    assert launch.initialize() is False


def test_the_command_line_runs_the_program_and_passes_its_status_on():
    code = "import os, sys; sys.exit(int(os.environ['JAX_PROCESS_ID']) + 4)"
    r = run_python(["-m", "jax_tsm2.launch", "--nproc", "2", "--", sys.executable, "-c", code])
    assert r.returncode in (4, 5), r.stderr  # whichever process the launcher sees exit first
    assert "exited with status" in r.stderr and "Traceback" not in r.stderr


def test_without_nproc_and_without_gpus_it_is_a_usage_error(monkeypatch, capsys):
    monkeypatch.setattr(launch, "_count_gpus", lambda: None)
    with pytest.raises(SystemExit) as exit_:
        launch.main(["--", "true"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("usage:") and "--nproc" in err, err


def test_a_gpu_list_shorter_than_nproc_is_a_usage_error(monkeypatch, capsys):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with pytest.raises(SystemExit) as exit_:
        launch.main(["--nproc", "3", "--", "true"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "lists 2 GPUs for 3" in err, err


def test_a_terminated_launcher_stops_its_processes(tmp_path):
    """SIGTERM to the launcher (as ``timeout`` sends) stops the processes it started, which
    run in sessions of their own."""
    code = (
        "import os, time\n"
        "name = os.path.join(os.environ['PIDS'], os.environ['JAX_PROCESS_ID'])\n"
        "open(name + '.tmp', 'w').write(str(os.getpid()))\n"
        "os.rename(name + '.tmp', name + '.pid')\n"  # whole, or not there
        "time.sleep(120)\n"
    )
    cmd = [sys.executable, "-m", "jax_tsm2.launch", "--nproc", "2", "--", sys.executable, "-c"]
    proc = subprocess.Popen(
        [*cmd, code],
        cwd=PACKAGE_ROOT,
        env=package_env(PIDS=str(tmp_path)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("*.pid"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        children = [int(p.read_text()) for p in tmp_path.glob("*.pid")]
        assert len(children) == 2
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
    for pid in children:
        assert not _still_running(pid, "time.sleep(120)"), pid


def _still_running(pid: int, marker: str, wait_s: float = 10.0) -> bool:
    """Whether process ``pid`` still runs a command line containing ``marker`` after up to
    ``wait_s`` seconds: on a loaded machine its pid may be reaped a moment late, or reused by
    an unrelated process once it is gone."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() not in f.read():
                    return False  # gone, and the pid is another process's now
        except (FileNotFoundError, ProcessLookupError):
            return False
        time.sleep(0.1)
    return True

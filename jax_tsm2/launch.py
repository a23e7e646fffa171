"""``python -m jax_tsm2.launch``: one process per GPU of this machine, joined by jax.distributed.

Example::

    python -m jax_tsm2.launch --nproc 4 -- python train.py --epochs 3

starts four copies of the command. Process ``r`` sees one GPU, the ``r``-th
(``CUDA_VISIBLE_DEVICES``, taken from the caller's own list when it sets one),
and finds in its environment what :func:`initialize` passes on to
``jax.distributed.initialize``: the coordinator (``localhost`` and a free
port), the number of processes and its own id. In the program::

    import jax_tsm2.launch

    jax_tsm2.launch.initialize()  # before any other JAX call; a no-op when not launched
    mesh = jax.make_mesh((jax.device_count(),), ("p",))  # every GPU of every process

Every process gets ``NCCL_NVLS_ENABLE=0`` and ``NVSHMEM_DISABLE_NVLS=1``:
NVLink multicast stays off (docs/sharding.md says why). Output lines are
forwarded with the process id in front (``[2] ...``). When a process exits
with an error the others are stopped and the launcher exits with that status;
past ``--timeout`` seconds all are stopped and it exits with 124.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import IO, Any

from jax_tsm2 import _cli

__all__ = ["ENV_COORDINATOR", "ENV_NUM_PROCESSES", "ENV_PROCESS_ID", "initialize", "launch"]

ENV_COORDINATOR = "JAX_COORDINATOR_ADDRESS"  # jax reads this name itself as well
ENV_NUM_PROCESSES = "JAX_NUM_PROCESSES"
ENV_PROCESS_ID = "JAX_PROCESS_ID"
ENV_COMMAND = "JAX_TSM2_LAUNCH_COMMAND"  # the launcher's command line, for provenance

# NVLink multicast (NVLS) off in NCCL and NVSHMEM, whatever the caller's environment says.
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "NVSHMEM_DISABLE_NVLS": "1"}

TIMED_OUT = 124  # as coreutils' timeout
_GRACE_S = 5.0  # between SIGTERM and SIGKILL when stopping processes


def initialize(*, initialization_timeout: int = 300) -> bool:
    """Joins the processes started by ``python -m jax_tsm2.launch``; returns whether it did.

    Reads the coordinator, the number of processes and this process's id from
    the environment the launcher set and calls ``jax.distributed.initialize``
    with them (cluster auto-detection off: they are all given). Outside the
    launcher it does nothing and returns False, so a program runs unchanged
    as one process. Call it before any other JAX call.

    Example:
        >>> import os
        >>> initialize() if "JAX_PROCESS_ID" not in os.environ else False
        False
    """
    if ENV_PROCESS_ID not in os.environ:
        return False
    import jax

    jax.distributed.initialize(
        coordinator_address=os.environ[ENV_COORDINATOR],
        num_processes=int(os.environ[ENV_NUM_PROCESSES]),
        process_id=int(os.environ[ENV_PROCESS_ID]),
        cluster_detection_method="deactivate",
        initialization_timeout=initialization_timeout,
    )
    return True


def free_port() -> int:
    """A TCP port on localhost that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return int(s.getsockname()[1])


def gpu_ids(nproc: int, visible: str | None) -> list[str]:
    """The GPU each process sees: the caller's ``CUDA_VISIBLE_DEVICES`` entries in order,
    or ``0 .. nproc-1``; ValueError when the caller's list is too short.

    Example:
        >>> gpu_ids(2, None), gpu_ids(2, "3,5,6")
        (['0', '1'], ['3', '5'])
    """
    if visible is None or not visible.strip():
        return [str(r) for r in range(nproc)]
    ids = [v.strip() for v in visible.split(",") if v.strip()]
    if len(ids) < nproc:
        raise ValueError(f"CUDA_VISIBLE_DEVICES={visible!r} lists {len(ids)} GPUs for {nproc}")
    return ids[:nproc]


def child_env(rank: int, nproc: int, port: int, gpu: str, base: dict[str, str]) -> dict[str, str]:
    """The environment of process ``rank``."""
    env = dict(base)
    env.update(NO_MULTICAST)
    env[ENV_COORDINATOR] = f"localhost:{port}"
    env[ENV_NUM_PROCESSES] = str(nproc)
    env[ENV_PROCESS_ID] = str(rank)
    env["CUDA_VISIBLE_DEVICES"] = gpu
    env.setdefault("PYTHONUNBUFFERED", "1")  # lines arrive as they are printed
    return env


def _forward(rank: int, stream: IO[str], out: IO[str], lock: threading.Lock) -> None:
    for line in stream:
        with lock:
            out.write(f"[{rank}] {line}" if line.endswith("\n") else f"[{rank}] {line}\n")
            out.flush()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    # Each process leads its own group, so that what it started is stopped with it.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def _stop(procs: Sequence[subprocess.Popen]) -> None:
    alive = [p for p in procs if p.poll() is None]
    for p in alive:
        _signal_group(p, signal.SIGTERM)
    deadline = time.monotonic() + _GRACE_S
    for p in alive:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(max(0.0, deadline - time.monotonic()))
    for p in alive:
        if p.poll() is None:
            _signal_group(p, signal.SIGKILL)
            p.wait()


def _stop_on_termination(received: list[int]) -> dict[int, Any]:
    """SIGTERM and SIGHUP stop the processes too: each leads its own session, so a signal
    to the launcher's group would not reach them. The handler only records the signal in
    ``received``, which the launcher's loop polls: an exception raised from a handler can
    land in a callback that swallows it (a garbage-collection callback of jax did, and the
    launcher kept running). Returns the handlers it replaced."""
    if threading.current_thread() is not threading.main_thread():
        return {}  # signal handlers can only be set from the main thread

    def handler(signum: int, frame: Any) -> None:
        received.append(signum)

    return {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}


def _status(code: int) -> int:
    return 128 - code if code < 0 else code  # killed by signal s: 128 + s, as a shell says


def launch(
    command: Sequence[str],
    nproc: int,
    *,
    port: int | None = None,
    timeout: float | None = None,
    env: dict[str, str] | None = None,
    out: IO[str] | None = None,
) -> int:
    """Runs ``command`` as ``nproc`` processes, one GPU each; returns the exit status.

    0 when every process exits with 0; the status of the first process that
    fails otherwise (the others are stopped); 124 when ``timeout`` seconds pass
    first. Output (stdout and stderr together) goes to ``out`` line by line,
    each prefixed with ``[rank]``.

    Example:
        >>> import io, sys
        >>> buf = io.StringIO()
        >>> launch([sys.executable, "-c", "print('hi')"], 1, out=buf), buf.getvalue()
        (0, '[0] hi\\n')
    """
    out = sys.stdout if out is None else out
    base = dict(os.environ if env is None else env)
    gpus = gpu_ids(nproc, base.get("CUDA_VISIBLE_DEVICES"))
    port = free_port() if port is None else port
    lock = threading.Lock()
    procs: list[subprocess.Popen] = []
    threads = []
    status, failed = 0, None
    start = time.monotonic()
    received: list[int] = []
    previous = _stop_on_termination(received)
    try:
        for rank in range(nproc):
            p = subprocess.Popen(
                list(command),
                env=child_env(rank, nproc, port, gpus[rank], base),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                bufsize=1,
                start_new_session=True,
            )
            procs.append(p)
            t = threading.Thread(target=_forward, args=(rank, p.stdout, out, lock), daemon=True)
            t.start()
            threads.append(t)
        while not received:
            codes = [p.poll() for p in procs]
            bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                failed, code = bad[0]
                status = _status(code)
                break
            if all(c == 0 for c in codes):
                break
            if timeout is not None and time.monotonic() - start > timeout:
                status = TIMED_OUT
                break
            time.sleep(0.05)
    except KeyboardInterrupt:
        status = 130
    finally:
        _stop(procs)
        for t in threads:
            t.join(timeout=_GRACE_S)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if received and failed is None and status != TIMED_OUT:
        status = 128 + received[0]
    if failed is not None:
        print(
            f"launch: process {failed} of {nproc} exited with status {status}; stopped the others",
            file=sys.stderr,
        )
    elif status == TIMED_OUT:
        print(f"launch: timed out after {timeout:g} s; stopped all processes", file=sys.stderr)
    return status


def _count_gpus() -> int | None:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip():
        return len([v for v in visible.split(",") if v.strip()])
    try:
        r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    n = sum(line.startswith("GPU ") for line in r.stdout.splitlines())
    return n if r.returncode == 0 and n else None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m jax_tsm2.launch",
        description=__doc__.split("\n")[0],
        usage="%(prog)s [-h] [--nproc N] [--port PORT] [--timeout SECONDS] -- COMMAND ...",
    )
    p.add_argument(
        "--nproc",
        type=_cli.positive_int,
        help="processes, one GPU each (default: the GPUs of this machine, or CUDA_VISIBLE_DEVICES)",
    )
    p.add_argument(
        "--port", type=_cli.positive_int, help="coordinator port on localhost (default: a free one)"
    )
    p.add_argument(
        "--timeout",
        type=_cli.positive_float,
        help="stop every process after this many seconds (exit status 124)",
    )
    p.add_argument("command", nargs=argparse.REMAINDER, help="the program and its arguments")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 for bad arguments)."""
    p = parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("no command: put it after --, e.g. -- python train.py")
    if args.port is not None and args.port > 65535:
        p.error(f"--port: expected a TCP port (1 to 65535), got {args.port}")
    nproc = args.nproc
    if nproc is None:
        nproc = _count_gpus()
        if nproc is None:
            p.error("--nproc not given and no GPU found (nvidia-smi -L, CUDA_VISIBLE_DEVICES)")
    try:
        gpu_ids(nproc, os.environ.get("CUDA_VISIBLE_DEVICES"))
    except ValueError as err:
        p.error(f"--nproc {nproc}: {err}")
    env = dict(os.environ)
    env[ENV_COMMAND] = shlex.join(["python", "-m", "jax_tsm2.launch", *argv])
    return launch(command, nproc, port=args.port, timeout=args.timeout, env=env)


if __name__ == "__main__":
    raise SystemExit(main())

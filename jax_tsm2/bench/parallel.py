"""``--gpus N``: one grid split over N GPUs of this host, a process per GPU, then merged.

A grid's shapes are drawn in sequence, so the shapes ``I..J-1`` of a grid of ``J`` shapes
are the same shapes in every run of the seed: each child runs the parent's command line with
``--grid J --grid-start I --out <its own directory>`` appended (the last of a repeated flag
wins), on the GPU that ``CUDA_VISIBLE_DEVICES`` names for it, and the parent merges their
``bench.json`` files as ``--merge`` does. Every child measures its own ceilings; each record
keeps its run's floor. The children's directories are kept where a child fails (their
``bench.partial.json`` holds what was measured), and removed otherwise.

Example (the slices of a 120-shape grid over four GPUs):
    >>> slices(0, 120, 4)
    [(0, 30), (30, 60), (60, 90), (90, 120)]
    >>> slices(100, 103, 4)  # never an empty slice
    [(100, 101), (101, 102), (102, 103)]

The GPUs are the first G of ``CUDA_VISIBLE_DEVICES``, else ``0..G-1``, as
``python -m jax_tsm2.launch`` picks them (``launch.gpu_ids``).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from jax_tsm2.bench import report

Log = Callable[[str], None]


def slices(start: int, stop: int, parts: int) -> list[tuple[int, int]]:
    """``[start, stop)`` in at most ``parts`` contiguous, non-empty, near-equal slices."""
    n = stop - start
    parts = max(1, min(parts, n))
    bounds = [start + n * i // parts for i in range(parts + 1)]
    return list(itertools.pairwise(bounds))


def _relay(stream: Any, prefix: str, log: Log) -> None:
    for line in stream:
        log(prefix + line.rstrip("\n"))


def run(
    argv: Sequence[str],
    *,
    start: int,
    stop: int,
    gpus: Sequence[str],
    log: Log,
    python: str = sys.executable,
) -> dict[str, Any]:
    """Runs grid shapes ``[start, stop)`` of the parent's command line ``argv`` split over
    ``gpus`` (one child process each) and returns the merged document. RuntimeError names
    the children that failed and where their partial results are."""
    work = Path(tempfile.mkdtemp(prefix="jax_tsm2_bench_"))
    log(f"--gpus {len(gpus)}: grid shapes {start}..{stop - 1} over GPUs {','.join(gpus)}; "
        f"each child's results in {work}")  # fmt: skip
    children = []
    for gpu, (lo, hi) in zip(gpus, slices(start, stop, len(gpus)), strict=False):
        out = work / f"gpu{gpu}-{lo}-{hi}"
        args = [*argv, "--gpus", "1", "--grid", str(hi), "--grid-start", str(lo), "--out", str(out)]
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=gpu)
        proc = subprocess.Popen(
            [python, "-m", "jax_tsm2.bench", *args],
            env=env,
            stdout=subprocess.DEVNULL,  # each child's table; the parent prints the merged one
            stderr=subprocess.PIPE,
            text=True,
        )
        relay = threading.Thread(target=_relay, args=(proc.stderr, f"[gpu {gpu}] ", log))
        relay.start()
        children.append((gpu, out, proc, relay))
    failed, docs = [], []
    for gpu, out, proc, relay in children:
        code = proc.wait()
        relay.join()
        if code != 0 or not (out / "bench.json").is_file():
            failed.append(f"GPU {gpu} (exit {code}, partial results in {out})")
        else:
            docs.append(json.loads((out / "bench.json").read_text()))
    if failed:
        raise RuntimeError("--gpus: children failed: " + "; ".join(failed))
    doc = report.merge(docs)
    if isinstance(doc.get("grid"), dict):
        doc["grid"].update(shapes=stop, start=start)
    shutil.rmtree(work, ignore_errors=True)
    return doc

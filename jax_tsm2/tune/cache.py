"""The autotuner's per-GPU cache: which path measured fastest for a shape, on this GPU.

One JSON file per GPU model, ``tune-<device key>.json`` (``model.Device.key``:
name, compute capability, SM count), in the cache directory:

1. ``$JAX_TSM2_CACHE_DIR`` when set;
2. else the platform's user cache directory for ``jax_tsm2``
   (``platformdirs.user_cache_dir``): on Linux ``$XDG_CACHE_HOME/jax_tsm2``,
   else ``~/.cache/jax_tsm2``.

Writers in several processes (tuners on the GPUs of one host, online tuning
in each of a job's processes) may share a file: ``store`` holds a lock file
beside it (``<file>.lock``) while it reads, merges and replaces it, so each
writer's entries land.

Layout of a file (``SCHEMA``, version ``VERSION``)::

    {"schema": "jax_tsm2.tune", "version": 1,
     "device": {"key": ..., "name": ..., "cc": [9, 0], "sm_count": 132},
     "measured_read_bytes_per_s": 3.07e12 or null,
     "entries": {"float32/nn/1/20480/20480/8":
                   {"target": "xla", "seconds": {"tsm2r": 6.3e-4, "xla": 5.9e-4},
                    "date": "...", "jax_tsm2": "0.1.0", "jax": "0.11.2"}}}

Routing never needs a file: ``lookup`` answers None when there is no file, no
entry, or the file cannot be trusted. Whatever is at the path, it never
raises and never blocks: something that is not a regular file (a FIFO, a
device, a directory) is not opened for reading, a file over ``MAX_BYTES`` is
not read, and a file that cannot be read, is not valid JSON (including JSON
nested too deeply for the parser, or holding numbers too long to convert),
has another schema or version, belongs to another GPU (its ``device.key``
differs from the one asked for), or holds malformed entries is ignored with a
``RuntimeWarning`` naming the file and the reason (malformed entries alone
are skipped). The verdict on a file is kept until the file changes, so each
version of a file warns once.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import pathlib
import stat
import tempfile
import threading
import warnings
from collections.abc import Mapping
from typing import Any

import filelock
import platformdirs

SCHEMA = "jax_tsm2.tune"
VERSION = 1
ENV_DIR = "JAX_TSM2_CACHE_DIR"
# A cache holds one small entry per tuned shape: thousands of shapes are ~1 MB.
MAX_BYTES = 16 << 20
# A writer holds the lock for one read-merge-write of a small file; a minute
# without it means a stuck process, and an error says so rather than hanging.
LOCK_TIMEOUT_S = 60.0
TARGETS = ("tsm2r", "tsm2l", "tsm2s", "tsm2t", "xla")
_LAYOUT_TARGETS = {
    "nn": ("tsm2r", "tsm2l", "tsm2s", "xla"),
    "nt": ("tsm2r", "tsm2l", "xla"),
    "tn": ("tsm2t", "xla"),
}

_lock = threading.Lock()
# path|device key -> ((mtime_ns, size, inode, mode), parsed file or None); reloaded when
# the file changes.
_memo: dict[str, tuple[tuple[int, int, int, int], dict[str, Any] | None]] = {}


def cache_dir() -> pathlib.Path:
    """The directory holding the tune files (see the module docstring)."""
    env = os.environ.get(ENV_DIR)
    if env:
        return pathlib.Path(env).expanduser()
    return pathlib.Path(platformdirs.user_cache_dir("jax_tsm2", appauthor=False))


def file_lock(path: pathlib.Path) -> filelock.BaseFileLock:
    """The inter-process lock guarding writes of ``path`` (a ``<name>.lock`` file beside it).

    Acquiring it raises ``filelock.Timeout`` (a ``TimeoutError``) after
    ``LOCK_TIMEOUT_S`` seconds.
    """
    return filelock.FileLock(f"{path}.lock", timeout=LOCK_TIMEOUT_S)


def write_json(path: pathlib.Path, doc: Any) -> None:
    """Writes ``doc`` to ``path`` atomically: a temporary file beside it, renamed over it."""
    fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise


def cache_path(device_key: str) -> pathlib.Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in device_key)
    return cache_dir() / f"tune-{safe}.json"


def entry_key(dtype: str, layout: str, batch: int | None, m: int, k: int, n: int) -> str:
    """``dtype/layout/batch/m/k/n`` with a rank-2 problem's batch written as 1."""
    return f"{dtype}/{layout}/{int(batch or 1)}/{int(m)}/{int(k)}/{int(n)}"


def _warn(path: pathlib.Path, why: str) -> None:
    warnings.warn(
        f"jax_tsm2: ignoring tune cache {path}: {why}. Routing uses the model; "
        "re-run `python -m jax_tsm2.tune` to rebuild it.",
        RuntimeWarning,
        stacklevel=4,
    )


def _valid_entry(key: Any, value: Any) -> bool:
    if not isinstance(key, str) or not isinstance(value, Mapping):
        return False
    parts = key.split("/")
    if len(parts) != 6:
        return False
    _, layout, *sizes = parts
    if layout not in _LAYOUT_TARGETS or not all(s.isascii() and s.isdigit() for s in sizes):
        return False
    return value.get("target") in _LAYOUT_TARGETS[layout]


def read_capped(path: pathlib.Path, max_bytes: int | None = None) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``max_bytes`` (default
    ``MAX_BYTES``); else OSError.

    O_NONBLOCK keeps ``open`` from waiting for a writer when the path is a
    FIFO; the type is checked on the opened descriptor, so a file swapped for
    something else between a ``stat`` and the ``open`` is still caught.
    """
    max_bytes = MAX_BYTES if max_bytes is None else max_bytes
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"not a regular file (mode {stat.filemode(st.st_mode)})")
        if st.st_size > max_bytes:
            raise OSError(f"{st.st_size} bytes, more than the {max_bytes} such a file may have")
        chunks, left = [], max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        if left <= 0:  # it grew while being read
            raise OSError(f"more than the {max_bytes} bytes such a file may have")
        return b"".join(chunks)
    finally:
        os.close(fd)


def _parse(path: pathlib.Path, device_key: str) -> dict[str, Any] | None:
    """The file's contents if they can be trusted for device_key; warns and returns None if not."""
    try:
        text = read_capped(path).decode("utf-8")
    except (OSError, UnicodeDecodeError) as err:
        _warn(path, f"unreadable ({err})")
        return None
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as err:
        # ValueError covers JSONDecodeError and integers past Python's digit limit;
        # RecursionError, arrays or objects nested past the parser's depth.
        _warn(path, f"not valid JSON ({type(err).__name__}: {str(err)[:200]})")
        return None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        _warn(path, f"not a {SCHEMA} file")
        return None
    if doc.get("version") != VERSION:
        _warn(path, f"version {_short(doc.get('version'))}, this jax_tsm2 reads version {VERSION}")
        return None
    dev = doc.get("device")
    if not isinstance(dev, dict) or dev.get("key") != device_key:
        other = dev.get("key") if isinstance(dev, dict) else None
        _warn(path, f"written for GPU {_short(other)}, not this one ({device_key!r})")
        return None
    entries = doc.get("entries")
    if not isinstance(entries, dict):
        _warn(path, "no 'entries' object")
        return None
    good = {k: v for k, v in entries.items() if _valid_entry(k, v)}
    if len(good) != len(entries):
        _warn(path, f"{len(entries) - len(good)} malformed entries skipped")
        # The rest are still used: only the offending entries are dropped.
    bw = doc.get("measured_read_bytes_per_s")
    if not _positive_number(bw):
        bw = None
    return dict(doc, entries=good, measured_read_bytes_per_s=bw)


def _positive_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and 0 < x < math.inf


def _short(x: Any) -> str:
    """``repr(x)`` cut to a readable length (a warning may quote anything a file holds)."""
    text = repr(x)
    return text if len(text) <= 80 else text[:77] + "..."


def load(device_key: str) -> dict[str, Any] | None:
    """The trusted contents of this GPU's cache file, or None (memoized per file version)."""
    path = cache_path(device_key)
    try:
        st = path.stat()  # a stat never blocks, whatever the path is
    except (OSError, ValueError):  # ValueError: a NUL in $JAX_TSM2_CACHE_DIR
        return None
    version = (st.st_mtime_ns, st.st_size, st.st_ino, st.st_mode)
    memo_key = f"{path}|{device_key}"
    with _lock:
        hit = _memo.get(memo_key)
        if hit is not None and hit[0] == version:
            return hit[1]
    doc = _parse(path, device_key)
    with _lock:
        _memo[memo_key] = (version, doc)
    return doc


def lookup(
    device_key: str, dtype: Any, layout: str, batch: int | None, m: int, k: int, n: int
) -> str | None:
    """The tuned target ("tsm2r", ..., or "xla") for this problem on this GPU, or None.

    Example:
        >>> lookup("no-such-gpu", "float32", "nn", None, 10, 10, 10) is None
        True
    """
    doc = load(device_key)
    if doc is None:
        return None
    entry = doc["entries"].get(entry_key(_dtype_name(dtype), layout, batch, m, k, n))
    return None if entry is None else entry["target"]


def measured_bandwidth(device_key: str) -> float | None:
    """The streaming-read bandwidth (bytes/s) the tuner measured on this GPU, if any."""
    doc = load(device_key)
    return None if doc is None else doc.get("measured_read_bytes_per_s")


def store(
    device: Mapping[str, Any],
    entries: Mapping[str, Mapping[str, Any]],
    measured_read_bytes_per_s: float | None = None,
) -> pathlib.Path:
    """Merges ``entries`` (``entry_key`` -> {"target", "seconds", ...}) into the GPU's file.

    ``device`` needs ``key``; ``name``, ``cc`` and ``sm_count`` are recorded
    too. An untrusted existing file is replaced, not merged. The write is
    atomic (a temporary file renamed over the old one), and the read, merge
    and write happen under ``file_lock``, so concurrent writers in other
    processes do not drop each other's entries.
    """
    key = device["key"]
    for k, v in entries.items():
        if not _valid_entry(k, v):
            raise ValueError(f"tune cache entry {k!r}: {v!r} is malformed")
    path = cache_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(path):
        return _merge_and_write(path, key, device, entries, measured_read_bytes_per_s)


def _merge_and_write(
    path: pathlib.Path,
    key: str,
    device: Mapping[str, Any],
    entries: Mapping[str, Mapping[str, Any]],
    measured_read_bytes_per_s: float | None,
) -> pathlib.Path:
    # load() re-reads a file whose stat changed, so what another process wrote
    # before this one took the lock is merged, not lost.
    old = load(key) or {}
    merged = dict(old.get("entries", {}))
    merged.update({k: dict(v) for k, v in entries.items()})
    bw = measured_read_bytes_per_s or old.get("measured_read_bytes_per_s")
    doc = {
        "schema": SCHEMA,
        "version": VERSION,
        "device": {k: device[k] for k in ("key", "name", "cc", "sm_count") if k in device},
        "measured_read_bytes_per_s": bw,
        "updated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "entries": dict(sorted(merged.items())),
    }
    write_json(path, doc)
    return path


def _dtype_name(dtype: Any) -> str:
    if isinstance(dtype, str):
        return dtype
    from jax import numpy as jnp

    return jnp.dtype(dtype).name

"""What a calibration file holds: the GPU's ceilings and each probe's measured seconds per
target (``Record``), with provenance (``CalibrationData.made``: date, versions, and the
digest of the kernels it timed, ``kernels_digest``).

Example:
    >>> from jax_tsm2.problem import Problem
    >>> from jax_tsm2.tune.calibration_data import CalibrationData, Record
    >>> rec = Record("float32", "nn", Problem(None, 10**6, 8, 8), {"tsm2l": 3e-5, "xla": 2e-5})
    >>> data = CalibrationData({"key": "GPU"}, 4e12, 2e-6, (rec,), {})
    >>> CalibrationData.from_json(data.to_json()) == data
    True
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import pathlib
from typing import Any

from jax_tsm2 import model
from jax_tsm2.problem import Problem
from jax_tsm2.tune.probes import DTYPES

SCHEMA = "jax_tsm2.calibration"
VERSION = 1


@dataclasses.dataclass(frozen=True)
class Record:
    """What one probe measured: seconds per target (targets that failed are absent), and
    XLA's plan for its product (``model.xla_plan``) where the calibration compiled one."""

    dtype: str
    layout: str
    problem: Problem
    seconds: dict[str, float]
    xla_plan: model.XlaPlan | None = None

    def to_json(self) -> dict[str, Any]:
        p = self.problem
        out = {
            "dtype": self.dtype,
            "layout": self.layout,
            "batch": p.batch,
            "m": p.m,
            "k": p.k,
            "n": p.n,
            "seconds": dict(sorted(self.seconds.items())),
        }
        if self.xla_plan is not None:
            out["xla_plan"] = self.xla_plan.to_json()
        return out

    @classmethod
    def from_json(cls, d: Any) -> Record:
        if not isinstance(d, dict):
            raise ValueError(f"a probe record must be an object, got {type(d).__name__}")
        dtype, layout = d.get("dtype"), d.get("layout")
        if dtype not in DTYPES or layout not in model.LAYOUTS:
            raise ValueError(f"probe record with dtype {dtype!r}, layout {layout!r}")
        sizes = [d.get(s) for s in ("m", "k", "n")]
        batch = d.get("batch")
        if not all(_count(s) for s in sizes) or not (batch is None or _count(batch)):
            raise ValueError(f"probe record sizes {sizes}, batch {batch!r}")
        secs = d.get("seconds")
        if not isinstance(secs, dict) or not secs:
            raise ValueError("probe record without seconds")
        out = {}
        for t, s in secs.items():
            if t not in (*model.KERNEL_IDS, "xla") or not _positive(s):
                raise ValueError(f"probe record time {t!r}: {s!r}")
            out[t] = float(s)
        plan = d.get("xla_plan")
        plan = None if plan is None else model.XlaPlan.from_json(plan)
        return cls(dtype, layout, Problem(batch, *sizes), out, plan)


def _count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and 1 <= x < 2**62


def _positive(x: Any, below: float = 1e6) -> bool:
    """A number in (0, below): seconds by default (a probe takes far less than 1e6 s)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and 0 < x < below


@dataclasses.dataclass(frozen=True)
class CalibrationData:
    """A GPU's calibration: its ceilings and the probes' measurements, with provenance."""

    device: dict[str, Any]  # key, name, cc, sm_count
    read_bytes_per_s: float
    launch_seconds: float
    records: tuple[Record, ...]
    made: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def key(self) -> str:
        return str(self.device["key"])

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "version": VERSION,
            "device": self.device,
            "made": self.made,
            "read_bytes_per_s": self.read_bytes_per_s,
            "launch_seconds": self.launch_seconds,
            "records": [r.to_json() for r in self.records],
        }

    @classmethod
    def from_json(cls, doc: Any) -> CalibrationData:
        """Checks the schema of a parsed file; raises ValueError saying what is wrong."""
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            raise ValueError(f"not a {SCHEMA} file")
        if doc.get("version") != VERSION:
            raise ValueError(f"version {doc.get('version')!r}, expected {VERSION}")
        dev = doc.get("device")
        if not isinstance(dev, dict) or not isinstance(dev.get("key"), str):
            raise ValueError("no device key")
        read, launch = doc.get("read_bytes_per_s"), doc.get("launch_seconds")
        if not (_positive(read, below=1e16) and _positive(launch)):
            raise ValueError(f"ceilings {read!r} bytes/s, launch {launch!r} s")
        recs = doc.get("records")
        if not isinstance(recs, list) or not recs:
            raise ValueError("no probe records")
        made = doc.get("made") if isinstance(doc.get("made"), dict) else {}
        return cls(dev, float(read), float(launch), tuple(Record.from_json(r) for r in recs), made)


#: The folders under ``ffi/`` whose sources ``kernels_digest`` covers: the matmul kernels
#: a calibration times, the harness that measures the ceilings, and what both include.
DIGESTED = ("matmul", "common", "harness")


def kernels_digest(root: str | os.PathLike[str]) -> str:
    """The digest of the timed kernels' sources in a source tree, as CMakeLists.txt
    computes it for ``build_info()["kernels_digest"]``: SHA-256 over ``"path sha256\\n"``
    for every file under ``root/ffi/{matmul,common,harness}`` (:data:`DIGESTED`) in sorted
    order, its first 12 hex digits. k-means and ABFT sources are left out: a calibration
    does not time them.

    Example:
        >>> import pathlib, tempfile
        >>> root = pathlib.Path(tempfile.mkdtemp())
        >>> (root / "ffi" / "matmul").mkdir(parents=True)
        >>> _ = (root / "ffi" / "matmul" / "k.cu").write_text("__global__ void k() {}")
        >>> len(kernels_digest(root))
        12
    """
    base = pathlib.Path(root)
    files = sorted(
        f.relative_to(base).as_posix()
        for folder in DIGESTED
        for f in (base / "ffi" / folder).rglob("*")
        if f.is_file()
    )
    text = "".join(f"{f} {hashlib.sha256((base / f).read_bytes()).hexdigest()}\n" for f in files)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@functools.cache
def build_kernels_digest() -> str | None:
    """This build's ``kernels_digest`` (None from a build that does not report one)."""
    from jax_tsm2._ffi import _tsm2_ext

    digest = _tsm2_ext.build_info().get("kernels_digest")
    return str(digest) if digest else None


def kernels_note(data: CalibrationData) -> str | None:
    """Why ``data`` may not describe this build's kernels, or None where it timed them: a
    calibration records the digest of the kernels it measured (``made["kernels"]``), and
    routing keeps using one that timed other kernels (near its probes it then assumes
    their times), saying so.

    Example:
        >>> data = CalibrationData({"key": "GPU"}, 4e12, 2e-6, (), {"kernels": "0" * 12})
        >>> kernels_note(data).startswith("timed other kernels")
        True
    """
    ours, theirs = build_kernels_digest(), data.made.get("kernels")
    if ours is None or theirs == ours:
        return None
    if not theirs:
        return "the calibration does not record which kernels it timed"
    return f"timed other kernels (digest {theirs}) than this build's ({ours})"

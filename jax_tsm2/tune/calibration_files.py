"""Where calibrations live: the user's (written by ``python -m jax_tsm2.tune --calibrate``
into the user cache directory), else one shipped with the package for the GPU model, and
the switch that turns them off (``ENV_VAR``). Reading never raises: a file routing cannot
trust is warned about once and ignored.
"""

from __future__ import annotations

import functools
import json
import os
import pathlib

from jax_tsm2 import model
from jax_tsm2.tune.calibration_data import CalibrationData
from jax_tsm2.tune.corrections import Corrections

# A calibration file holds a few hundred probes: well under a megabyte.
MAX_BYTES = 4 << 20

SHIPPED_DIR = pathlib.Path(__file__).resolve().parent.parent / "calibrations"


def file_name(device_key: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in device_key)
    return f"calibration-{safe}.json"


def user_path(device_key: str) -> pathlib.Path:
    from jax_tsm2.tune import cache

    return cache.cache_dir() / file_name(device_key)


def shipped_path(device_key: str) -> pathlib.Path:
    return SHIPPED_DIR / file_name(device_key)


def store(data: CalibrationData, path: pathlib.Path | None = None) -> pathlib.Path:
    """Writes ``data`` atomically to ``path`` (default: the user's cache directory).

    The write happens under the lock file beside ``path`` (``cache.file_lock``)
    that the tune cache's writers use too.
    """
    from jax_tsm2.tune import cache

    path = path or user_path(data.key)
    doc = data.to_json()
    # A file routing would refuse is refused here, loudly, rather than ignored later.
    CalibrationData.from_json(json.loads(json.dumps(doc)))
    path.parent.mkdir(parents=True, exist_ok=True)
    with cache.file_lock(path):
        cache.write_json(path, doc)
    _loaded.clear()
    return path


# path -> ((mtime_ns, size, inode, mode), parsed data or None), reloaded when the file changes.
_loaded: dict[str, tuple[tuple[int, int, int, int], CalibrationData | None]] = {}


def _read(path: pathlib.Path, device_key: str, fallback: str) -> CalibrationData | None:
    """The calibration at ``path`` if it can be trusted for ``device_key``; else warns once
    per version of the file, naming the ``fallback`` routing uses instead, and returns
    None. Never raises, never blocks."""
    import warnings

    from jax_tsm2.tune import cache

    try:
        st = path.stat()
    except (OSError, ValueError):
        return None
    version = (st.st_mtime_ns, st.st_size, st.st_ino, st.st_mode)
    hit = _loaded.get(str(path))
    if hit is not None and hit[0] == version:
        return hit[1]
    data: CalibrationData | None = None
    try:
        doc = json.loads(cache.read_capped(path, MAX_BYTES).decode("utf-8"))
        data = CalibrationData.from_json(doc)
        if data.key != device_key:
            raise ValueError(f"made on GPU {data.key[:80]!r}, not this one ({device_key!r})")
    except (OSError, UnicodeDecodeError, ValueError, RecursionError, TypeError) as err:
        warnings.warn(
            f"jax_tsm2: ignoring calibration {path}: {str(err)[:300]}. Routing uses "
            f"{fallback}; run `python -m jax_tsm2.tune --calibrate` to measure this GPU.",
            RuntimeWarning,
            stacklevel=3,
        )
        data = None
    _loaded[str(path)] = (version, data)
    return data


#: ``JAX_TSM2_CALIBRATION=off`` (or 0, false, no) makes routing ignore every calibration,
#: the user's and the shipped ones, as on a GPU never calibrated: to see what the
#: uncalibrated model does, or to rule a calibration out. Read at every lookup.
ENV_VAR = "JAX_TSM2_CALIBRATION"
_OFF, _ON = ("0", "off", "false", "no"), ("", "1", "on", "true", "yes")


def enabled() -> bool:
    """Whether routing reads calibrations (``ENV_VAR``); an unknown value warns once and
    leaves them on.

    Example:
        >>> import os
        >>> os.environ[ENV_VAR] = "off"
        >>> enabled()
        False
        >>> del os.environ[ENV_VAR]
        >>> enabled()
        True
    """
    value = os.environ.get(ENV_VAR, "").strip().lower()
    if value in _OFF:
        return False
    if value not in _ON:
        _warn_value(value)
    return True


@functools.lru_cache(maxsize=8)
def _warn_value(value: str) -> None:
    import warnings

    warnings.warn(
        f"jax_tsm2: {ENV_VAR}={value!r} is neither on nor off; calibrations stay on "
        f"(set {ENV_VAR}=off to route without them)",
        RuntimeWarning,
        stacklevel=4,
    )


def load(device_key: str) -> tuple[CalibrationData, pathlib.Path] | None:
    """This GPU's calibration and where it came from: the user's (``user_path``), else the
    one shipped with the package for this GPU model, else None (also where ``ENV_VAR``
    turns calibrations off)."""
    if not enabled():
        return None
    user, shipped = user_path(device_key), shipped_path(device_key)
    if shipped.is_file():
        fallback = f"the calibration shipped for this GPU ({shipped.name})"
    else:
        fallback = "the uncalibrated model"
    data = _read(user, device_key, fallback)
    if data is not None:
        return data, user
    data = _read(shipped, device_key, "the uncalibrated model")
    return None if data is None else (data, shipped)


_corrections: dict[model.Device, Corrections] = {}


def corrections_for(device: model.Device) -> tuple[Corrections, pathlib.Path] | None:
    """``Corrections`` of this GPU's calibration (built once per loaded file), or None."""
    found = load(device.key)
    if found is None:
        return None
    data, path = found
    corr = _corrections.get(device)
    if corr is None or corr.data is not data:
        corr = _corrections[device] = Corrections(data, device)
    return corr, path

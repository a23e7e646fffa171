"""Argument types shared by the command lines (``python -m jax_tsm2.tune``, ``.bench``,
``.kmeans``, ``.demo``).

Each is an ``argparse`` ``type=`` function: a bad value raises ``ArgumentTypeError`` with
what was expected, which argparse turns into the usage line, the message and exit status 2
instead of a traceback.
"""

from __future__ import annotations

import argparse
import math
import pathlib
from collections.abc import Callable
from typing import Any


def integer(text: str) -> int:
    """``20480``, ``1e7`` or ``10_000`` as an exact integer; ValueError otherwise."""
    text = text.strip().replace("_", "")
    try:
        return int(text)
    except ValueError:
        value = float(text)  # ValueError for garbage
        if not (math.isfinite(value) and value.is_integer()):
            raise ValueError(f"not an integer: {text!r}") from None
        return int(value)


def _bounded_int(low: int, what: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = integer(text)
        except ValueError:
            value = None
        if value is None or value < low:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    parse.__name__ = what  # argparse names the type in some messages
    return parse


positive_int = _bounded_int(1, "an integer >= 1")
non_negative_int = _bounded_int(0, "an integer >= 0")


def _bounded_float(ok: Callable[[float], bool], what: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and ok(value)):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    parse.__name__ = what
    return parse


positive_float = _bounded_float(lambda v: v > 0, "a number > 0")
non_negative_float = _bounded_float(lambda v: v >= 0, "a number >= 0")
fraction = _bounded_float(lambda v: 0 < v <= 1, "a number in (0, 1]")


def comma_list(item: Callable[[str], Any], what: str) -> Callable[[str], list[Any]]:
    """Comma-separated values, each parsed by ``item``, at least one."""

    def parse(text: str) -> list[Any]:
        parts = [t.strip() for t in text.split(",") if t.strip()]
        if not parts:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        out = []
        for part in parts:
            try:
                out.append(item(part))
            except (ValueError, TypeError, OverflowError) as err:
                raise argparse.ArgumentTypeError(f"{part!r}: {err}") from None
        return out

    parse.__name__ = what
    return parse


def one_of(choices: dict[str, Any] | tuple[str, ...], what: str) -> Callable[[str], Any]:
    """A name among ``choices`` (a dict maps it to its value)."""

    def parse(text: str) -> Any:
        if text not in choices:
            names = ", ".join(choices)
            raise argparse.ArgumentTypeError(f"{what} {text!r}: one of {names}")
        return choices[text] if isinstance(choices, dict) else text

    parse.__name__ = what
    return parse


def directory(text: str) -> pathlib.Path:
    """A directory that exists or can be made: no part of the path is an existing file."""
    path = pathlib.Path(text).expanduser()
    for p in (path, *path.parents):
        if p.exists():
            if not p.is_dir():
                raise argparse.ArgumentTypeError(f"{text!r}: {p} is not a directory")
            return path
    return path


def existing_file(text: str) -> pathlib.Path:
    path = pathlib.Path(text).expanduser()
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text!r}: no such file")
    return path

"""``python -m jax_tsm2.tune``: calibrate this GPU, or time chosen shapes and cache the winners.

    python -m jax_tsm2.tune --calibrate [--budget SECONDS] [--output FILE] [--dry-run]
    python -m jax_tsm2.tune --shapes 20480x20480x8,1e7x8x8 --dtype f32,bf16 [--layout nn]
        [--measure-bandwidth] [--dry-run] [--cache-dir DIR]

``--calibrate`` measures the GPU on a designed probe set and stores its
calibration (``jax_tsm2.tune.calibrate``), from which routing decides every shape; run it
once per GPU model (about three minutes). ``--shapes`` is the command line of
``jax_tsm2.tune.tuner``: each shape, dtype and layout is timed on the current GPU and the
winners are merged into this GPU's cache file. ``--measure-bandwidth`` also stores the
streaming-read ceiling, which then replaces the theoretical bandwidth in the model on this
GPU.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from jax_tsm2 import _cli, _ffi, model
from jax_tsm2.problem import Problem
from jax_tsm2.tune import cache
from jax_tsm2.tune.tuner import DTYPES, GpuTimer, Timer, measure_read_bandwidth, tune


def parse_shape(text: str) -> Problem:
    """``"MxKxN"`` or ``"BxMxKxN"``; sizes may be written ``1e7``.

    Example:
        >>> parse_shape("1e7x8x8")
        Problem(batch=None, m=10000000, k=8, n=8)
    """
    try:
        sizes = [_cli.integer(s) for s in text.lower().split("x")]
    except ValueError:
        raise ValueError(f"shape {text!r}: expected MxKxN or BxMxKxN of integers") from None
    if len(sizes) not in (3, 4) or min(sizes) < 1:
        raise ValueError(f"shape {text!r}: expected MxKxN or BxMxKxN with sizes >= 1")
    return model.problem_from(tuple(sizes))


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m jax_tsm2.tune", description=__doc__.split("\n")[0])
    dtypes = {**DTYPES, **{v: v for v in DTYPES.values()}}
    ap.add_argument(
        "--shapes",
        type=_cli.comma_list(parse_shape, "comma-separated MxKxN or BxMxKxN"),
        help="comma-separated MxKxN or BxMxKxN",
    )
    ap.add_argument(
        "--calibrate",
        action="store_true",
        help="measure this GPU (read ceiling, launch, each kernel and XLA's dot on a designed "
        "probe set) and store its calibration, which routing then decides with",
    )
    ap.add_argument(
        "--budget",
        type=_cli.positive_float,
        default=150.0,
        help="with --calibrate: seconds of probing at most (default 150)",
    )
    ap.add_argument("--output", help="with --calibrate: write the calibration to this file")
    ap.add_argument(
        "--dtype",
        default="f32",
        type=_cli.comma_list(_cli.one_of(dtypes, "dtype"), "comma-separated dtypes"),
        help="comma-separated: f32, f64, bf16, f16",
    )
    ap.add_argument(
        "--layout",
        default="nn",
        type=_cli.comma_list(_cli.one_of(model.LAYOUTS, "layout"), "comma-separated layouts"),
        help="comma-separated: nn, nt, tn",
    )
    ap.add_argument("--measure-bandwidth", action="store_true")
    ap.add_argument("--dry-run", action="store_true", help="time and print, write nothing")
    ap.add_argument(
        "--cache-dir", type=_cli.directory, help=f"overrides ${cache.ENV_DIR} for this run"
    )
    ap.add_argument(
        "--max-reps", type=_cli.positive_int, default=64, help="most products per timed call"
    )
    ap.add_argument("--samples", type=_cli.positive_int, default=5)
    return ap


def main(argv: Sequence[str] | None = None, timer: Timer | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    if args.calibrate and args.shapes:
        ap.error("--calibrate measures its own probe shapes: leave out --shapes")
    if not args.calibrate and not args.shapes:
        ap.error("--shapes is required (or --calibrate)")
    saved = os.environ.get(cache.ENV_DIR)
    if args.cache_dir:
        os.environ[cache.ENV_DIR] = str(args.cache_dir)
    try:
        return _calibrate(args) if args.calibrate else _run(args, timer)
    finally:  # the directory is this run's only (main may be called in-process)
        if saved is None:
            os.environ.pop(cache.ENV_DIR, None)
        else:
            os.environ[cache.ENV_DIR] = saved


def _run(args: argparse.Namespace, timer: Timer | None) -> int:
    if timer is None:
        if not _ffi.cuda_gpu_ready():
            print("jax_tsm2.tune: needs a CUDA GPU and a jax_tsm2 build for it", file=sys.stderr)
            return 2
        timer = GpuTimer(samples=args.samples, max_reps=args.max_reps)
        device = model.device_from_driver(0)
    else:
        device = model.current_device()
    bw = measure_read_bandwidth() if args.measure_bandwidth else None
    if bw:
        print(f"streaming read: {bw / 1e9:.0f} GB/s")
        device = device.with_bandwidth(bw)
    print(f"device {device.key} ({device.source}); cache {cache.cache_path(device.key)}")
    tune(
        args.shapes,
        args.dtype,
        args.layout,
        timer=timer,
        device=device,
        write=not args.dry_run,
        bandwidth=bw,
    )
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    import pathlib

    from jax_tsm2.tune import calibrate

    out = pathlib.Path(args.output) if args.output else None
    try:
        data = calibrate.run(budget_s=args.budget, write=not args.dry_run, path=out)
    except RuntimeError as err:
        print(f"jax_tsm2.tune --calibrate: {err}", file=sys.stderr)
        return 2
    read, launch = data.read_bytes_per_s / 1e9, data.launch_seconds * 1e6
    print(
        f"calibrated {data.device['name']}: {len(data.records)} probes, "
        f"read ceiling {read:.0f} GB/s, smallest launch {launch:.1f} us"
    )
    return 0

"""Command line of ``python -m jax_tsm2.bench`` (run ``--help`` for the flags)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from jax_tsm2 import _cli, launch, routing
from jax_tsm2.bench import grid, parallel, report
from jax_tsm2.bench.impls import KERNEL_MODES
from jax_tsm2.bench.runner import SCHEMA_VERSION, Options, run_suite, stderr_log
from jax_tsm2.bench.suite import DEFAULT_DTYPES, DEFAULT_FAMILIES, parse_int, select_cases

#: --grid's default time budget: the grid (~5 min on an H100 at N = 120) and the install
#: must fit in one 10-minute GPU command (benchmarks/gpu_session.sh).
GRID_TIME_BUDGET_S = 420.0


# What --impl may name: the routed path and jnp's, the kernels forced by mode, torch, and
# (--grid) each kernel forced through its FFI target.
IMPL_NAMES = ("tsm2", "jnp", "jnp_highest", "tsm2_kernel", "torch", *routing.KERNEL_IDS)


def _names(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _ints(text: str) -> list[int]:
    return [parse_int(t) for t in _names(text)]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m jax_tsm2.bench",
        description="Benchmark jax_tsm2.matmul against jnp.matmul and torch (cuBLAS) on the "
        "benchmark suite, against the floor of each product (max(minimal bytes / read "
        "ceiling, empty launch), both measured in the same run). The suite, the timing and "
        "the JSON format: docs/benchmarking.md and docs/harness.md.",
    )
    sel = p.add_argument_group("what to run")
    sel.add_argument(
        "--family",
        type=_names,
        default=None,
        help="families, comma-separated, among R,L,NT,S,TN,GRAD,APP or all (default: R,L; "
        "--grid: R,L,NT,TN,S); "
        "GRAD is the gradient benchmark (jax.grad of ||A x - y||^2, A 1e6 x 512, x 512 x 8), "
        "APP the products from real programs (randomized SVD, LoRA, decode, ...)",
    )
    sel.add_argument(
        "--dtype",
        type=_names,
        default=None,
        help="dtypes among f32,f64,bf16,f16 (default: f32,f64,bf16; --quick: f32,bf16; "
        "--grid: all four)",
    )
    sel.add_argument("--m", type=_ints, default=None, help="keep suite shapes with these m")
    sel.add_argument("--k", type=_ints, default=None, help="keep suite shapes with these k")
    sel.add_argument("--n", type=_ints, default=None, help="keep suite shapes with these n")
    sel.add_argument(
        "--case",
        action="append",
        type=_names,
        default=[],
        help="explicit FAMILY:MxKxN cases instead of the suite (repeatable, "
        "comma-separated), e.g. R:20480x20480x8,L:1e7x16x16",
    )
    sel.add_argument(
        "--impl",
        type=_cli.comma_list(_cli.one_of(IMPL_NAMES, "implementation"), "implementations"),
        default=None,
        help="implementations among tsm2,jnp,jnp_highest,torch,tsm2_kernel "
        "(--grid: tsm2,jnp,tsm2r,tsm2l,tsm2s,tsm2t; default: all available)",
    )
    sel.add_argument("--no-torch", action="store_true", help="do not time torch.matmul")
    sel.add_argument(
        "--kernel-mode",
        choices=KERNEL_MODES,
        default="always",
        help="custom-call mode of the tsm2_kernel column (GPU; default always)",
    )
    sel.add_argument(
        "--grid",
        "--grid-size",
        type=int,
        nargs="?",
        const=120,
        default=0,
        metavar="N",
        help="the validation grid: N random shapes (default 120) instead of the "
        "suite, each timed routed (mode auto), with XLA's dot and with every TSM2 kernel that "
        "takes it; --tiny draws tiny shapes",
    )
    sel.add_argument(
        "--grid-seed",
        type=_cli.non_negative_int,
        default=None,
        metavar="S",
        help="seed of the grid's shapes (default: --seed)",
    )
    sel.add_argument(
        "--autotune",
        action="store_true",
        help="lower the routed tsm2 implementation with jax_tsm2.autotune() on: on a GPU, a "
        "shape this GPU's tune cache ($JAX_TSM2_CACHE_DIR) has no entry for is timed at its "
        "first lowering and the winner runs (recorded as tsm2_autotune in bench.json)",
    )
    sel.add_argument(
        "--grid-start",
        type=_cli.non_negative_int,
        default=0,
        metavar="I",
        help="run the grid's shapes I..N-1 only (split a grid over two runs, then --merge)",
    )
    sel.add_argument(
        "--gpus",
        type=_cli.positive_int,
        default=1,
        metavar="G",
        help="split the grid's shapes over G GPUs of this host, a process per GPU (the first "
        "G of CUDA_VISIBLE_DEVICES, else 0..G-1), and merge their results",
    )
    sel.add_argument(
        "--model",
        action="store_true",
        help="add jax_tsm2.model's prediction beside every measured time, and its error",
    )
    mode = sel.add_mutually_exclusive_group()
    mode.add_argument(
        "--quick", action="store_true", help="a small subset, well under a minute on an H100"
    )
    mode.add_argument("--tiny", action="store_true", help="tiny shapes (CPU smoke runs and tests)")
    tim = p.add_argument_group("timing")
    tim.add_argument(
        "--repeats",
        type=_cli.positive_int,
        default=None,
        help="timed samples, median reported (default 5; --tiny 3)",
    )
    tim.add_argument(
        "--short-repeats",
        type=_cli.non_negative_int,
        default=15,
        help="timed samples of a case estimated under 20 us (default 15; at least --repeats)",
    )
    tim.add_argument(
        "--warmup",
        type=_cli.non_negative_int,
        default=1,
        help="untimed samples before timing (default 1)",
    )
    tim.add_argument(
        "--per-sample",
        type=_cli.positive_int,
        default=None,
        help="calls of the jitted R-product function per sample (default adaptive; "
        "1 = one call timed alone)",
    )
    tim.add_argument(
        "--max-calls",
        type=_cli.positive_int,
        default=None,
        help="most products per call, each on its own buffers (default 256; --grid 64; --tiny 4)",
    )
    tim.add_argument(
        "--target-ms",
        type=_cli.positive_float,
        default=None,
        help="device time aimed at per call (default 5; --grid 2); a sample is 4 calls' worth",
    )
    tim.add_argument(
        "--time-budget",
        type=_cli.non_negative_float,
        default=None,
        metavar="SECONDS",
        help="start no case after this many seconds; what ran is reported (default: none; "
        f"--grid without --tiny: {GRID_TIME_BUDGET_S:.0f}, 0 for none)",
    )
    tim.add_argument(
        "--mem-fraction",
        type=_cli.fraction,
        default=0.45,
        help="share of JAX's GPU memory limit one case may use (default 0.45)",
    )
    tim.add_argument(
        "--ceiling-gb",
        type=_cli.positive_float,
        default=1.0,
        help="size of each read-ceiling buffer in GiB (default 1; 4 buffers)",
    )
    tim.add_argument(
        "--torch-eager",
        action="store_true",
        help="time torch with eager launches instead of a CUDA graph",
    )
    tim.add_argument(
        "--seed",
        type=_cli.non_negative_int,
        default=0,
        help="seed of the operands' random values, and of the grid's shapes unless "
        "--grid-seed is given (default 0)",
    )
    out = p.add_argument_group("output")
    out.add_argument(
        "--merge",
        nargs="+",
        type=_cli.existing_file,
        metavar="JSON",
        default=None,
        help="merge bench.json files of earlier runs (e.g. one per family) instead of running",
    )
    out.add_argument("--out", default=None, help="directory for bench.json and bench.md")
    out.add_argument(
        "--plot", action="store_true", help="also write roofline.png (needs --out, matplotlib)"
    )
    return p


def options(args: argparse.Namespace, argv: Sequence[str]) -> Options:
    mode = "tiny" if args.tiny else "quick" if args.quick else "full"
    if args.grid:
        if args.case or args.m or args.k or args.n or args.quick:
            raise ValueError("--grid draws its own shapes: drop --case, --m, --k, --n, --quick")
        families = args.family or list(grid.GRID_FAMILIES)
        dtypes = args.dtype or list(grid.GRID_DTYPES)
    else:
        families = args.family or list(DEFAULT_FAMILIES)
        dtypes = args.dtype or (["f32", "bf16"] if mode == "quick" else list(DEFAULT_DTYPES))
    target_ms = args.target_ms or (2.0 if args.grid else 5.0)
    max_calls = args.max_calls or (4 if mode == "tiny" else 64 if args.grid else 256)
    budget = args.time_budget
    if budget is None and args.grid and mode != "tiny":
        budget = GRID_TIME_BUDGET_S
    return Options(
        families=families,
        dtypes=dtypes,
        mode=mode,
        m=args.m,
        k=args.k,
        n=args.n,
        cases=[c for group in args.case for c in group],
        impls=args.impl,
        torch=not args.no_torch,
        torch_graph=not args.torch_eager,
        kernel_mode=args.kernel_mode,
        autotune=args.autotune,
        repeats=args.repeats or (3 if mode == "tiny" else 5),
        short_repeats=args.short_repeats if mode != "tiny" else 0,
        warmup=args.warmup,
        per_sample=args.per_sample,
        target_call_s=target_ms / 1e3,
        target_sample_s=4 * target_ms / 1e3,
        max_calls=max_calls,
        mem_fraction=args.mem_fraction,
        ceiling_buffer_bytes=int(args.ceiling_gb * 2**30),
        compute_size=(4096 if mode != "full" else 8192) if args.plot else 0,
        command_line=shlex.join(["python", "-m", "jax_tsm2.bench", *argv]),
        model=args.model,
        grid=args.grid or 0,
        seed=args.seed,
        grid_seed=args.seed if args.grid_seed is None else args.grid_seed,
        grid_start=args.grid_start,
        time_budget_s=budget or None,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the harness; print the table to stdout; write files with ``--out``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    p = parser()
    args = p.parse_args(argv)
    if args.plot and not args.out:
        p.error("--plot needs --out DIR")
    gpus: list[str] = []
    try:
        opts = options(args, argv)
        if args.grid and not args.merge:  # the same for a bad grid
            grid.draw(
                opts.grid, opts.grid_seed, grid.spec_for(opts.mode), opts.families, opts.dtypes
            )
            if not 0 <= opts.grid_start < opts.grid:
                raise ValueError(f"--grid-start {opts.grid_start}: between 0 and {opts.grid - 1}")
            if args.gpus > 1:
                gpus = launch.gpu_ids(args.gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))
        elif not args.merge:  # a bad or empty selection is a usage error, not a traceback
            select_cases(opts.families, opts.dtypes, opts.mode, opts.m, opts.k, opts.n, opts.cases)
    except ValueError as err:
        p.error(str(err))
    if args.gpus > 1 and (args.merge or not args.grid):
        p.error("--gpus splits a grid: it needs --grid and not --merge")
    if args.merge:
        docs = []
        for path in args.merge:
            try:
                docs.append(json.loads(Path(path).read_text()))
            except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
                p.error(f"--merge {path}: not a readable bench.json ({type(err).__name__}: {err})")
        try:
            doc = report.merge(docs)
        except (AttributeError, KeyError, TypeError, ValueError) as err:
            p.error(f"--merge: these files do not merge ({type(err).__name__}: {err})")
        doc["command_line"] = opts.command_line
        doc["schema_version"] = SCHEMA_VERSION  # the summary was recomputed
    elif args.gpus > 1:
        try:
            doc = parallel.run(
                argv, start=opts.grid_start, stop=opts.grid, gpus=gpus, log=stderr_log
            )
        except RuntimeError as err:
            stderr_log(str(err))
            return 1
        doc["command_line"] = opts.command_line
    else:
        partial = (lambda d: report.write_partial(d, args.out)) if args.out else None
        doc = run_suite(opts, stderr_log, checkpoint=partial)
    print(report.text_table(doc), flush=True)
    if args.out:
        for path in report.write(doc, args.out, plot=args.plot):
            stderr_log(f"wrote {path}")
    return 0

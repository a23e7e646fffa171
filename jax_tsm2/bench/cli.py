"""Command line of ``python -m jax_tsm2.bench`` (run ``--help`` for the flags)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from jax_tsm2.bench import report
from jax_tsm2.bench.impls import KERNEL_MODES
from jax_tsm2.bench.runner import Options, run_suite, stderr_log
from jax_tsm2.bench.suite import DEFAULT_DTYPES, DEFAULT_FAMILIES, parse_int, select_cases


def _names(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _ints(text: str) -> list[int]:
    return [parse_int(t) for t in _names(text)]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m jax_tsm2.bench",
        description="Benchmark jax_tsm2.matmul against jnp.matmul and torch (cuBLAS) on the "
        "suite of shared/BENCH.md, against a read-bandwidth ceiling measured in the same run.",
    )
    sel = p.add_argument_group("what to run")
    sel.add_argument(
        "--family",
        type=_names,
        default=list(DEFAULT_FAMILIES),
        help="families, comma-separated, among R,L,NT,S,TN,GRAD or all (default: R,L); "
        "GRAD is the gradient benchmark (jax.grad of ||A x - y||^2, A 1e6 x 512, x 512 x 8)",
    )
    sel.add_argument(
        "--dtype",
        type=_names,
        default=None,
        help="dtypes among f32,f64,bf16,f16 (default: f32,f64,bf16; --quick: f32,bf16)",
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
        type=_names,
        default=None,
        help="implementations among tsm2,jnp,jnp_highest,torch,tsm2_kernel "
        "(default: all available)",
    )
    sel.add_argument("--no-torch", action="store_true", help="do not time torch.matmul")
    sel.add_argument(
        "--kernel-mode",
        choices=KERNEL_MODES,
        default="always",
        help="custom-call mode of the tsm2_kernel column (GPU; default always)",
    )
    mode = sel.add_mutually_exclusive_group()
    mode.add_argument(
        "--quick", action="store_true", help="a small subset, well under a minute on an H100"
    )
    mode.add_argument("--tiny", action="store_true", help="tiny shapes (CPU smoke runs and tests)")
    tim = p.add_argument_group("timing")
    tim.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="timed samples, median reported (default 5; --tiny 3)",
    )
    tim.add_argument(
        "--warmup", type=int, default=1, help="untimed samples before timing (default 1)"
    )
    tim.add_argument(
        "--per-sample",
        type=int,
        default=None,
        help="calls of the jitted R-product function per sample (default adaptive; "
        "1 = one call timed alone)",
    )
    tim.add_argument(
        "--max-calls",
        type=int,
        default=None,
        help="most products per call, each on its own buffers (default 256; --tiny 4)",
    )
    tim.add_argument(
        "--target-ms", type=float, default=5.0, help="device time aimed at per call (default 5)"
    )
    tim.add_argument(
        "--mem-fraction",
        type=float,
        default=0.45,
        help="share of JAX's GPU memory limit one case may use (default 0.45)",
    )
    tim.add_argument(
        "--ceiling-gb",
        type=float,
        default=1.0,
        help="size of each read-ceiling buffer in GiB (default 1; 4 buffers)",
    )
    tim.add_argument(
        "--torch-eager",
        action="store_true",
        help="time torch with eager launches instead of a CUDA graph",
    )
    tim.add_argument("--seed", type=int, default=0)
    out = p.add_argument_group("output")
    out.add_argument(
        "--merge",
        nargs="+",
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
    dtypes = args.dtype or (["f32", "bf16"] if mode == "quick" else list(DEFAULT_DTYPES))
    return Options(
        families=args.family,
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
        repeats=args.repeats or (3 if mode == "tiny" else 5),
        warmup=args.warmup,
        per_sample=args.per_sample,
        target_call_s=args.target_ms / 1e3,
        target_sample_s=4 * args.target_ms / 1e3,
        max_calls=args.max_calls or (4 if mode == "tiny" else 256),
        mem_fraction=args.mem_fraction,
        ceiling_buffer_bytes=int(args.ceiling_gb * 2**30),
        compute_size=(4096 if mode != "full" else 8192) if args.plot else 0,
        command_line=shlex.join(["python", "-m", "jax_tsm2.bench", *argv]),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the harness; print the table to stdout; write files with ``--out``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    p = parser()
    args = p.parse_args(argv)
    if args.plot and not args.out:
        p.error("--plot needs --out DIR")
    try:
        opts = options(args, argv)
        if not args.merge:  # a bad or empty selection is a usage error, not a traceback
            select_cases(opts.families, opts.dtypes, opts.mode, opts.m, opts.k, opts.n, opts.cases)
    except ValueError as err:
        p.error(str(err))
    if args.merge:
        docs = [json.loads(Path(path).read_text()) for path in args.merge]
        doc = report.merge(docs)
        doc["command_line"] = opts.command_line
    else:
        doc = run_suite(opts, stderr_log)
    print(report.text_table(doc), flush=True)
    if args.out:
        for path in report.write(doc, args.out, plot=args.plot):
            stderr_log(f"wrote {path}")
    return 0

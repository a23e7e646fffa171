"""Kernel records of harness runs that timed a kernel since changed, as shapes to time again.

A harness run (``python -m jax_tsm2.bench --grid ...`` or ``--family APP``) records each
kernel forced on each product. When a kernel changes how it runs some products (a new
staging, a new tile), those records describe the older kernel: ``benchmarks/model_check.py``
names each such change with a predicate (``on_row_stream``, ``on_flat_t``, ``on_l_mma``,
``on_covered_t``). This script lists the products of the given runs whose kernel records
one of those predicates flags, as ``benchmarks/stream_kernels.py`` shapes, so that one call
on the GPU times them again; ``routing_replay.py --retimed`` then replays routing with the
new times.

    python benchmarks/stale_records.py benchmarks/results/h200/grid_seed*.json \\
        --predicate on_covered_t > shapes.txt
    python benchmarks/stream_kernels.py $(cat shapes.txt) --json retimed.json

Batched products are left out (stream_kernels times single products); stderr says how many.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import model_check
import routing_replay as rr

PREDICATES = ("on_row_stream", "on_flat_t", "on_l_mma", "on_covered_t")
# Which kernels each predicate concerns (model_check.superseded asks the same).
KERNELS = {
    "on_row_stream": ("tsm2r", "tsm2l"),
    "on_flat_t": ("tsm2t",),
    "on_l_mma": ("tsm2l",),
    "on_covered_t": ("tsm2t",),
}
LETTERS = {"tsm2r": "r", "tsm2l": "l", "tsm2s": "s", "tsm2t": "t"}


def stale_shapes(
    cases: list[rr.Case], predicates: tuple[str, ...], families: tuple[str, ...] = ()
) -> tuple[list[str], int]:
    """(``KERNEL:DTYPE:LAYOUT:MxKxN`` of every kernel record ``predicates`` flag, of the runs'
    ``families`` (every family where empty), in order and without repeats; how many batched
    ones were left out).

    Example:
        >>> case = rr.Case("TN:1000003x37x45", "TN", "f32", ([1000003, 37], [1000003, 45]),
        ...                {"jnp": 1e-4, "tsm2t": 2e-4})
        >>> stale_shapes([case], ("on_covered_t",))
        (['t:f32:tn:37x1000003x45'], 0)
    """
    out: dict[str, None] = {}
    batched = 0
    for case in cases:
        if families and case.family not in families:
            continue
        p, layout = rr._problem(case.family, case.shapes)
        for kernel in case.seconds:
            names = [n for n in predicates if kernel in KERNELS[n]]
            if not names:
                continue
            rec = {
                "family": case.family,
                "dtype": case.dtype,
                "impl": kernel,
                "layout": layout,
                "m": p.m,
                "k": p.k,
                "n": p.n,
                "batch": p.batch,
            }
            if not any(getattr(model_check, n)(rec) for n in names):
                continue
            if p.batch:
                batched += 1
                continue
            out[f"{LETTERS[kernel]}:{case.dtype}:{layout}:{p.m}x{p.k}x{p.n}"] = None
    return list(out), batched


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python benchmarks/stale_records.py",
        description="Products whose kernel records timed a kernel since changed, as "
        "stream_kernels.py shapes (one --shape per line).",
    )
    ap.add_argument("runs", type=pathlib.Path, nargs="+", help="harness bench.json files")
    ap.add_argument(
        "--predicate",
        action="append",
        choices=PREDICATES,
        default=None,
        help="a model_check predicate naming a kernel change (repeatable; default: all)",
    )
    ap.add_argument(
        "--family",
        action="append",
        choices=sorted(rr.LAYOUTS),
        default=None,
        help="only products of this harness family (repeatable; default: all)",
    )
    args = ap.parse_args(argv)
    cases = []
    for path in args.runs:
        if not path.is_file():
            ap.error(f"no such file: {path}")
        try:
            cases += rr.read_cases(path)[0]
        except (ValueError, KeyError, TypeError) as e:
            ap.error(f"{path} is not a harness run (bench.json): {e!r}")
    shapes, batched = stale_shapes(
        cases, tuple(args.predicate or PREDICATES), tuple(args.family or ())
    )
    for s in shapes:
        print(f"--shape {s}")
    print(f"{len(shapes)} shapes; {batched} batched records left out", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What ABFT costs on top of the plain product, measured on the device.

Times ``jax.jit(jax_tsm2.abft.abft_matmul)`` against ``jax.jit(jax_tsm2.matmul)``
on the same operands (8192 x 8192 x 8192 f32, default precision, unless told
otherwise): each sample queues ``--calls`` calls back to back and syncs once;
plain and checked samples alternate, and both the median of ``--repeats``
samples of each and the median of the paired ratios (sample i of one against
sample i of the other, taken next to each other) are reported. The target is
an overhead of at most 8% (the paired median), detection and correction
included (``abft_matmul`` always runs its verification and judgement; no fault
is injected, so the repair itself is not taken).

It also times the pieces, so the floor is visible in the same run: one plain
``jnp.sum(a, 0)`` pass over an operand (three of them, over A, B and C, are
the least any checksum scheme reads), ``encode`` (the passes over A and B) and
``verify`` (the pass over C); with the CUDA build, one ``tsm2_abft_encode``
call (two passes) and one ``tsm2_abft_verify`` call (one) against our
streaming read of the same bytes (``tsm2_stream_read``, the harness's read
ceiling). It lists the kernels that read A, B and C in the compiled
``abft_matmul`` (``jax_tsm2._hlo``, custom calls by target) and the operations
of its entry computation besides the product (each a launch or more): on CUDA
``tsm2_abft_encode`` (the pass over A, its split sum, the pass over B, its
split sum), ``tsm2_abft_verify`` (the pass over C and its split sum) and
``tsm2_abft_judge`` (four small kernels, two of which return at once on a
clean product). The compiled HLO is written next to the JSON. Formulations
(``--configs``, ``SUMS/REPAIR``; the library default ``auto/auto`` first,
which on CUDA is ``kernel/kernel``): the passes as ``kernel`` (the targets),
one ``variadic`` ``lax.reduce`` or ``siblings`` ``jnp.sum`` calls left to XLA's
GPU multi-output fusion; the repair as ``kernel`` (``tsm2_abft_judge``: reads
the flags on the device, no host wait), a ``cond`` (XLA copies its predicate to
the host and waits: one host sync per call) or a ``select`` (no sync, but the
column recomputation, a pass over A, always runs).

Usage (GPU machine, after ``pip install --no-build-isolation -e .``)::

    python benchmarks/abft_overhead.py --out DIR [--size 8192] [--dtype float32] [--configs ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp

import jax_tsm2
from jax_tsm2 import _ffi, _hlo, abft, abft_calls, abft_model
from jax_tsm2.abft import abft_matmul, encode, verify
from jax_tsm2.bench import ceilings


def _sample(fn, args, calls: int) -> float:
    t0 = time.perf_counter()
    res = [fn(*args) for _ in range(calls)]
    jax.block_until_ready(res)
    return (time.perf_counter() - t0) / calls


def _interleaved(fns: dict, args: dict, repeats: int, calls: int) -> dict[str, list[float]]:
    """Seconds per call of each function, samples taken in turn (clock drift hits all alike)."""
    for name, fn in fns.items():
        jax.block_until_ready(fn(*args[name]))  # compile and warm up
    out: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            out[name].append(_sample(fn, args[name], calls))
    return out


def _hlo_readers(compiled_text: str, n: int, dtype: jnp.dtype) -> dict[str, list[str]]:
    short = {"float32": "f32", "float64": "f64", "bfloat16": "bf16", "float16": "f16"}
    try:
        return {
            "A": _hlo.reader_labels(compiled_text, parameter=0),
            "B": _hlo.reader_labels(compiled_text, parameter=1),
            "C": _hlo.reader_labels(compiled_text, shape=f"{short[dtype.name]}[{n},{n}]"),
        }
    except (ValueError, KeyError) as err:  # an HLO text the parser does not know: say so
        return {"error": [repr(err)]}


def _kernel_pieces(a, b, args) -> dict:
    """One tsm2_abft_encode call (passes over A and B) and one tsm2_abft_verify call (over C)
    against streaming reads of the same bytes."""
    acc = abft.accumulation_dtype(a.dtype)
    m, k = a.shape
    model = jnp.asarray(abft_model.model_vector(a.dtype, m, k, None, acc, extended_sums=True), acc)
    c = jax_tsm2.matmul(a, b)
    stats = abft_calls.encode(a, b, acc=acc)
    blocks = (getattr(jax.devices()[0], "core_count", 132) or 132) * 8  # as the harness's ceiling
    read = jax.jit(ceilings._stream_read(blocks))
    fns = {
        "encode_call": jax.jit(lambda x, y: abft_calls.encode(x, y, acc=acc)),
        "verify_call": jax.jit(lambda x, st, md: abft_calls.verify(x, st, md)),
        "read_a": read,
    }
    fargs = {"encode_call": (a, b), "verify_call": (c, stats, model), "read_a": (a,)}
    t = _interleaved(fns, fargs, args.repeats, args.calls)
    med = {name: statistics.median(s) for name, s in t.items()}
    nbytes = a.size * a.dtype.itemsize
    enc, ver, ceiling = med["encode_call"], med["verify_call"], med["read_a"]
    line = (
        f"  kernels: tsm2_abft_encode {enc * 1e3:.3f} ms for 2 reads = "
        f"{2 * nbytes / enc / 1e12:.2f} TB/s ({2 * ceiling / enc:.1%} of tsm2_stream_read); "
        f"tsm2_abft_verify {ver * 1e3:.3f} ms = {nbytes / ver / 1e12:.2f} TB/s "
        f"({ceiling / ver:.1%}); stream read of one operand {ceiling * 1e3:.3f} ms"
    )
    return {
        **{f"{name}_s": s for name, s in t.items()},
        "encode_fraction_of_read_ceiling": 2 * ceiling / enc,
        "verify_fraction_of_read_ceiling": ceiling / ver,
        "encode_workspace_bytes": _ffi.abft_encode_workspace(a.dtype, m, k, b.shape[1]),
        "line": line,
    }


def _entry_ops(compiled_text: str) -> list[str]:
    """The launching operations of the compiled entry computation: custom calls by target and
    fusions (the product among them)."""
    entry = compiled_text.split("ENTRY", 1)[-1].split("\n}\n", 1)[0]
    ops = []
    for line in entry.splitlines():
        if " custom-call(" in line:
            target = line.split('custom_call_target="', 1)[-1].split('"', 1)[0]
            ops.append(f"custom-call:{target}")
        elif " fusion(" in line:
            ops.append("fusion")
    return ops


def _measure(a, b, args) -> dict:
    """One configuration (the current ``abft._SUMS``, ``abft._REPAIR``): timings, kernels, HLO."""
    n, dtype = args.size, a.dtype
    plain = jax.jit(jax_tsm2.matmul)
    # Fresh wrappers: jit caches traces per function, and the configuration is read when tracing.
    checked = jax.jit(lambda x, y: abft_matmul(x, y))
    c, verdict = checked(a, b)
    checksums = jax.jit(lambda x, y: encode(x, y))(a, b)
    fns = {
        "matmul": plain,
        "abft_matmul": checked,
        "sum_pass": jax.jit(lambda x: jnp.sum(x, axis=0)),
        "encode": jax.jit(lambda x, y: encode(x, y)),
        "verify": jax.jit(lambda x, cs: verify(x, cs)),
    }
    fargs = {
        "matmul": (a, b),
        "abft_matmul": (a, b),
        "sum_pass": (a,),
        "encode": (a, b),
        "verify": (c, checksums),
    }
    t = _interleaved(fns, fargs, args.repeats, args.calls)
    med = {name: statistics.median(s) for name, s in t.items()}
    mp, ma = med["matmul"], med["abft_matmul"]
    overhead = ma / mp - 1
    hlo_text = checked.lower(a, b).compile().as_text()
    kernel_pieces = _kernel_pieces(a, b, args) if _ffi.cuda_abft_available() else {}
    readers = _hlo_readers(hlo_text, n, dtype)
    pairs = zip(t["abft_matmul"], t["matmul"], strict=True)
    paired = statistics.median(x / y - 1 for x, y in pairs)
    ops = _entry_ops(hlo_text)
    line = (
        f"{n}^3 {dtype.name} [{abft._SUMS}/{abft._REPAIR}]: matmul {mp * 1e3:.3f} ms, "
        f"abft_matmul {ma * 1e3:.3f} ms, overhead {overhead:+.1%}, paired median "
        f"{paired:+.1%} (target <= +8%: {'PASS' if paired <= 0.08 else 'FAIL'}); "
        f"clean verdict: {int(verdict.errors_detected)} errors detected"
    )
    pieces = (
        f"  pieces: one jnp.sum(a, 0) pass {med['sum_pass'] * 1e3:.3f} ms "
        f"(x3 = {3 * med['sum_pass'] / mp:+.1%} of matmul: the floor), "
        f"encode {med['encode'] * 1e3:.3f} ms (A and B), verify {med['verify'] * 1e3:.3f} ms (C)"
    )
    kernels = "  kernels reading " + "; ".join(f"{k}: {v}" for k, v in readers.items())
    launches = f"  entry operations ({len(ops)}): {', '.join(ops)}"
    print(line, pieces, kernels, launches, sep="\n", flush=True)
    if kernel_pieces:
        print(kernel_pieces["line"], flush=True)
    return {
        "config": f"{abft._SUMS}/{abft._REPAIR}",
        "matmul_s": t["matmul"],
        "abft_matmul_s": t["abft_matmul"],
        "sum_pass_s": t["sum_pass"],
        "encode_s": t["encode"],
        "verify_s": t["verify"],
        "overhead": overhead,
        "paired_overhead": paired,
        "entry_operations": ops,
        "errors_detected_on_clean_product": int(verdict.errors_detected),
        "readers": readers,
        "kernel_pieces": kernel_pieces,
        "summary": line,
        "pieces": pieces,
        "hlo": hlo_text,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=8192)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--repeats", type=int, default=11)
    p.add_argument("--calls", type=int, default=10)
    p.add_argument(
        "--configs",
        default="auto/auto,kernel/cond,siblings/kernel,siblings/cond",
        help="SUMS/REPAIR formulations to time (comma list; the library default is first)",
    )
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()

    n, dtype = args.size, jnp.dtype(args.dtype)
    ka, kb = jax.random.split(jax.random.key(0))
    a = jax.random.uniform(ka, (n, n), dtype, -1, 1)
    b = jax.random.uniform(kb, (n, n), dtype, -1, 1)
    default = abft._SUMS, abft._REPAIR
    runs = []
    for config in args.configs.split(","):
        abft._SUMS, abft._REPAIR = config.split("/")
        try:
            runs.append(_measure(a, b, args))
        finally:
            abft._SUMS, abft._REPAIR = default
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        for run in runs:
            name = run["config"].replace("/", "-")
            (args.out / f"abft_matmul.{name}.hlo.txt").write_text(run.pop("hlo"))
        first = runs[0]
        doc = {
            "gpu": jax.devices()[0].device_kind,
            "jax": jax.__version__,
            "size": n,
            "dtype": dtype.name,
            **{
                k: first[k]
                for k in ("matmul_s", "abft_matmul_s", "overhead", "paired_overhead", "summary")
            },
            "errors_detected_on_clean_product": first["errors_detected_on_clean_product"],
            "runs": runs,
        }
        (args.out / "abft_overhead.json").write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()

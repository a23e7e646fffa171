"""What the fused row check (``jax_tsm2.abft_calls.rows``) detects, in the papers' terms.

For every kind of clean data of ``tests/_abft_reference.py`` (but near-overflow, whose
magnitudes overflow) and two shapes, one clean product (a false positive if any row is
flagged) and then one bit flip per bit position (f32 and bf16: every bit of the f32 value;
f64: every other bit), each at a random entry, flipped inside the check's kernel as it stores
``C``. A flip is *due* when it moves its entry by at least the bar (1e-3 for f32 and f64,
1e-1 for bf16) of the largest ``|entry|`` of its column; a due flip is *caught* when the
verdict detects it, names its row and column, and every entry of the repaired ``C`` is within
the worst-case rounding of the exact product.
Runs on whatever platform JAX has (on CPU the reference target, whose threshold allows for
XLA's CPU runtime flushing subnormals to zero). Writes JSON and markdown.

With ``--clean N``, also N clean products per dtype (every kind, a few odd sizes, batched
with ``jax.vmap``) for false positives alone.

Usage::

    python benchmarks/abft_fused_detection.py --out DIR [--seed 11] [--repeats 1] [--clean N]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _abft_reference import CLEAN_KINDS, random_operands  # noqa: E402

from jax_tsm2 import abft_calls  # noqa: E402
from jax_tsm2.bench import env  # noqa: E402

SHAPES = ((64, 256, 4), (32, 2048, 6))
# dtype: (flipped bits of C's value, the bar)
DTYPES = {
    "float32": (jnp.float32, range(31), 1e-3),
    "float64": (jnp.float64, range(0, 63, 2), 1e-3),
    "bfloat16": (jnp.bfloat16, range(31), 1e-1),
}


def _campaign(name: str, repeats: int, rng: np.random.Generator) -> dict:
    dtype, bits, bar = DTYPES[name]
    rows = jax.jit(abft_calls.rows, static_argnames="inject")
    out: dict = {"dtype": name, "bar": bar, "kinds": {}}
    for kind in CLEAN_KINDS:
        if kind == "overflow":
            continue
        rec = {"products": 0, "false_positives": 0, "flips": 0, "due": 0, "caught": 0,
               "largest_missed": 0.0, "smallest_caught": None}  # fmt: skip
        for _ in range(repeats):
            for m, k, n in SHAPES:
                a, b = (x[0] for x in random_operands(rng, kind, 1, m, k, n, dtype))
                clean, verdict = rows(a, b)
                rec["products"] += 1
                rec["false_positives"] += int(verdict[0]) != 0
                c0 = np.asarray(clean)
                ints = np.uint64 if c0.dtype == np.float64 else np.uint32
                # Repaired: every entry within the worst-case rounding of the exact product.
                a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
                exact, scale = a64 @ b64, np.abs(a64) @ np.abs(b64)
                u = float(np.finfo(c0.dtype).eps) / 2
                slack = 2 * (k + 1) * u * scale + 4 * k * float(np.finfo(c0.dtype).tiny)
                for bit in bits:
                    i, j = int(rng.integers(m)), int(rng.integers(n))
                    c, v = rows(a, b, inject=(i, j, bit))
                    flipped = (c0[i, j].view(ints) ^ ints(1 << bit)).view(c0.dtype)
                    top = float(np.abs(c0[:, j]).max())
                    size = abs(float(flipped) - float(c0[i, j])) / top if top > 0 else np.inf
                    rec["flips"] += 1
                    if not (size >= bar or not np.isfinite(size)):
                        continue
                    rec["due"] += 1
                    located = (int(v[2]), int(v[3])) == (i, j) and bool(v[1])
                    repaired = bool(np.all(np.abs(np.asarray(c, np.float64) - exact) <= slack))
                    if int(v[0]) > 0 and located and repaired:
                        rec["caught"] += 1
                        best = rec["smallest_caught"]
                        rec["smallest_caught"] = size if best is None else min(best, size)
                    else:
                        rec["largest_missed"] = max(rec["largest_missed"], size)
        out["kinds"][kind] = rec
    return out


CLEAN_SHAPES = ((1, 1, 1), (7, 33, 3), (64, 300, 8), (13, 1031, 5), (40, 97, 2))
CLEAN_BATCH = 250


def _clean_sweep(name: str, count: int, rng: np.random.Generator) -> dict:
    """False positives over ``count`` clean products of ``name`` (every kind and shape alike)."""
    dtype = DTYPES[name][0]
    rows = jax.jit(jax.vmap(abft_calls.rows))
    products = flagged = 0
    while products < count:
        for kind in CLEAN_KINDS:
            for m, k, n in CLEAN_SHAPES:
                a, b = random_operands(rng, kind, CLEAN_BATCH, m, k, n, dtype)
                _, verdict = rows(a, b)
                flagged += int(np.count_nonzero(np.asarray(verdict[0])))
                products += CLEAN_BATCH
    return {"dtype": name, "products": products, "false_positives": flagged}


def _markdown(results: list[dict], device: str) -> str:
    lines = [
        f"# Fused row check: detection ({device})",
        "",
        "Due: a flip that moved its entry by at least the bar times its column's largest entry;"
        " caught: detected, located (row and column) and repaired.",
        "",
        "| dtype | kind | products | false positives | flips | due | caught | largest missed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for kind, k in r["kinds"].items():
            lines.append(
                f"| {r['dtype']} | {kind} | {k['products']} | {k['false_positives']} | "
                f"{k['flips']} | {k['due']} | {k['caught']} | {k['largest_missed']:.3g} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--repeats", type=int, default=1, help="products per kind and shape")
    p.add_argument("--dtypes", default=",".join(DTYPES), help=f"comma-separated: {list(DTYPES)}")
    p.add_argument("--clean", type=int, default=0, help="clean products per dtype (vmapped)")
    args = p.parse_args(argv)
    names = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    if any(d not in DTYPES for d in names) or args.repeats < 1 or args.clean < 0:
        p.error(f"--dtypes takes {list(DTYPES)}; --repeats must be >= 1, --clean >= 0")
    rng = np.random.default_rng(args.seed)
    results = []
    for name in names:
        results.append(_campaign(name, args.repeats, rng))
        kinds = results[-1]["kinds"].values()
        print(  # progress: the campaign compiles a product per shape and flipped bit
            f"{name}: {sum(k['false_positives'] for k in kinds)} false positives, "
            f"{sum(k['caught'] for k in kinds)} of {sum(k['due'] for k in kinds)} due flips caught",
            flush=True,
        )
    clean = [_clean_sweep(name, args.clean, rng) for name in names] if args.clean else []
    device = jax.devices()[0].device_kind
    args.out.mkdir(parents=True, exist_ok=True)
    made = env.made(sys.argv)
    doc = {"device": device, "made": made, "seed": args.seed, "results": results, "clean": clean}
    (args.out / "abft_fused_detection.json").write_text(json.dumps(doc, indent=1, default=str))
    text = _markdown(results, device)
    text += f"\nMade {made['date']} at commit {(made['commit'] or '?')[:7]}: `{made['command']}`\n"
    if clean:
        text += (
            "\nClean products alone (every kind, sizes "
            + ", ".join("x".join(map(str, s)) for s in CLEAN_SHAPES)
            + "):\n\n| dtype | products | false positives |\n|---|---|---|\n"
        )
        text += "".join(
            f"| {c['dtype']} | {c['products']} | {c['false_positives']} |\n" for c in clean
        )
    (args.out / "abft_fused_detection.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()

"""ABFT detection in the terms of the fault-tolerance papers, per dtype, on this device.

For each dtype it runs ``jax_tsm2.abft`` over:

- clean random products of every kind of ``tests/_abft_reference.CLEAN_KINDS`` (normal, uniform,
  heavy-tailed, rows over many binades, ill-conditioned, near underflow and overflow, constant,
  repeated rows, few values; mostly small, some up to 4096): **false positives** (any product
  flagged), and the largest clean residual over its threshold (the margin);
- single faults added to clean products of the well-conditioned kinds, of sizes
  ``10^U(-7, 0)`` times the largest entry of their column: **injected, detected** (the right
  column flagged), **located** (the right row), **corrected** (repaired from the operands),
  **missed**, each by decade of that relative size and against the bar (1e-3 for f32/f64, 1e-1
  for bf16/f16), with the smallest detected and the largest missed;
- bits flipped inside the pass over C (``abft_matmul(..., inject=...)``) at random entries and
  bits: the same counts, against the change the flip made.

f32 runs at ``--precision highest`` by default (at XLA's default precision a GPU product's
inputs are TF32, whose own rounding is above 1e-3 over a column; ``--precision default`` measures
that case). Writes ``abft_detection.json`` and ``abft_detection.md`` to ``--out``.

Usage::

    python benchmarks/abft_detection.py --out DIR [--products 5000] [--faults 4000] \\
        [--dtypes f32,f64,bf16,f16] [--precision highest|default]
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
from _abft_reference import CLEAN_KINDS, DETECT_KINDS, random_operands  # noqa: E402

from jax_tsm2 import abft  # noqa: E402

DTYPES = {"f32": jnp.float32, "f64": jnp.float64, "bf16": jnp.bfloat16, "f16": jnp.float16}
BAR = {"f32": 1e-3, "f64": 1e-3, "bf16": 1e-1, "f16": 1e-1}
CLEAN_SHAPES = [(1, 1, 1), (7, 5, 3), (37, 90, 5), (64, 64, 8), (129, 33, 2), (300, 257, 4)]
LARGE_SHAPES = [(4096, 64, 3), (64, 4096, 3), (1024, 1024, 4), (4096, 4096, 2)]
FAULT_SHAPES = [(8, 16, 4), (16, 64, 4), (37, 90, 5), (128, 128, 4), (300, 257, 4),
                (1024, 256, 2)]  # fmt: skip


def _precision(name: str, arg: str):
    return jax.lax.Precision.HIGHEST if name == "f32" and arg == "highest" else None


def clean_run(name: str, products: int, prec, rng) -> dict:
    """Clean products of every kind, checked as ``abft_matmul`` checks them: flagged ones, and
    the largest residual / threshold."""
    dtype = DTYPES[name]
    checked = abft.checked_dtype(dtype)

    def case(a, b):
        cs = abft.encode(a, b, precision=prec, out_dtype=checked)
        c = jnp.matmul(a, b, precision=prec, preferred_element_type=checked)
        r = abft.verify(c, cs)
        ratio = jnp.max(jnp.abs(r.col) / r.col_threshold)
        return jnp.any(r.col_flags), ratio, jnp.all(jnp.isfinite(c))

    run = jax.jit(jax.vmap(case))
    per = max(1, math.ceil(products / (len(CLEAN_KINDS) * len(CLEAN_SHAPES))))
    out = {kind: {"products": 0, "false_positives": 0, "max_ratio": 0.0} for kind in CLEAN_KINDS}
    runs = [(s, per) for s in CLEAN_SHAPES] + [(s, 1) for s in LARGE_SHAPES]
    for (m, k, n), count in runs:
        batch = max(1, min(count, 2**22 // (m * k + k * n)))
        for kind in CLEAN_KINDS:
            done = 0
            while done < count:
                size = min(batch, count - done)
                a, b = random_operands(rng, kind, size, m, k, n, dtype)
                flagged, ratio, finite = (np.asarray(x) for x in run(a, b))
                rec = out[kind]
                rec["products"] += int(finite.sum())
                rec["false_positives"] += int((flagged & finite).sum())
                if finite.any():
                    rec["max_ratio"] = max(rec["max_ratio"], float(ratio[finite].max()))
                done += size
    return out


def fault_run(name: str, faults: int, prec, rng) -> list[dict]:
    """Single faults of relative size 10^U(-7, 0) in clean products, as ``abft_matmul`` checks
    them (in ``abft.checked_dtype``: bf16/f16 as their f32 sums); one record per fault."""
    dtype = DTYPES[name]
    checked = abft.checked_dtype(dtype)

    def case(a, b, i, j, rel):
        cs = abft.encode(a, b, precision=prec, out_dtype=checked)
        clean = jnp.matmul(a, b, precision=prec, preferred_element_type=checked)
        acc = cs.stats.dtype
        col_max = jnp.max(jnp.abs(clean.astype(acc)), axis=0)[j]
        bad = abft.inject_error(clean, i, j, rel.astype(acc) * col_max)
        injected = bad[i, j].astype(acc) - clean[i, j].astype(acc)
        t = abft.verify(bad, cs).col_threshold[j]
        fixed, v = abft.check(bad, cs, a=a, b=b)
        err = jnp.max(jnp.abs(fixed.astype(acc) - clean.astype(acc)))
        scale = jnp.max(jnp.abs(a.astype(acc)) @ jnp.abs(b.astype(acc)))
        return v, injected / col_max, injected / t, err / scale

    run = jax.jit(jax.vmap(case))
    records = []
    per = max(1, math.ceil(faults / (len(DETECT_KINDS) * len(FAULT_SHAPES))))
    for m, k, n in FAULT_SHAPES:
        for kind in DETECT_KINDS:
            a, b = random_operands(rng, kind, per, m, k, n, dtype)
            i = jnp.asarray(rng.integers(0, m, per))
            j = jnp.asarray(rng.integers(0, n, per))
            rel = jnp.asarray(10.0 ** rng.uniform(-7, 0, per) * rng.choice([-1.0, 1.0], per))
            v, rel_got, over_t, err = jax.device_get(run(a, b, i, j, rel))
            for e in range(per):
                detected = bool(v.errors_detected[e] >= 1 and v.col[e] == int(j[e]))
                records.append({
                    "kind": kind,
                    "shape": [m, k, n],
                    "relative": abs(float(rel_got[e])),
                    "over_threshold": abs(float(over_t[e])),
                    "detected": detected,
                    "located": detected and bool(v.row[e] == int(i[e])),
                    "corrected": detected and bool(v.corrected[e]),
                    "residual_error": float(err[e]),
                })  # fmt: skip
    return records


def flip_run(name: str, flips: int, prec, rng, per_key: int = 16) -> list[dict]:
    """Bits flipped inside the pass over C: random (row, col, bit), each in ``per_key`` clean
    products (one compilation per key: the fault is a static attribute); one record per flip."""
    dtype = DTYPES[name]
    checked = abft.checked_dtype(dtype)  # the value a flip hits: bf16/f16 products' f32 sums
    bits = 8 * checked.itemsize
    m, k, n = 300, 257, 4
    records = []
    for _ in range(max(1, flips // per_key)):
        kind = DETECT_KINDS[int(rng.integers(len(DETECT_KINDS)))]
        a, b = random_operands(rng, kind, per_key, m, k, n, dtype)
        row, col, bit = int(rng.integers(m)), int(rng.integers(n)), int(rng.integers(bits))

        def case(a, b, key=(row, col, bit)):
            clean = jnp.matmul(a, b, precision=prec, preferred_element_type=checked)
            cs = abft.encode(a, b, precision=prec, out_dtype=checked)
            t = abft.verify(clean, cs).col_threshold[key[1]]
            _, v = abft.abft_matmul(a, b, precision=prec, inject=key)
            return clean[key[0], key[1]], t, v

        entry, t, v = jax.device_get(jax.jit(jax.vmap(case))(a, b))
        for e in range(per_key):
            x = np.asarray([entry[e]], dtype=checked)
            ints = x.view(f"u{x.dtype.itemsize}").copy()
            ints ^= np.asarray(1 << bit, ints.dtype)
            flipped = float(ints.view(x.dtype)[0].astype(np.float64))
            change = abs(flipped - float(x[0].astype(np.float64)))
            detected = bool(v.errors_detected[e] >= 1 and v.col[e] == col)
            records.append({
                "bit": bit,
                "change_over_threshold": change / float(t[e]) if math.isfinite(change)
                else math.inf,
                "detected": detected,
                "located": detected and bool(v.row[e] == row),
                "corrected": detected and bool(v.corrected[e]),
            })  # fmt: skip
    return records


def summarize(name: str, clean: dict, faults: list[dict], flips: list[dict]) -> dict:
    bar = BAR[name]
    # A fault too small for C's dtype rounds away when it is added: no fault at all.
    faults = [f for f in faults if f["relative"] > 0]
    above = [f for f in faults if f["relative"] >= bar]
    by_rows = {}
    for f in above:
        rec = by_rows.setdefault(f["shape"][0], {"injected": 0, "detected": 0})
        rec["injected"] += 1
        rec["detected"] += f["detected"]
    missed = [f for f in faults if not f["detected"]]
    decades = {}
    for f in faults:
        d = math.floor(math.log10(max(f["relative"], 1e-30)))
        bucket = decades.setdefault(f"1e{d}", {"injected": 0, "detected": 0, "corrected": 0})
        bucket["injected"] += 1
        bucket["detected"] += f["detected"]
        bucket["corrected"] += f["corrected"]
    seen = [f for f in flips if f["change_over_threshold"] > 1.2]
    below = [f for f in flips if f["change_over_threshold"] <= 1.2]
    detected_sizes = [f["relative"] for f in faults if f["detected"]]
    return {
        "clean_products": sum(r["products"] for r in clean.values()),
        "false_positives": sum(r["false_positives"] for r in clean.values()),
        "max_clean_ratio": max(r["max_ratio"] for r in clean.values()),
        "clean_by_kind": clean,
        "bar": bar,
        "faults_at_or_above_bar": {
            "injected": len(above),
            "detected": sum(f["detected"] for f in above),
            "located": sum(f["located"] for f in above),
            "corrected": sum(f["corrected"] for f in above),
            "missed": [f for f in above if not f["detected"]],
            "by_column_length": dict(sorted(by_rows.items())),
        },
        "faults_by_decade": dict(sorted(decades.items(), key=lambda kv: float(kv[0]))),
        "smallest_detected_relative": min(detected_sizes, default=None),
        "largest_missed_relative": max((f["relative"] for f in missed), default=None),
        "largest_missed_over_threshold": max((f["over_threshold"] for f in missed), default=None),
        "bit_flips": {
            "injected": len(flips),
            "above_1_2_thresholds": len(seen),
            "detected": sum(f["detected"] for f in seen),
            "located": sum(f["located"] for f in seen),
            "corrected": sum(f["corrected"] for f in seen),
            "detected_below": sum(f["detected"] for f in below),
        },
    }


def markdown(doc: dict) -> str:
    lines = [
        f"# ABFT detection on {doc['device']} (jax {doc['jax']}, f32 precision {doc['precision']})",
        "",
        "| dtype | clean products | false positives | max clean residual / threshold | bar "
        "| faults >= bar | detected | located | corrected | missed | smallest detected "
        "| largest missed | flips > 1.2 t | detected | corrected |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in doc["dtypes"].items():
        a = s["faults_at_or_above_bar"]
        f = s["bit_flips"]
        fmt = lambda x: "-" if x is None else f"{x:.2e}"
        lines.append(
            f"| {name} | {s['clean_products']} | {s['false_positives']} "
            f"| {s['max_clean_ratio']:.3f} | {s['bar']:g} | {a['injected']} | {a['detected']} "
            f"| {a['located']} | {a['corrected']} | {len(a['missed'])} "
            f"| {fmt(s['smallest_detected_relative'])} | {fmt(s['largest_missed_relative'])} "
            f"| {f['above_1_2_thresholds']} | {f['detected']} | {f['corrected']} |"
        )
    lines += ["", "Faults at or above the bar by column length m (detected / injected):", ""]
    for name, s in doc["dtypes"].items():
        cells = ", ".join(
            f"m = {m}: {r['detected']}/{r['injected']}"
            for m, r in s["faults_at_or_above_bar"]["by_column_length"].items()
        )
        lines.append(f"- {name}: {cells}")
    lines += ["", "Faults by relative size (fault / largest entry of its column):", ""]
    for name, s in doc["dtypes"].items():
        cells = ", ".join(
            f"{d}: {b['detected']}/{b['injected']}" for d, b in s["faults_by_decade"].items()
        )
        lines.append(f"- {name}: {cells}")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=pathlib.Path, required=True)
    p.add_argument("--products", type=int, default=5000, help="clean products per dtype")
    p.add_argument("--faults", type=int, default=4000, help="single faults per dtype")
    p.add_argument("--flips", type=int, default=256, help="bits flipped in the kernel per dtype")
    p.add_argument("--dtypes", default="f32,f64,bf16,f16")
    p.add_argument("--precision", choices=("highest", "default"), default="highest")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    names = args.dtypes.split(",")
    if unknown := [x for x in names if x not in DTYPES]:
        p.error(f"unknown dtypes {unknown}; choose from {sorted(DTYPES)}")
    rng = np.random.default_rng(args.seed)
    doc = {
        "device": jax.devices()[0].device_kind,
        "jax": jax.__version__,
        "precision": args.precision,
        "arguments": vars(args) | {"out": str(args.out)},
        "dtypes": {},
    }
    for name in names:
        t0 = time.perf_counter()
        prec = _precision(name, args.precision)
        clean = clean_run(name, args.products, prec, rng)
        faults = fault_run(name, args.faults, prec, rng)
        flips = flip_run(name, args.flips, prec, rng)
        doc["dtypes"][name] = summarize(name, clean, faults, flips)
        s = doc["dtypes"][name]
        a = s["faults_at_or_above_bar"]
        print(
            f"{name}: {s['clean_products']} clean, {s['false_positives']} false positives "
            f"(max residual/threshold {s['max_clean_ratio']:.3f}); faults >= {s['bar']:g}: "
            f"{a['detected']}/{a['injected']} detected, {a['corrected']} corrected, "
            f"{len(a['missed'])} missed; flips: {s['bit_flips']['detected']}/"
            f"{s['bit_flips']['above_1_2_thresholds']} ({time.perf_counter() - t0:.0f} s)",
            flush=True,
        )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "abft_detection.json").write_text(json.dumps(doc, indent=1))
    (args.out / "abft_detection.md").write_text(markdown(doc))


if __name__ == "__main__":
    main()

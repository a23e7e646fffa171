"""k-means with ``fault_tolerance=True``: its cost per iteration, its margin, and an injection
campaign.

For each case (n, d, k; f32 blobs around k centres, the first k points as initial
centroids, as ``kmeans_iter.py`` makes them):

* **cost**: seconds per Lloyd iteration of ``jax_tsm2.kmeans``'s plain iteration and of its
  checked one (the step, the checks, the centroid update kept or dropped), each ``m``
  iterations in one ``lax.fori_loop``, as the difference of two run lengths
  ``(t(m2) - t(m1)) / (m2 - m1)`` (each ``t`` the median of ``--repeats`` synchronised runs,
  the two taking turns), so that dispatch and setup cancel; and the once-per-run cost of the
  invariants (one more read of X);
* **margin**: the worst ``|residual| / threshold`` of each check (columns, counts,
  distances, and the fused kernel's per-row distance check, 0 where it does not run) over
  ``--margin-iters`` clean steps (1 would be a false positive); distance faults on the
  fused path are planted inside the kernel (``tsm2_kmeans_step_checked_inject``);
* **campaign**: ``--faults`` single bit flips of each kind (``"sum"``, ``"count"``,
  ``"distance"``) at random iterations, clusters or rows, columns and bits, each in its own
  ``kmeans(..., fault_tolerance=True, fault_injection=...)`` run of ``--iters`` iterations
  (``tol=0``). Outcomes, as fault-injection studies name them: *detected* (some step
  failed its checks) and *corrected* (the run's labels equal the clean run's and its
  centroids agree to ``1e-5`` of their scale); *masked* (not detected, result equal to the
  clean run's: the flip changed nothing that matters, e.g. a distance that stayed above the
  minimum); *silent data corruption* (not detected, result different). Each flip's
  magnitude is reported relative to the largest ``|entry|`` of its column (sums), the
  largest count (counts), or the mean squared distance (distances), and each distance
  flip says whether it changed the row's argmin. The clean run's own detections are the
  *false positives*.

Writes ``kmeans_fault_tolerance.json`` and ``.md`` to ``--out``. Default cases: (1e6, 256,
16) and (2.5e5, 4096, 16) on a GPU, (2e4, 32, 16) and (4e3, 256, 16) on a CPU.

Usage::

    python benchmarks/kmeans_fault_tolerance.py --out DIR [--case N,D,K ...] [--faults 100]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import kmeans_iter as ki  # benchmarks/ is the script's directory
import numpy as np
from jax import lax

import jax_tsm2
from jax_tsm2 import _cli
from jax_tsm2.clustering import checksums, core, faults

GPU_CASES = ((1_000_000, 256, 16), (250_000, 4096, 16))
CPU_CASES = ((20_000, 32, 16), (4_000, 256, 16))
KINDS = faults.KINDS


def _case(text: str) -> tuple[int, int, int]:
    parts = text.split(",")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"expected N,D,K, got {text!r}")
    n, d, k = (_cli.positive_int(p) for p in parts)
    if n < k:
        raise argparse.ArgumentTypeError(f"need n >= k >= 1 and d >= 1, got {text!r}")
    return n, d, k


# ------------------------------------------------------------------ cost


def _runners(xc, x_sq, w, k: int, precision: str):
    """``m`` plain and checked iterations, each one jitted call (``m`` an operand, one
    compile each; the data are operands, not constants folded into the program)."""
    inv = jax.jit(checksums.invariants)(xc, x_sq, w)

    def plain(ops, c):
        xc, x_sq, w, _ = ops
        return core._iteration(xc, x_sq, w, c, k, None, precision=precision)[3]

    def checked(ops, c):
        xc, x_sq, w, inv = ops
        ft = core._Checked(inv, True, None, False, None)
        _, _, ok, c_new = core._checked_iteration(
            xc, x_sq, w, c, k, None, precision, ft, jnp.bool_(False)
        )
        return jnp.where(ok, c_new, c)

    def loop(body):
        run = jax.jit(lambda ops, c0, m: lax.fori_loop(0, m, lambda _, c: body(ops, c), c0))
        ops = (xc, x_sq, w, inv)
        return lambda c0, m: jax.block_until_ready(run(ops, c0, jnp.int32(m)))

    return {"plain": loop(plain), "checked": loop(checked)}


def _per_iteration(runners: dict, c0, m1: int, m2: int, repeats: int) -> dict[str, float]:
    times: dict[tuple[str, int], list[float]] = {}
    for run in runners.values():  # compile and warm
        run(c0, m1)
    for _ in range(repeats):
        for name, run in runners.items():
            for m in (m1, m2):
                t0 = time.perf_counter()
                run(c0, m)
                times.setdefault((name, m), []).append(time.perf_counter() - t0)
    med = {key: statistics.median(v) for key, v in times.items()}
    return {name: (med[(name, m2)] - med[(name, m1)]) / (m2 - m1) for name in runners}


def _invariants_seconds(xc, x_sq, w, repeats: int) -> float:
    f = jax.jit(checksums.invariants)
    jax.block_until_ready(f(xc, x_sq, w))
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(f(xc, x_sq, w))
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


# ------------------------------------------------------------------ campaign


@jax.jit
def _replay(xc, x_sq, w, c0, iters_template):
    """The clean run's steps: per iteration the centroids entering it, sums, counts and the
    mean squared distance (what the campaign's magnitudes are relative to)."""
    k = c0.shape[0]

    def body(c, _):
        s = core._step(xc, x_sq, w, c, k)
        c_new = core._new_centroids(s.sums, s.counts, xc, w, s.labels, s.mind, c, k, None)
        return c_new, (c, s.sums, s.counts, s.inertia / jnp.sum(w), s.labels, s.mind)

    return lax.scan(body, c0, iters_template)[1]


def _row_distances(xc, x_sq, c, row):
    return np.array(core._sq_dist(xc[row][None], x_sq[row][None], c)[0])


def _flip(v, bit: int) -> float:
    return float(faults.flip_bit(jnp.asarray(v, jnp.float32), bit))


def _campaign(x, k: int, init, args, rng) -> dict[str, Any]:
    n, d = x.shape
    iters = args.iters
    run = lambda spec=None: core.kmeans(
        jax.random.key(0), x, k, init=init, max_iter=iters, tol=0.0,
        fault_tolerance=True, fault_injection=spec,
    )  # fmt: skip
    clean = run()
    ref_labels, ref_c = np.asarray(clean.labels), np.asarray(clean.centroids)
    scale = float(np.abs(ref_c).max())
    steps = int(clean.n_iter)
    xc, x_sq, w, mu, _ = core._prepare(x, None, None)
    c_in, sums, counts, mean_d, labels, mind = (
        np.asarray(a) for a in _replay(xc, x_sq, w, jnp.asarray(init) - mu, jnp.zeros(steps))
    )
    out: dict[str, Any] = {"clean_faults_detected": int(clean.faults_detected),
                           "clean_iterations": steps}  # fmt: skip
    t0 = time.perf_counter()
    for kind in KINDS:
        rows = []
        for _ in range(args.faults):
            it = int(rng.integers(0, steps))
            bit = int(rng.integers(0, 32))
            rec: dict[str, Any] = {"iteration": it, "bit": bit}
            if kind == "distance":
                row, j = int(rng.integers(0, n)), int(rng.integers(0, k))
                dist = _row_distances(xc, x_sq, jnp.asarray(c_in[it]), row)
                old_l = int(labels[it][row])
                dist[old_l] = mind[it][row]
                flipped = _flip(dist[j], bit)
                new = dist.copy()
                new[j] = flipped
                rec.update(index=row, column=j,
                           changes_argmin=bool(int(np.argmin(new)) != old_l),
                           downward=bool(flipped < dist[j]),
                           winner=bool(j == old_l),
                           magnitude=abs(flipped - float(dist[j])) / float(mean_d[it]))  # fmt: skip
                spec = faults.FaultSpec(it, kind, row, j, bit)
            else:
                j, col = int(rng.integers(0, k)), int(rng.integers(0, d))
                if kind == "sum":
                    v, ref = sums[it][j, col], np.abs(sums[it][:, col]).max()
                else:
                    v, ref, col = counts[it][j], np.abs(counts[it]).max(), 0
                rec.update(index=j, column=col, magnitude=abs(_flip(v, bit) - float(v)) / ref)
                spec = faults.FaultSpec(it, kind, j, col, bit)
            f = run(spec)
            diff = float(np.abs(np.asarray(f.centroids) - ref_c).max()) / scale
            same = bool(np.array_equal(np.asarray(f.labels), ref_labels)) and diff <= 1e-5
            rec["centroid_difference"] = diff  # relative to the largest |centroid entry|
            detected = int(f.faults_detected) > 0
            rec.update(detected=detected, same_result=same,
                       unresolved=bool(f.fault_unresolved))  # fmt: skip
            rows.append(rec)
        out[kind] = {"faults": rows, "summary": _summary(rows)}
        s = out[kind]["summary"]
        print(f"  {kind} flips: {s['detected']} detected of {s['injected']} "
              f"({time.perf_counter() - t0:.0f} s into the campaign)", flush=True)  # fmt: skip
    return out


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    det = [r for r in rows if r["detected"]]
    missed = [r for r in rows if not r["detected"]]
    sdc = [r for r in missed if not r["same_result"]]
    mags = lambda rs: sorted(float(r["magnitude"]) for r in rs)
    extra: dict[str, Any] = {}
    if rows and "changes_argmin" in rows[0]:  # distances: which flips could be seen
        won = [r for r in rows if r["changes_argmin"] and not r["winner"]]
        raised = [r for r in rows if r["changes_argmin"] and r["winner"]]
        extra = {
            "lowered_to_win": len(won),
            "lowered_to_win_detected": sum(r["detected"] for r in won),
            "lowered_to_win_missed_magnitudes": mags(r for r in won if not r["detected"]),
            "winner_raised": len(raised),
            "winner_raised_detected": sum(r["detected"] for r in raised),
            "argmin_unchanged": len(rows) - len(won) - len(raised),
        }
    return {
        **extra,
        "injected": len(rows),
        "detected": len(det),
        "corrected": sum(r["same_result"] for r in det),
        "masked": len(missed) - len(sdc),
        "silent_data_corruption": len(sdc),
        "largest_missed_magnitude": max(mags(missed), default=None),
        "smallest_detected_magnitude": min(mags(det), default=None),
        "sdc_magnitudes": mags(sdc),
        "sdc_centroid_differences": sorted(r["centroid_difference"] for r in sdc),
    }


# ------------------------------------------------------------------ driver


def run_case(n: int, d: int, k: int, args, rng) -> dict[str, Any]:
    data = ki._data(n, d, k, jnp.float32, 1, seed=args.seed)
    x, _, _, init = data[0]
    res: dict[str, Any] = {"n": n, "d": d, "k": k, "dtype": "float32"}
    xc, x_sq, w, mu, _ = jax.jit(lambda x: core._prepare(x, None, None))(x)
    c0 = init - mu
    runners = _runners(xc, x_sq, w, k, "float32")
    per = _per_iteration(runners, c0, args.m1, args.m2, args.repeats)
    res["seconds_per_iteration"] = per
    res["overhead"] = per["checked"] / per["plain"] - 1 if per["plain"] > 0 else None
    res["invariants_seconds"] = _invariants_seconds(xc, x_sq, w, args.repeats)
    print(f"n={n} d={d} k={k}: plain {per['plain'] * 1e3:.3f} ms, checked "
          f"{per['checked'] * 1e3:.3f} ms per iteration", flush=True)  # fmt: skip
    ratios = np.asarray(core._check_ratios(jax.random.key(0), x, None, init, k=k,
                                           iters=args.margin_iters))  # fmt: skip
    res["margin"] = dict(zip(("columns", "counts", "distances", "rows"),
                             map(float, ratios.max(axis=0)), strict=True))  # fmt: skip
    if args.faults:
        res["campaign"] = _campaign(x, k, init, args, rng)
    return res


def markdown(doc: dict[str, Any]) -> str:
    lines = [
        f"# k-means fault tolerance ({doc['device']})",
        "",
        "Per-iteration ms as the difference of two run lengths; margin: worst clean "
        "|residual| / threshold over the steps (1 = a false positive).",
        "",
        "| n | d | k | plain ms | checked ms | overhead | invariants ms | margin col / "
        "count / dist / rows |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["cases"]:
        t, m = r["seconds_per_iteration"], r["margin"]
        lines.append(
            f"| {r['n']} | {r['d']} | {r['k']} | {t['plain'] * 1e3:.3f} | "
            f"{t['checked'] * 1e3:.3f} | {100 * (r['overhead'] or 0):.1f}% | "
            f"{r['invariants_seconds'] * 1e3:.2f} | {m['columns']:.2g} / {m['counts']:.2g} / "
            f"{m['distances']:.2g} / {m['rows']:.2g} |"
        )
    lines += ["", "Injection campaign (single bit flips, one per run):", "",
              "| n | d | k | kind | injected | detected | corrected | masked | SDC | "
              "largest missed | smallest detected | SDC centroid diff | clean-run FP |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in doc["cases"]:
        camp = r.get("campaign")
        if not camp:
            continue
        for kind in KINDS:
            s = camp[kind]["summary"]
            g = lambda v: "-" if v is None else f"{v:.2g}"
            lines.append(
                f"| {r['n']} | {r['d']} | {r['k']} | {kind} | {s['injected']} | {s['detected']}"
                f" | {s['corrected']} | {s['masked']} | {s['silent_data_corruption']} | "
                f"{g(s['largest_missed_magnitude'])} | {g(s['smallest_detected_magnitude'])} | "
                f"{g(max(s['sdc_centroid_differences'], default=None))} | "
                f"{camp['clean_faults_detected']} |"
            )
    lines += ["", "Magnitudes: |flip| over the column's largest |sum| (sum), the largest "
              "count (count), the mean squared distance (distance); SDC centroid diff: the "
              "largest centroid difference of a silent corruption over the largest |centroid "
              "entry|.", "",
              "Distance flips by effect (lowered until it won / winner raised / argmin "
              "unchanged), detected of each:", ""]  # fmt: skip
    for r in doc["cases"]:
        s = r.get("campaign", {}).get("distance", {}).get("summary")
        if s:
            lines.append(
                f"- n={r['n']} d={r['d']} k={r['k']}: lowered to win {s['lowered_to_win_detected']}"
                f"/{s['lowered_to_win']} (missed magnitudes "
                f"{[float(f'{m:.2g}') for m in s['lowered_to_win_missed_magnitudes']]}), "
                f"winner raised {s['winner_raised_detected']}/{s['winner_raised']}, "
                f"unchanged {s['argmin_unchanged']}"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", action="append", type=_case, metavar="N,D,K",
                   help="a case, repeatable (default: two per platform)")  # fmt: skip
    p.add_argument("--faults", type=_cli.non_negative_int, default=None,
                   help="flips of each kind per case (default: 100 on GPU, 20 on CPU)")  # fmt: skip
    p.add_argument("--iters", type=_cli.positive_int, default=6,
                   help="iterations of each campaign run")  # fmt: skip
    p.add_argument("--margin-iters", type=_cli.positive_int, default=10)
    p.add_argument("--m1", type=_cli.positive_int, default=2)
    p.add_argument("--m2", type=_cli.positive_int, default=22)
    p.add_argument("--repeats", type=_cli.positive_int, default=5)
    p.add_argument("--seed", type=_cli.non_negative_int, default=0)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    if args.m2 <= args.m1:
        p.error(f"--m2 ({args.m2}) must be larger than --m1 ({args.m1})")
    dev = jax.devices()[0]
    gpu = dev.platform == "gpu"
    if args.faults is None:
        args.faults = 100 if gpu else 20
    cases = args.case or (GPU_CASES if gpu else CPU_CASES)
    rng = np.random.default_rng(args.seed)
    doc: dict[str, Any] = {"device": dev.device_kind, "jax": jax.__version__,
                           "build": jax_tsm2.build_info(), "x64": jax.config.jax_enable_x64,
                           "lambda": checksums.LAMBDA, "max_redos": checksums.MAX_REDOS,
                           "cases": []}  # fmt: skip
    for n, d, k in cases:
        t0 = time.perf_counter()
        r = run_case(n, d, k, args, rng)
        r["wall_seconds"] = time.perf_counter() - t0
        doc["cases"].append(r)
        t = r["seconds_per_iteration"]
        print(f"n={n} d={d} k={k}: plain {t['plain'] * 1e3:.3f} ms, checked "
              f"{t['checked'] * 1e3:.3f} ms per iteration; margin {r['margin']} "
              f"({r['wall_seconds']:.0f} s)", flush=True)  # fmt: skip
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "kmeans_fault_tolerance.json").write_text(
                json.dumps(doc, indent=1, default=str)
            )
            (args.out / "kmeans_fault_tolerance.md").write_text(markdown(doc))
    print(markdown(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Times small-left products (S: ``a`` m x k, ``b`` k x n, m <= 16) written several ways,
with the harness's timing (``jax_tsm2.bench.timing``), beside torch's cuBLAS.

On the 33 MB bf16 S cases (m x 4096 x 4096) XLA's dot ran at 0.94-0.95x of torch's CUDA
graph on an H100. This asks whether another formulation XLA compiles (a fused multiply and
column reduction, or a dot accumulating in f32) or our TSM2S kernel beats it. (On the H100
the fused multiply and reduction took 3-10x torch's time; an f32 dot, XLA's dot's.)

    python benchmarks/s_formulations.py [--repeats 15] [--out results.txt]
"""

from __future__ import annotations

import argparse
import statistics

import jax
import jax.numpy as jnp
import numpy as np

import jax_tsm2
from jax_tsm2.bench import impls, timing

SHAPES = [(m, 4096, 4096, "bfloat16") for m in (1, 2, 4, 8, 16)] + [
    (1, 4096, 4096, "float32"),
    (8, 8192, 14336, "bfloat16"),
]


def _reduce(a, b):
    # One fused reduction kernel over b's rows: no GEMV, no split-k second pass.
    prod = a.astype(jnp.float32)[:, :, None] * b.astype(jnp.float32)[None]
    return prod.sum(axis=1).astype(a.dtype)


def _dot_f32(a, b):
    return jnp.matmul(a, b, preferred_element_type=jnp.float32).astype(a.dtype)


FORMS = {"jnp": jnp.matmul, "reduce": _reduce, "dot_f32": _dot_f32, "tsm2s": jax_tsm2.matmul}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch, why = impls.load_torch()
    lines = [f"{jax.devices()[0].device_kind}; torch: {why or 'cuda graph'}"]
    for m, k, n, dt in SHAPES:
        rng = np.random.default_rng(0)
        nbytes = (m * k + k * n + m * n) * jnp.dtype(dt).itemsize
        # Enough products per call that the device, not the host's dispatch, sets the pace.
        calls = max(24, int(4 * 50e6 // nbytes) + 1)
        a_np = [rng.standard_normal((m, k), np.float32) for _ in range(calls)]
        b_np = [rng.standard_normal((k, n), np.float32) for _ in range(calls)]
        copies = [
            [jnp.asarray(x, dt) for x in a_np],
            [jnp.asarray(x, dt) for x in b_np],
        ]
        want = np.asarray(copies[0][0], np.float64) @ np.asarray(copies[1][0], np.float64)
        compiled = {}
        for name, fn in FORMS.items():
            # Routing reads the custom-call mode when the product is lowered.
            with jax_tsm2.custom_call_mode("always" if name == "tsm2s" else "auto"):
                compiled[name], _ = timing.compile_jax(fn, copies)
        samples: dict[str, list[float]] = {name: [] for name in compiled}
        tr = None
        if torch is not None:
            tcopies = [[torch.from_dlpack(x) for x in c] for c in copies]
            tr = timing.TorchRunner(torch, lambda mm, a, b: mm(a, b), tcopies)
            samples["torch"] = []
        errs = {}
        for name, c in compiled.items():
            got = np.asarray(timing.run_jax(c, copies)[0], np.float64)
            errs[name] = float(np.abs(got - want).max() / np.abs(want).max())
        for _ in range(args.repeats):  # take turns, as the harness does
            for name, c in compiled.items():
                samples[name] += timing.time_jax(c, copies, per_sample=8, repeats=1)
            if tr is not None:
                samples["torch"] += tr.time(per_sample=8, repeats=1)
        med = {name: statistics.median(s) * 1e6 for name, s in samples.items()}
        row = f"S {m}x{k}x{n} {dt:8s} {nbytes / 1e6:6.1f} MB  " + "  ".join(
            f"{name} {us:6.1f}" for name, us in med.items()
        )
        row += "   err " + " ".join(f"{name} {e:.1e}" for name, e in errs.items())
        lines.append(row)
        print(row, flush=True)
        del compiled, copies
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

"""``python -m jax_tsm2.demo``: one tall-and-skinny product, the path it takes, its error.

Runs on CPU and GPU. In the default mode "auto" the router picks a TSM2 kernel
only where one is measured or predicted faster than XLA's dot, so on a GPU this
shape usually goes to XLA; the demo then runs it again in mode "prefer" to show the TSM2R
kernel. On CPU it runs XLA's dot, then once more with the custom call forced
(the CPU reference target) to show the FFI path working end to end. Each line prints
the routing decision, whether the lowered program contains the custom call,
and the largest error against a float64 NumPy product.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import jax_tsm2
from jax_tsm2 import _cli, _ffi, routing


def _platform() -> str:
    return "cuda" if jax.default_backend() == "gpu" else jax.default_backend()


def run_once(m: int, k: int, n: int, dtype=jnp.float32, seed: int = 0) -> dict:
    """Computes one product under jit; returns what happened.

    Example:
        >>> run_once(256, 64, 4)["max_rel_err"] < 1e-5
        True
    """
    rng = np.random.default_rng(seed)
    a = jnp.asarray(rng.standard_normal((m, k)), dtype)
    b = jnp.asarray(rng.standard_normal((k, n)), dtype)
    f = jax.jit(jax_tsm2.matmul)
    text = f.lower(a, b).as_text()
    decision = routing.route(
        a,
        b,
        a.dtype,
        platform=_platform(),
        mode=jax_tsm2.get_custom_call_mode(),
        cuda_targets=_ffi.cuda_targets_available(),
    )
    c = jax.block_until_ready(f(a, b))  # compile and run once
    start = time.perf_counter()
    c = jax.block_until_ready(f(a, b))
    seconds = time.perf_counter() - start
    ref = np.asarray(a, np.float64) @ np.asarray(b, np.float64)
    err = np.abs(np.asarray(c, np.float64) - ref).max() / max(np.abs(ref).max(), 1e-300)
    return {
        "shape": f"{m}x{k} @ {k}x{n} {jnp.dtype(dtype).name}",
        "route": decision.target,
        "reason": decision.reason,
        "custom_call": "stablehlo.custom_call @tsm2_matmul" in text,
        "max_rel_err": float(err),
        "seconds": seconds,
    }


def _print(result: dict, label: str) -> None:
    print(f"[{label}] {result['shape']}")
    print(f"    route: {result['route']} ({result['reason']})")
    print(f"    custom call in the lowered program: {result['custom_call']}")
    print(f"    max error vs float64 NumPy, relative to max |C|: {result['max_rel_err']:.2e}")
    print(f"    time of the second call: {result['seconds'] * 1e3:.2f} ms")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m jax_tsm2.demo", description=__doc__)
    p.add_argument(
        "--m", type=_cli.positive_int, help="rows of A (default: 2^20 on GPU, 8192 on CPU)"
    )
    p.add_argument("--k", type=_cli.positive_int, default=1024)
    p.add_argument("--n", type=_cli.positive_int, default=8)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)

    info = jax_tsm2.build_info()
    print(
        f"jax_tsm2 {jax_tsm2.__version__} | jax {jax.__version__} on {jax.default_backend()} "
        f"({jax.devices()[0].device_kind}) | CUDA targets built: {info['cuda']} | "
        f"mode: {jax_tsm2.get_custom_call_mode()}"
    )
    on_gpu = _platform() == "cuda"
    m = args.m or (1 << 20 if on_gpu else 8192)
    result = run_once(m, args.k, args.n)
    _print(result, "auto")
    # XLA's dot at the default precision may use TF32 for f32 on a GPU, as jnp.matmul does.
    ok = result["max_rel_err"] < (1e-4 if result["custom_call"] or not on_gpu else 5e-3)
    if on_gpu and not result["custom_call"]:
        with jax_tsm2.custom_call_mode("prefer"):
            kernel = run_once(m, args.k, args.n)
        _print(kernel, "prefer (the TSM2 kernel)")
        ok = ok and kernel["custom_call"] and kernel["max_rel_err"] < 1e-4
    if not on_gpu:
        # The plain-loop CPU reference target is slow: force it on a smaller product.
        with jax_tsm2.custom_call_mode("always"):
            forced = run_once(min(m, 2048), min(args.k, 256), args.n)
        _print(forced, "always (CPU reference target)")
        ok = ok and forced["custom_call"] and forced["max_rel_err"] < 1e-4
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

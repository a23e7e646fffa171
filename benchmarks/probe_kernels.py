"""Kernel-level probe: correctness sweep and timings of the raw FFI targets.

Used while developing the CUDA kernels, independent of the Python package:
it loads a CMake-built `_tsm2_ext` by path, registers its targets and calls
them through `jax.ffi.ffi_call`. `python -m jax_tsm2.bench` is the user-facing
benchmark; this is the kernel engineer's loop (build, check, time, in one call).

    python benchmarks/probe_kernels.py --ext build/dev/_tsm2_ext*.so [--check-only] [--small]
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

DT = {"f32": jnp.float32, "f64": jnp.float64, "bf16": jnp.bfloat16, "f16": jnp.float16}
TOL = {"f32": 1e-5, "f64": 1e-12, "bf16": 1e-2, "f16": 2e-3}


def load_ext(pattern: str):
    path = sorted(glob.glob(pattern))[0]
    spec = importlib.util.spec_from_file_location("_tsm2_ext", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for platform, targets in mod.registrations().items():
        for name, cap in targets.items():
            jax.ffi.register_ffi_target(name, cap, platform=platform)
    return mod


EXT = None
SM_COUNT = 132


def call(a, b, kernel, out_dtype=None):
    batch = max(a.shape[0] if a.ndim == 3 else 1, b.shape[0] if b.ndim == 3 else 1)
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    shape = (batch, m, n) if (a.ndim == 3 or b.ndim == 3) else (m, n)
    out = jax.ShapeDtypeStruct(shape, out_dtype or a.dtype)
    ws = EXT.workspace_bytes(jnp.dtype(a.dtype).name, kernel, batch, m, k, n, SM_COUNT)
    ws_out = jax.ShapeDtypeStruct((ws,), jnp.uint8)
    c, _ = jax.ffi.ffi_call("tsm2_matmul", (out, ws_out))(
        a, b, kernel=np.int32(kernel), layout=np.int32(0)
    )
    return c


def rel_err(got, ref):
    got = np.asarray(got, np.float64)
    if not np.all(np.isfinite(got)):
        return float("inf")
    den = np.linalg.norm(ref)
    return float(np.linalg.norm(got - ref) / (den if den else 1.0))


def check(rng, dtype, kernel, a_shape, b_shape, out_f32=False):
    a64 = rng.standard_normal(a_shape)
    b64 = rng.standard_normal(b_shape)
    a = jnp.asarray(a64, DT[dtype])
    b = jnp.asarray(b64, DT[dtype])
    ref = np.matmul(np.asarray(a, np.float64), np.asarray(b, np.float64))
    got = call(a, b, kernel, jnp.float32 if out_f32 else None)
    err = rel_err(got, ref)
    tol = TOL[dtype] if not out_f32 else 1e-5
    if dtype in ("bf16", "f16") and not out_f32:
        tol = TOL[dtype]
    ok = err < tol and got.shape == ref.shape
    return ok, err


def sweep(small: bool) -> int:
    rng = np.random.default_rng(0)
    cases = [
        # (kernel, a_shape, b_shape)
        (0, (1, 1), (1, 1)),
        (0, (7, 129), (129, 3)),
        (0, (257, 1000), (1000, 17)),
        (0, (130, 4099), (4099, 64)),
        (0, (70, 5000), (5000, 100)),  # n > 64: column tiles
        (0, (64, 20000), (20000, 8)),  # m small, k long: tiles split between blocks
        (0, (5, 50001), (50001, 1)),
        (0, (33, 131), (131, 5)),  # k odd: element-wise A path
        (1, (1000, 16), (16, 16)),
        (1, (100003, 8), (8, 8)),
        (1, (77, 13), (13, 5)),
        (1, (4097, 64), (64, 64)),
        (1, (999, 3), (3, 2)),
        (1, (300, 40), (40, 70)),
        (0, (3, 100, 300), (300, 7)),  # batched A, shared B
        (0, (100, 300), (4, 300, 7)),  # shared A, batched B
        (1, (5, 1000, 16), (5, 16, 9)),  # both batched
    ]
    if small:
        cases = [c for c in cases if np.prod(c[1]) < 2_000_000]
    fails = 0
    for dtype in ("f32", "f64", "bf16", "f16"):
        for kernel, sa, sb in cases:
            for out_f32 in (False, True) if dtype in ("bf16", "f16") else (False,):
                ok, err = check(rng, dtype, kernel, sa, sb, out_f32)
                fails += not ok
                if not ok or not small:
                    print(
                        f"{'ok ' if ok else 'BAD'} {dtype:4s} k{kernel} {sa}x{sb} "
                        f"out_f32={out_f32} rel_err={err:.2e}",
                        flush=True,
                    )
    # The same inputs twice must give bitwise-identical results.
    a = jnp.asarray(rng.standard_normal((3000, 30000)), jnp.float32)
    b = jnp.asarray(rng.standard_normal((30000, 16)), jnp.float32)
    r1, r2 = np.asarray(call(a, b, 0)), np.asarray(call(a, b, 0))
    det = np.array_equal(r1, r2)
    fails += not det
    print(f"{'ok ' if det else 'BAD'} deterministic repeat", flush=True)
    print(f"sweep: {fails} failures", flush=True)
    return fails


def time_fn(fn, args_list, reps=5):
    """Median seconds per call: R calls on distinct buffers inside one jit."""

    @jax.jit
    def many(*xs):
        return [fn(*x) for x in xs]

    jax.block_until_ready(many(*args_list))
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(many(*args_list))
        ts.append((time.perf_counter() - t0) / len(args_list))
    return float(np.median(ts))


def timings(only: str | None = None):
    x = jax.random.bits(jax.random.key(1), (2**30,), jnp.uint32)  # 4 GiB
    sr = jax.ffi.ffi_call("tsm2_stream_read", jax.ShapeDtypeStruct((132 * 16,), jnp.uint32))
    t = time_fn(sr, [(x,)] * 4)
    ceil = x.nbytes / t
    print(f"stream-read ceiling: {ceil / 1e9:.0f} GB/s", flush=True)
    cp = time_fn(lambda v: v + 1, [(x,)] * 4)
    print(f"copy (x+1): {2 * x.nbytes / cp / 1e9:.0f} GB/s", flush=True)
    del x
    rows = []
    cases = [("R", "f32", 20480, 20480, n) for n in (1, 2, 4, 8, 16, 32, 64)]
    cases += [("R", "f64", 20480, 20480, n) for n in (2, 8, 16)]
    cases += [("R", "bf16", 20480, 20480, n) for n in (8, 16)]
    cases += [("R", "f32", 15360, 3840, 16), ("R", "f32", 10240, 10240, 16)]
    cases += [("L", "f32", 10_000_000, kn, kn) for kn in (8, 16, 32, 64)]
    cases += [("L", "f64", 10_000_000, 16, 16), ("L", "bf16", 10_000_000, 8, 8)]
    cases += [("L", "f32", 1_000_000, 16, 16), ("L", "f32", 100_000, 16, 16)]
    for fam, dtype, m, k, n in cases:
        if only and fam != only:
            continue
        dt = DT[dtype]
        item = jnp.dtype(dt).itemsize
        nbuf = max(2, min(8, int(np.ceil(200e6 / (m * k * item)))))
        keys = jax.random.split(jax.random.key(m + k + n), 2 * nbuf)
        bufs = [
            (
                jax.random.normal(keys[2 * i], (m, k), dt),
                jax.random.normal(keys[2 * i + 1], (k, n), dt),
            )
            for i in range(nbuf)
        ]
        kern = 0 if fam == "R" else 1
        t_ours = time_fn(lambda a, b, kern=kern: call(a, b, kern), bufs)
        t_xla = time_fn(lambda a, b: jnp.matmul(a, b, precision="highest"), bufs)
        t_def = time_fn(lambda a, b: jnp.matmul(a, b), bufs)
        nbytes = (m * k + k * n + m * n) * item
        rows.append((fam, dtype, m, k, n, t_ours, nbytes / t_ours / ceil, t_xla, t_def))
        print(
            f"{fam} {dtype:4s} {m:>9d} {k:>6d} {n:>3d}  ours {t_ours * 1e6:9.1f} us "
            f"{nbytes / t_ours / 1e9:6.0f} GB/s {100 * nbytes / t_ours / ceil:5.1f}%  "
            f"xla-highest {t_xla * 1e6:9.1f} us  xla-default {t_def * 1e6:9.1f} us",
            flush=True,
        )
        del bufs
    return rows


def error_path(which: str) -> None:
    """Makes the CUDA handler return an ffi::Error; the caller checks that
    Python sees an exception rather than the process dying."""
    a = jnp.ones((8, 16), jnp.float32)
    b = jnp.ones((16, 4), jnp.float32)
    try:
        if which == "bad-result-dtype":
            out = jax.ShapeDtypeStruct((4,), jnp.float32)
            jax.block_until_ready(jax.ffi.ffi_call("tsm2_stream_read", out)(a))
        else:  # result shape that does not match the operands
            ws = jax.ShapeDtypeStruct((0,), jnp.uint8)
            outs = (jax.ShapeDtypeStruct((8, 5), jnp.float32), ws)
            jax.block_until_ready(jax.ffi.ffi_call("tsm2_matmul", outs)(a, b, kernel=np.int32(0)))
        print(f"error-path {which}: NO ERROR RAISED")
    except Exception as e:
        print(f"error-path {which}: raised {type(e).__name__}: {str(e)[:160]}")


def profile_cases() -> None:
    """One launch of each headline case, for ncu (which replays the kernel)."""
    for kern, m, k, n in ((0, 20480, 20480, 16), (1, 10_000_000, 16, 16)):
        a = jax.random.normal(jax.random.key(0), (m, k), jnp.float32)
        b = jax.random.normal(jax.random.key(1), (k, n), jnp.float32)
        jax.block_until_ready(call(a, b, kern))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ext", default="build/dev/_tsm2_ext*.so")
    ap.add_argument("--check-only", action="store_true")
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--error-path", default=None)
    ap.add_argument("--only", default=None, help="time one family only (R or L)")
    ap.add_argument("--profile", action="store_true", help="one launch per case, for ncu")
    args = ap.parse_args()
    global EXT
    mod = EXT = load_ext(args.ext)
    if args.error_path:
        error_path(args.error_path)
        return 0
    if args.profile:
        profile_cases()
        return 0
    print(mod.build_info(), jax.devices(), flush=True)
    fails = sweep(args.small)
    if not args.check_only:
        timings(args.only)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

"""cuBLAS's TF32 time on the ABFT benchmark's product (8192^3 f32), beside the GEMM lab.

The lab is ``benchmarks/lab/abft_gemm_lab.cu`` (a CUTLASS TF32 GEMM with the checksums in its
epilogue; docs/abft.md).

torch's ``matmul`` with TF32 allowed (CUDA events around each call), then ``jnp.matmul`` at
default precision (host clock around a blocking call, so it carries the dispatch too). Run on
the GPU machine right after the lab binary: ``python3 benchmarks/abft_gemm_peers.py``.
"""

import time

import jax
import jax.numpy as jnp
import numpy as np
import torch

N, REPS = 8192, 21


def report(name: str, us: list[float]) -> None:
    us = sorted(us)
    print(f"{name:<30} {us[len(us) // 2]:9.1f} us  min {us[0]:.1f} max {us[-1]:.1f}")


def main() -> None:
    torch.backends.cuda.matmul.allow_tf32 = True
    a = torch.randn(N, N, device="cuda")
    b = torch.randn(N, N, device="cuda")
    for _ in range(3):
        torch.matmul(a, b)
    torch.cuda.synchronize()
    us = []
    for _ in range(REPS):
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        e0.record()
        torch.matmul(a, b)
        e1.record()
        e1.synchronize()
        us.append(e0.elapsed_time(e1) * 1000)
    report("torch tf32 matmul", us)

    rng = np.random.default_rng(0)
    ja = jnp.asarray(rng.random((N, N), np.float32))
    jb = jnp.asarray(rng.random((N, N), np.float32))
    f = jax.jit(jnp.matmul)
    f(ja, jb).block_until_ready()
    us = []
    for _ in range(REPS):
        t0 = time.perf_counter()
        f(ja, jb).block_until_ready()
        us.append((time.perf_counter() - t0) * 1e6)
    report("jnp.matmul (host clock)", us)


if __name__ == "__main__":
    main()

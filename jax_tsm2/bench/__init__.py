"""Benchmark harness of jax_tsm2: ``python -m jax_tsm2.bench`` (docs/harness.md).

Times ``jax_tsm2.matmul`` against ``jnp.matmul`` (default and highest precision) and cuBLAS
through ``torch.matmul`` on the benchmark suite (docs/benchmarking.md), against a
read-bandwidth ceiling measured in the same run, and writes JSON, markdown and a roofline plot.

JAX and torch share one GPU here, so JAX must not preallocate most of its memory. The variable
is read when JAX creates its GPU client (first use of a device), not at ``import jax``, so
setting it here works as long as nothing used the GPU before this package was imported; set it
in the environment to be sure.
"""

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

from jax_tsm2.bench.cli import main
from jax_tsm2.bench.runner import Options, run_suite

__all__ = ["Options", "main", "run_suite"]

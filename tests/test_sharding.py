"""Sharding: the primitive's factor rule and result types, sharded products on 4 CPU devices,
and a two-process ``jax.distributed`` run on one machine.

The multi-device cases need ``--xla_force_host_platform_device_count``, which must be set before
jax starts; this process's jax is already running (conftest), so, as in test_kmeans.py, they run
in subprocesses: ``tests/sharded_cases.py`` under pytest with 4 CPU devices, and
``tests/_distributed_worker.py`` as two processes started by ``python -m jax_tsm2.launch`` and
joined by ``jax.distributed.initialize`` (coordinator on localhost, gloo for the CPU
collectives).
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import package_env, run_python
from jax.core import ShapedArray

import jax_tsm2
from jax_tsm2 import sharding

TESTS = Path(__file__).parent
F64 = np.dtype("float64")


def _env(n_devices: int) -> dict[str, str]:
    env = package_env()
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={n_devices}"
    ).strip()
    env["JAX_PLATFORMS"] = "cpu"
    env.pop("JAX_TSM2_CUSTOM_CALL", None)
    return env


# ------------------------------------------------------------ in this process (one device)


@pytest.mark.parametrize(
    "a_shape, b_shape, rule",
    [
        ((6, 4), (4, 2), ("m k, k n -> m n",)),
        ((3, 6, 4), (4, 2), ("b m k, k n -> b m n",)),
        ((6, 4), (3, 4, 2), ("m k, b k n -> b m n",)),
        ((3, 6, 4), (3, 4, 2), ("b m k, b k n -> b m n",)),
        ((3, 6, 4), (1, 4, 2), ("b m k, p k n -> b m n", "p")),
        ((1, 6, 4), (3, 4, 2), ("o m k, b k n -> b m n", "o")),
        ((1, 6, 4), (1, 4, 2), ("b m k, b k n -> b m n",)),
    ],
)
def test_factor_rule(a_shape, b_shape, rule):
    assert sharding.factor_rule(a_shape, b_shape) == rule


@pytest.mark.parametrize(
    "a_shape, b_shape, layout, rule",
    [
        ((6, 4), (2, 4), "nt", ("m k, n k -> m n",)),
        ((4, 6), (4, 2), "tn", ("k m, k n -> m n",)),
        ((3, 6, 4), (3, 2, 4), "nt", ("b m k, b n k -> b m n",)),
        ((3, 4, 6), (4, 2), "tn", ("b k m, k n -> b m n",)),
        ((1, 4, 6), (3, 4, 2), "tn", ("o k m, b k n -> b m n", "o")),
        ((3, 6, 4), (1, 2, 4), "nt", ("b m k, p n k -> b m n", "p")),
    ],
)
def test_factor_rule_of_layouts(a_shape, b_shape, layout, rule):
    assert sharding.factor_rule(a_shape, b_shape, layout) == rule


def test_result_aval_without_mesh_is_plain():
    out = sharding.result_aval(ShapedArray((6, 4), F64), ShapedArray((4, 2), F64), (6, 2), F64)
    assert out == ShapedArray((6, 2), F64)


def test_one_device_lowers_directly():
    a, b = jnp.ones((8, 4)), jnp.ones((4, 2))
    with jax_tsm2.custom_call_mode("always"):
        text = jax.jit(jax_tsm2.matmul).lower(a, b).as_text()
    assert "CustomSPMDPartitioning" not in text and "tsm2_matmul" in text


# ------------------------------------------------------------ 4 CPU devices, in a subprocess


def test_sharded_cases_on_4_cpu_devices():
    """Runs tests/sharded_cases.py (row, contraction, batch, column, 2-D mesh, grad, shard_map,
    GSPMD, Explicit axes, vmap; layouts nt and tn) with 4 host devices; its report is printed
    on failure."""
    args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfEs"]
    r = run_python([*args, str(TESTS / "sharded_cases.py")], env=_env(4), timeout=600)
    report = r.stdout[-20000:] + r.stderr[-5000:]
    assert r.returncode == 0, report
    assert " passed" in r.stdout and "skipped" not in r.stdout, report


# ------------------------------------------------------------ two processes, jax.distributed


@pytest.mark.slow
def test_two_processes_jax_distributed():
    """Two processes x 2 CPU devices started by ``python -m jax_tsm2.launch``: a row-sharded
    matmul (XLA's dot and the custom call per shard) and k-means with ``axis_name`` across
    both, equal to one-process results."""
    worker = str(TESTS / "_distributed_worker.py")
    launch = ["-m", "jax_tsm2.launch", "--nproc", "2", "--timeout", "240"]
    r = run_python([*launch, "--", sys.executable, worker], env=_env(2), timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-5000:]
    for rank in (0, 1):
        for check in ("ok matmul-auto", "ok matmul-always", "ok kmeans"):
            assert f"[{rank}] {check}" in out, out[-5000:]

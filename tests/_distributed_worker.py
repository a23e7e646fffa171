"""One process of the two-process ``jax.distributed`` test (tests/test_sharding.py runs it).

Usage: ``python -m jax_tsm2.launch --nproc 2 -- python tests/_distributed_worker.py`` with
``XLA_FLAGS=--xla_force_host_platform_device_count=2`` set, so that the
processes together hold ``2 * NUM_PROCESSES`` CPU devices. The launcher gives each process
the coordinator, the number of processes and its id; ``jax_tsm2.launch.initialize`` passes
them to ``jax.distributed.initialize``. Cross-process CPU collectives go through gloo over
TCP (jax's default CPU collectives once ``jax.distributed`` is initialised; set explicitly
below).

Each process builds the same global data from a fixed seed, computes on a mesh
spanning every process's devices and compares with a float64 NumPy reference
(the matmul) or an unsharded run on its own first device (k-means). It prints
``ok <name>`` per passed check; the parent test looks for those lines.
"""

from __future__ import annotations

import os
from functools import partial

import jax
import numpy as np

import jax_tsm2.launch

NPROC = int(os.environ[jax_tsm2.launch.ENV_NUM_PROCESSES])
jax.config.update("jax_enable_x64", True)
jax.config.update("jax_cpu_collectives_implementation", "gloo")
if not jax_tsm2.launch.initialize(initialization_timeout=60):
    raise SystemExit("run me through python -m jax_tsm2.launch")

import jax.numpy as jnp  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import jax_tsm2  # noqa: E402
from jax_tsm2.clustering import kmeans  # noqa: E402

n_dev = jax.device_count()
assert jax.process_count() == NPROC and n_dev == 2 * NPROC, (jax.process_count(), jax.devices())
mesh = jax.make_mesh((n_dev,), ("p",), axis_types=(AxisType.Auto,))
rng = np.random.default_rng(0)


def global_array(x: np.ndarray, spec: P) -> jax.Array:
    s = NamedSharding(mesh, spec)
    return jax.make_array_from_callback(x.shape, s, lambda idx: x[idx])


# ---- a row-sharded product across processes, XLA's dot and the custom call per shard
a = rng.normal(size=(n_dev * 37, 52))
b = rng.normal(size=(52, 6))
ref = a @ b
for mode in ("auto", "always"):
    with jax_tsm2.custom_call_mode(mode):
        f = jax.jit(jax_tsm2.matmul)
        ga, gb = global_array(a, P("p")), global_array(b, P())
        c = f(ga, gb)
        hlo = f.lower(ga, gb).compile().as_text()
    assert c.sharding.spec == P("p"), c.sharding
    assert "all-gather" not in hlo, hlo
    assert (mode == "always") == ('custom_call_target="tsm2_matmul"' in hlo), mode
    full = np.asarray(multihost_utils.process_allgather(c, tiled=True))
    np.testing.assert_allclose(full, ref, rtol=1e-12, atol=1e-12)
    print(f"ok matmul-{mode}", flush=True)

# ---- k-means with axis_name: the points sharded over every device of every process
centers = rng.normal(scale=4, size=(5, 6))
x = centers[rng.integers(0, 5, n_dev * 250)] + rng.normal(size=(n_dev * 250, 6))
init = x[:5].copy()
key = jax.random.key(3)
one = kmeans(key, x, 5, init=init)  # unsharded, on this process's first device


@jax.jit
@partial(jax.shard_map, mesh=mesh, in_specs=P("p"), out_specs=(P(), P("p"), P(), P()))
def sharded(xs):
    s = kmeans(key, xs, 5, init=init, axis_name="p")
    return s.centroids, s.labels, s.inertia, s.n_iter


cent, labels, inertia, n_iter = sharded(global_array(x, P("p")))
np.testing.assert_allclose(np.asarray(cent), np.asarray(one.centroids), rtol=1e-9)
np.testing.assert_allclose(float(inertia), float(one.inertia), rtol=1e-9)
assert int(n_iter) == int(one.n_iter), (int(n_iter), int(one.n_iter))
all_labels = np.asarray(multihost_utils.process_allgather(labels, tiled=True))
np.testing.assert_array_equal(all_labels, np.asarray(one.labels))
print("ok kmeans", int(n_iter), float(inertia), flush=True)
assert jnp.isfinite(inertia)
jax.distributed.shutdown()

"""The fused Lloyd step: one pass over the data per k-means iteration.

The FFI target ``tsm2_kmeans_step`` (``ffi/kmeans/kernels/kmeans.cuh``) reads ``x``
``(n, d)`` once and returns, against centroids ``c`` ``(k, d)`` with row
weights ``w`` ``(n,)``:

* ``labels``: the closest centroid of each row (lowest index on ties, NaN
  first, as ``jnp.argmin``);
* ``mind``: that squared distance, ``max((||x||^2 - 2 x.c) + ||c||^2, 0)``;
* ``sums`` ``(k, d)``: ``sum(w * x)`` over each cluster's rows, and
  ``counts`` ``(k,)``: ``sum(w)`` over them;
* ``inertia``: ``sum(w * mind)``.

Everything accumulates in f32 for f32, bf16 and f16 data and in f64 for f64;
the centroids are rounded to ``x``'s dtype first, as the jnp path's product
does. The unfused path reads ``x`` two to four times (the distance product,
then the one-hot product for the sums).

The kernel loads rows of ``x`` straight into registers (one warp, or several,
per row), keeps the centroids and the per-cluster sums in shared memory, and
for large ``d`` splits each row over the blocks of a thread-block cluster so
that both fit on chip (``_ffi.kmeans_plan`` shows the plan of a shape).

:func:`decide_step` decides where the kernel runs (a ``jax_tsm2.decision.Decision``,
which ``jax_tsm2.explain.kmeans_step`` shows) and :func:`step` follows it. With
``impl="auto"``:

* on CUDA, the kernel when it takes the shape (``fused_supported``: d <= 4096,
  k <= 32; f64 with d > 2048 takes k <= 16) and the custom-call mode (``jax_tsm2.config``) is
  ``"prefer"`` or ``"always"``, or is ``"auto"`` and the kernel measured faster than the
  unfused path for such shapes (``auto_prefers_kernel``: k <= 16, or d <= 256);
* on CPU, the plain-loop reference target only in mode ``"always"`` (as for
  ``matmul``: it exists so that tests can run the FFI path without a GPU; it
  takes any d and k);
* otherwise the caller's jnp ``fallback``.

CPU and CUDA are told apart at lowering time (``lax.platform_dependent``), so a
function traced once lowers correctly for either; the mode is read at trace
time (it is part of jit's cache key). Under ``vmap`` the FFI call runs once
per batch element (``vmap_method="sequential"``), each one pass over ``x``.
The call has no derivative.

:func:`update` ends an iteration on CUDA (:func:`decide_update`): ``tsm2_kmeans_update``
(``ffi/kmeans/kernels/kmeans_update.cuh``) divides the sums by the counts and applies
the empty-cluster rule without leaving the device (a ``lax.cond`` makes XLA's
GPU runtime read its predicate on the host every iteration).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_tsm2 import _compat, _ffi, config
from jax_tsm2.decision import Decision

__all__ = [
    "IMPLS",
    "LloydStep",
    "auto_prefers_kernel",
    "decide_step",
    "decide_update",
    "ffi_step",
    "ffi_update",
    "fused_supported",
    "step",
    "update",
]

IMPLS = ("auto", "ffi", "jnp")


class LloydStep(NamedTuple):
    """What one Lloyd iteration needs from a pass over the data (see the module docstring).

    Attributes:
      labels: ``(n,)`` int32 closest centroid.
      mind: ``(n,)`` squared distance to it, in the accumulation dtype.
      sums: ``(k, d)`` weighted sum of each cluster's rows.
      counts: ``(k,)`` total weight of each cluster.
      inertia: weighted sum of ``mind``.
    """

    labels: jax.Array
    mind: jax.Array
    sums: jax.Array
    counts: jax.Array
    inertia: jax.Array


def acc_dtype(dtype: Any) -> np.dtype:
    """Accumulation dtype of the step: f32 for bf16/f16, the dtype itself otherwise."""
    dtype = jnp.dtype(dtype)
    if dtype in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16)):
        return jnp.dtype(jnp.float32)
    return dtype


_KERNEL_DTYPES = tuple(jnp.dtype(t) for t in (jnp.float32, jnp.float64, jnp.bfloat16, jnp.float16))


def auto_prefers_kernel(d: int, k: int) -> bool:
    """Whether mode ``"auto"`` runs the kernel on a shape it takes: where it measured faster.

    Measured on an H100 (``benchmarks/kmeans_iter.py``), the kernel's step against a
    whole unfused iteration: 0.49
    against 1.19 ms (f32, n = 1e6, d = 256, k = 16, tensor cores), 0.58
    against 1.36 (bf16, same), 0.62 against 1.57 (f32, d = 1024), 3.54 against
    5.93 (f32, n = 2.5e5, d = 4096), 0.69 (kernel lab) against 1.75 (f32,
    d = 256, k = 32, tensor cores). With 32 centroid slots and wider
    rows the kernel ran at 7 to 9 reads of X (kernel lab), worse than the
    unfused path's 4 to 5, so there auto keeps the unfused path.

    Example:
      >>> auto_prefers_kernel(256, 16), auto_prefers_kernel(1024, 32)
      (True, False)
    """
    return k <= 16 or d <= 256


def fused_supported(dtype: Any, d: int, k: int) -> bool:
    """Whether the CUDA kernel takes ``(n, d)`` data of ``dtype`` with ``k`` clusters.

    Example:
      >>> fused_supported("float32", 256, 16), fused_supported("float32", 4096, 16)
      (True, True)
      >>> fused_supported("float32", 4097, 16), fused_supported("float64", 4096, 32)
      (False, False)
    """
    if jnp.dtype(dtype) not in _KERNEL_DTYPES or d < 1 or k < 1:
        return False
    return bool(_ffi.kmeans_plan(dtype, 0, d, k)["supported"])


def ffi_step(x: jax.Array, c: jax.Array, w: jax.Array, *, check: bool = True) -> LloydStep:
    """The ``tsm2_kmeans_step`` FFI call.

    ``x`` is ``(n, d)`` float, ``c`` ``(k, d)`` (cast to ``x.dtype``), ``w``
    ``(n,)`` (cast to the accumulation dtype). With ``check`` (the default) a
    shape the CUDA kernel does not take is a ``ValueError`` here, at trace
    time, whatever the platform: an error returned by a CUDA FFI handler has
    crashed the process under jax 0.11. The CPU
    reference takes any shape (``check=False``).
    """
    n, d = x.shape
    k = c.shape[0]
    if check and not fused_supported(x.dtype, d, k):
        raise ValueError(
            f"tsm2_kmeans_step: the fused kernel does not take x {x.dtype}{list(x.shape)} with "
            f"k={k} (it takes 1 <= k <= 32 and 1 <= d <= 4096, fewer for float64; "
            "jax_tsm2.clustering.fused.fused_supported says which); use impl='auto' or 'jnp'"
        )
    acc = acc_dtype(x.dtype)
    c = c.astype(x.dtype)
    w = w.astype(acc)
    workspace = _ffi.kmeans_plan(x.dtype, n, d, k)["workspace_bytes"]
    # Under shard_map the results vary over the axes the operands vary over.
    x, c, w = _compat.match_varying(x, c, w)
    out = lambda shape, dtype: _compat.shape_dtype_struct(shape, dtype, x)
    call = jax.ffi.ffi_call(
        _ffi.KMEANS_TARGET,
        (
            out((n,), jnp.int32),
            out((n,), acc),
            out((k, d), acc),
            out((k,), acc),
            out((), acc),
            out((workspace,), jnp.uint8),
        ),
        vmap_method="sequential",
    )
    labels, mind, sums, counts, inertia, _ = call(x, c, w)
    return LloydStep(labels, mind, sums, counts, inertia)


Fallback = Callable[[jax.Array, jax.Array, jax.Array], LloydStep]


def decide_step(dtype: Any, d: int, k: int, *, platform: str, mode: str | None = None) -> Decision:
    """Whether one Lloyd step on ``(n, d)`` data of ``dtype`` with ``k`` centroids runs the
    fused kernel (``target="fused"``) or the unfused jnp path (``"jnp"``) on ``platform``.

    ``mode`` defaults to the custom-call mode in effect (module docstring for the rules).

    Example:
        >>> d = decide_step("float32", 256, 16, platform="cuda", mode="auto")
        >>> d.target, d.layer
        ('fused', 'measured')
        >>> decide_step("float32", 1024, 32, platform="cuda", mode="auto").target
        'jnp'
        >>> decide_step("float32", 1024, 32, platform="cpu", mode="always").target
        'fused'
    """
    mode = config.check_mode(config.get_custom_call_mode() if mode is None else mode, "decide")
    shape = f"d={d}, k={k}"
    decision = lambda target, reason, layer="rules": Decision(
        op="kmeans_step", target=target, reason=reason, layer=layer, platform=platform
    )
    if mode == "never":
        return decision("jnp", "mode 'never'")
    if platform == "cpu":
        if mode == "always":
            return decision("fused", "mode 'always' on CPU: the reference target")
        return decision("jnp", "on CPU the jnp path runs (mode 'always' forces the reference)")
    if platform != "cuda":
        return decision("jnp", f"no fused target for platform {platform!r}")
    # Without a CUDA device this is cross-platform lowering (export): emit the call if the
    # kernel takes the shape. With one, the target must be built.
    if not _ffi.cuda_kernels_usable(_ffi.cuda_kmeans_available()):
        return decision("jnp", "this build of jax_tsm2 has no k-means kernel for this GPU")
    if not fused_supported(dtype, d, k):
        return decision("jnp", f"{shape}: the fused kernel does not take the shape")
    if mode != "auto":
        return decision("fused", f"{shape}: mode {mode!r} runs the fused kernel where it can")
    if auto_prefers_kernel(d, k):
        why = "the fused kernel measured faster than the unfused path for k <= 16 or d <= 256"
        return decision("fused", f"{shape}: {why}", "measured")
    why = "the unfused path measured faster for k > 16 with d > 256"
    return decision("jnp", f"{shape}: {why}", "measured")


def step(
    x: jax.Array, c: jax.Array, w: jax.Array, *, fallback: Fallback, impl: str = "auto"
) -> LloydStep:
    """One pass over ``x``: the FFI step where it applies (``decide_step``), else ``fallback``.

    ``fallback(x, c, w)`` must return a :class:`LloydStep` with the same
    shapes and dtypes (the jnp path, ``jax_tsm2.clustering.core``).
    """
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    if impl == "jnp":
        return fallback(x, c, w)
    if impl == "ffi":
        return ffi_step(x, c, w)
    shape = (x.dtype, x.shape[1], c.shape[0])
    on_cuda = decide_step(*shape, platform="cuda").target == "fused"
    on_cpu = decide_step(*shape, platform="cpu").target == "fused"
    if not (on_cuda or on_cpu):
        return fallback(x, c, w)
    return lax.platform_dependent(
        x,
        c,
        w,
        cpu=functools.partial(ffi_step, check=False) if on_cpu else fallback,
        cuda=ffi_step if on_cuda else fallback,
        default=fallback,
    )


def ffi_update(
    sums: jax.Array,
    counts: jax.Array,
    x: jax.Array,
    w: jax.Array,
    labels: jax.Array,
    mind: jax.Array,
    c_old: jax.Array,
) -> jax.Array:
    """The ``tsm2_kmeans_update`` FFI call (CUDA only): the centroids that end an iteration.

    ``sums / counts`` per cluster (``c_old`` where the count is not positive),
    after scikit-learn's empty-cluster rule as ``core._new_centroids_jnp``
    writes it (same arguments, same order): the r-th empty cluster takes the
    r-th point farthest from its centroid (``mind``, ``lax.top_k``'s order),
    which leaves its own cluster. The check for an empty cluster runs on the
    device, so an iteration has no host round trip (a ``lax.cond`` has one on
    GPUs); the rule's pass over ``mind`` runs only when a cluster is empty
    (``ffi/kmeans/kernels/kmeans_update.cuh``).

    ``x`` is ``(n, d)`` in its own dtype, the other floats in its accumulation
    dtype (cast here), ``labels`` int32.
    """
    k, d = c_old.shape
    acc = acc_dtype(x.dtype)
    sums, counts, c_old, mind, w = (a.astype(acc) for a in (sums, counts, c_old, mind, w))
    labels = labels.astype(jnp.int32)
    workspace = _ffi.kmeans_plan(x.dtype, 0, max(d, 1), k)["update_workspace_bytes"]
    # Under shard_map (each shard its own k-means) the result varies like x.
    args = _compat.match_varying(sums, counts, c_old, mind, x, w, labels)  # the target's order
    out = lambda shape, dtype: _compat.shape_dtype_struct(shape, dtype, args[4])
    call = jax.ffi.ffi_call(
        _ffi.KMEANS_UPDATE_TARGET,
        (out((k, d), acc), out((workspace,), jnp.uint8)),
        vmap_method="sequential",
    )
    c_new, _ = call(*args)
    return c_new


def decide_update(dtype: Any, n: int, *, platform: str, mode: str | None = None) -> Decision:
    """Whether the centroid update that ends an iteration on ``(n, d)`` data of ``dtype`` runs
    the ``tsm2_kmeans_update`` kernel (``target="kernel"``) or the jnp rule (``"jnp"``).

    Example:
        >>> decide_update("float32", 1000, platform="cuda", mode="auto").target
        'kernel'
        >>> decide_update("float32", 1000, platform="cpu", mode="always").target
        'jnp'
    """
    mode = config.check_mode(config.get_custom_call_mode() if mode is None else mode, "decide")
    decision = lambda target, reason: Decision(
        op="kmeans_update", target=target, reason=reason, platform=platform
    )
    if mode == "never":
        return decision("jnp", "mode 'never'")
    if platform != "cuda":
        return decision("jnp", "the jnp rule off CUDA (its lax.cond costs nothing there)")
    if not _ffi.cuda_kernels_usable(_ffi.cuda_kmeans_update_available()):
        return decision("jnp", "this build of jax_tsm2 has no k-means update kernel for this GPU")
    if jnp.dtype(dtype) not in _KERNEL_DTYPES or n == 0:
        return decision("jnp", f"{jnp.dtype(dtype).name} data of {n} rows: not the kernel's")
    # Every mode but 'never': the kernel keeps the empty-cluster check on the device.
    return decision("kernel", "on CUDA the update stays on the device (no host round trip)")


def update(*args: jax.Array, fallback: Callable[..., jax.Array]) -> jax.Array:
    """New centroids: :func:`ffi_update` on CUDA, ``fallback`` elsewhere (both take ``args``),
    as ``decide_update`` says."""
    x = args[2]
    if decide_update(x.dtype, x.shape[0], platform="cuda").target != "kernel":
        return fallback(*args)
    return lax.platform_dependent(*args, cuda=ffi_update, default=fallback)

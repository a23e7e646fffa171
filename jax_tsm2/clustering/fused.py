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

:func:`decide_step` decides which implementation runs (a
``jax_tsm2.decision.Decision``, which ``jax_tsm2.explain.kmeans_step`` shows) and
:func:`step` follows it. With ``impl="auto"``:

* on CUDA, in every custom-call mode but ``"never"``, the kernel :func:`kernel_for`
  names: this fused kernel where it takes the shape (``fused_supported``: d <= 4096,
  k <= 32; f64 with d > 2048 takes k <= 16) and measured faster than the unfused path
  (``auto_prefers_kernel``: k <= 16, or d <= 256); elsewhere the tiled assignment and
  sums (``jax_tsm2.clustering.tiled``: any k and d, f32/bf16/f16, two passes over
  ``x``); this kernel again where only it takes the shape (f64);
* on CPU, that kernel's plain-loop reference target only in mode ``"always"`` (as for
  ``matmul``: it exists so that tests can run the FFI path without a GPU);
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
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from jax_tsm2 import _compat, _ffi, config
from jax_tsm2.clustering import tiled
from jax_tsm2.clustering.step_result import LloydStep, acc_dtype
from jax_tsm2.decision import Decision

__all__ = [
    "IMPLS",
    "LloydStep",
    "acc_dtype",
    "assign",
    "auto_prefers_kernel",
    "decide_step",
    "decide_update",
    "ffi_step",
    "ffi_step_checked",
    "ffi_update",
    "fused_supported",
    "kernel_for",
    "step",
    "step_checked",
    "update",
]

IMPLS = ("auto", "ffi", "jnp")


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


def ffi_step_checked(
    x: jax.Array,
    c: jax.Array,
    w: jax.Array,
    inject: jax.Array | None = None,
    *,
    check: bool = True,
) -> tuple[LloydStep, jax.Array, jax.Array]:
    """The ``tsm2_kmeans_step_checked`` FFI call: :func:`ffi_step` with the kernel's per-row
    distance check, ``(step, row_faults, row_margin)``.

    For every row the kernel adds the row's ``k`` distances (before the clamp at 0) and
    compares the sum with ``k ||x||^2 - 2 x . s + sum_j ||c_j||^2``, ``s = sum_j c_j``, from
    one more dot per row (``ffi/kmeans/row_check.h`` derives the threshold).
    ``row_faults`` (int32) counts the rows that differ by more than it, ``row_margin``
    (float32) is the worst ratio of a row's difference to its threshold.

    ``inject`` (int32 ``(4,)``: active, row, centroid, bit) calls
    ``tsm2_kmeans_step_checked_inject`` instead, which flips that bit of that row's
    distance to that centroid before the check and the argmin where ``active`` is not 0,
    for tests and fault campaigns (traced: a campaign compiles once).
    """
    n, d = x.shape
    k = c.shape[0]
    if check and not fused_supported(x.dtype, d, k):
        ffi_step(x, c, w)  # raises, naming the shape
    acc = acc_dtype(x.dtype)
    c = c.astype(x.dtype)
    w = w.astype(acc)
    workspace = _ffi.kmeans_plan(x.dtype, n, d, k)["workspace_bytes"]
    operands = (x, c, w) if inject is None else (x, c, w, jnp.asarray(inject, jnp.int32))
    operands = _compat.match_varying(*operands)
    out = lambda shape, dtype: _compat.shape_dtype_struct(shape, dtype, operands[0])
    target = _ffi.KMEANS_CHECKED_TARGET if inject is None else _ffi.KMEANS_INJECT_TARGET
    call = jax.ffi.ffi_call(
        target,
        (
            out((n,), jnp.int32),
            out((n,), acc),
            out((k, d), acc),
            out((k,), acc),
            out((), acc),
            out((), jnp.int32),
            out((), jnp.float32),
            out((workspace,), jnp.uint8),
        ),
        vmap_method="sequential",
    )
    labels, mind, sums, counts, inertia, faults, margin, _ = call(*operands)
    return LloydStep(labels, mind, sums, counts, inertia), faults, margin


Fallback = Callable[[jax.Array, jax.Array, jax.Array], LloydStep]

# What decide_step's targets run: the fused kernel (ffi_step) or the tiled assignment and
# sums (tiled.ffi_step).
TARGETS = ("fused", "tiled", "jnp")


def kernel_for(dtype: Any, d: int, k: int) -> str | None:
    """The kernel that serves ``(n, d)`` data of ``dtype`` with ``k`` clusters best:
    ``"fused"`` (one pass, ``k <= 32``) where it takes the shape and measured faster than
    the unfused path (``auto_prefers_kernel``), else ``"tiled"`` (``jax_tsm2.clustering.
    tiled``: any k and d, f32/bf16/f16), else ``"fused"`` where it takes the shape, else
    None.

    Example:
        >>> kernel_for("float32", 256, 16), kernel_for("float32", 256, 1024)
        ('fused', 'tiled')
        >>> kernel_for("float32", 1024, 32), kernel_for("float64", 1024, 32)
        ('tiled', 'fused')
        >>> kernel_for("float64", 64, 1000) is None
        True
    """
    fused = fused_supported(dtype, d, k)
    if fused and auto_prefers_kernel(d, k):
        return "fused"
    if tiled.step_supported(dtype, d, k):
        return "tiled"
    return "fused" if fused else None


def decide_step(dtype: Any, d: int, k: int, *, platform: str, mode: str | None = None) -> Decision:
    """Whether one Lloyd step on ``(n, d)`` data of ``dtype`` with ``k`` centroids runs the
    fused kernel (``target="fused"``), the tiled assignment and sums (``"tiled"``) or the
    unfused jnp path (``"jnp"``) on ``platform``.

    ``mode`` defaults to the custom-call mode in effect. On CUDA every mode but
    ``"never"`` runs the kernel :func:`kernel_for` names; on CPU mode ``"always"`` runs
    that kernel's reference target (the fused step's, which takes any shape, where no
    kernel takes it).

    Example:
        >>> d = decide_step("float32", 256, 16, platform="cuda", mode="auto")
        >>> d.target, d.layer
        ('fused', 'measured')
        >>> decide_step("float32", 1024, 32, platform="cuda", mode="auto").target
        'tiled'
        >>> decide_step("float32", 1024, 32, platform="cpu", mode="always").target
        'tiled'
    """
    mode = config.check_mode(config.get_custom_call_mode() if mode is None else mode, "decide")
    shape = f"d={d}, k={k}"
    decision = lambda target, reason, layer="rules": Decision(
        op="kmeans_step", target=target, reason=reason, layer=layer, platform=platform
    )
    if mode == "never":
        return decision("jnp", "mode 'never'")
    kernel = kernel_for(dtype, d, k)
    if platform == "cpu":
        if mode == "always":
            ref = kernel or "fused"
            return decision(
                ref, f"{shape}: mode 'always' on CPU: the {ref} step's reference target"
            )
        return decision("jnp", "on CPU the jnp path runs (mode 'always' forces the reference)")
    if platform != "cuda":
        return decision("jnp", f"no fused target for platform {platform!r}")
    if kernel is None:
        return decision(
            "jnp", f"{shape}: no kernel takes {jnp.dtype(dtype).name} data of this shape"
        )
    # Without a CUDA device this is cross-platform lowering (export): emit the call if the
    # kernel takes the shape. With one, the target must be built.
    built = (
        _ffi.cuda_kmeans_available() if kernel == "fused" else _ffi.cuda_kmeans_tiled_available()
    )
    if not _ffi.cuda_kernels_usable(built):
        return decision(
            "jnp", f"this build of jax_tsm2 has no k-means {kernel} kernel for this GPU"
        )
    if kernel == "fused":
        if mode != "auto":
            return decision(
                "fused", f"{shape}: mode {mode!r} runs the kernel that serves the shape"
            )
        why = "the fused kernel measured faster than the unfused path for k <= 16 or d <= 256"
        return decision("fused", f"{shape}: {why}", "measured")
    why = (
        "the tiled assignment and sums read x twice and never write the n x k distances; "
        "the jnp path writes and reads them and adds the sums by a k x n x d one-hot product"
    )
    return decision("tiled", f"{shape}: {why}")


def _kernel_step(kernel: str, x_sq: jax.Array, precision: str, check: bool):
    """``(x, c, w) -> LloydStep`` through ``kernel`` (``"fused"`` or ``"tiled"``)."""
    if kernel == "tiled":
        return lambda x, c, w: tiled.ffi_step(x, x_sq, c, w, precision=precision, check=check)
    return functools.partial(ffi_step, check=check)


def step(
    x: jax.Array,
    c: jax.Array,
    w: jax.Array,
    *,
    fallback: Fallback,
    impl: str = "auto",
    x_sq: jax.Array | None = None,
    precision: str = "float32",
) -> LloydStep:
    """One pass over ``x``: a kernel where it applies (``decide_step``), else ``fallback``.

    ``fallback(x, c, w)`` must return a :class:`LloydStep` with the same shapes and dtypes
    (the jnp path, ``jax_tsm2.clustering.core``). ``x_sq`` (``||x||^2`` per row, computed
    here if None) feeds the tiled assignment; ``precision`` its f32 products
    (``tiled.PRECISIONS``). ``impl="ffi"`` forces the kernel :func:`kernel_for` names
    (ValueError where none takes the shape).
    """
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    tiled.check_precision(precision)
    if impl == "jnp":
        return fallback(x, c, w)
    if x_sq is None:
        xa = x.astype(acc_dtype(x.dtype))
        x_sq = jnp.sum(xa * xa, axis=1)
    shape = (x.dtype, x.shape[1], c.shape[0])
    if impl == "ffi":
        kernel = kernel_for(*shape)
        if kernel is None:
            return ffi_step(x, c, w)  # raises, naming the shape
        return _kernel_step(kernel, x_sq, precision, True)(x, c, w)
    on_cuda = decide_step(*shape, platform="cuda").target
    on_cpu = decide_step(*shape, platform="cpu").target
    if on_cuda == "jnp" and on_cpu == "jnp":
        return fallback(x, c, w)
    pick = lambda target, check: (
        fallback if target == "jnp" else _kernel_step(target, x_sq, precision, check)
    )
    return lax.platform_dependent(
        x, c, w, cpu=pick(on_cpu, False), cuda=pick(on_cuda, True), default=fallback
    )


def step_checked(
    x: jax.Array,
    c: jax.Array,
    w: jax.Array,
    inject: jax.Array | None,
    *,
    fallback: Fallback,
    simulate: Callable[[LloydStep], LloydStep],
    x_sq: jax.Array,
    precision: str = "float32",
) -> tuple[LloydStep, jax.Array, jax.Array]:
    """:func:`step` for ``kmeans(..., fault_tolerance=True)``: ``(step, row_faults,
    row_margin)``.

    Where :func:`decide_step` runs the fused kernel: its checked target
    (:func:`ffi_step_checked`), with ``inject`` planted in the kernel. Elsewhere (the
    tiled step, or ``fallback``, the jnp path) there is no per-row check (``row_faults``
    and ``row_margin`` are 0) and ``simulate`` applies the fault to the step's outputs.
    """
    shape = (x.dtype, x.shape[1], c.shape[0])
    on_cuda = decide_step(*shape, platform="cuda").target
    on_cpu = decide_step(*shape, platform="cpu").target

    def zero(s: LloydStep):
        # No row check ran: no faults, margin 0, as values of the step's outputs, so that
        # under shard_map they vary over the devices as the checked kernel's results do
        # (lax.platform_dependent needs its branches to agree).
        return s, jnp.sum(s.labels[:0], dtype=jnp.int32), jnp.sum(s.mind[:0], dtype=jnp.float32)

    def pick(target: str, check: bool):
        if target == "fused":
            return lambda x_, c_, w_: ffi_step_checked(x_, c_, w_, inject, check=check)
        plain = fallback if target == "jnp" else _kernel_step(target, x_sq, precision, check)
        return lambda x_, c_, w_: zero(simulate(plain(x_, c_, w_)))

    if on_cuda == "jnp" and on_cpu == "jnp":
        return pick("jnp", False)(x, c, w)
    return lax.platform_dependent(
        x, c, w, cpu=pick(on_cpu, False), cuda=pick(on_cuda, True), default=pick("jnp", False)
    )


def assign(
    x: jax.Array,
    x_sq: jax.Array,
    c: jax.Array,
    *,
    fallback: Callable[[jax.Array, jax.Array, jax.Array], tuple[jax.Array, jax.Array]],
    precision: str = "float32",
) -> tuple[jax.Array, jax.Array]:
    """``(labels, mind)`` of ``x`` against ``c`` through the kernel :func:`decide_step`
    names for the shape (the tiled assignment alone, or the fused step's first two
    results), else ``fallback(x, x_sq, c)``."""
    n = x.shape[0]
    acc = acc_dtype(x.dtype)

    def through(target: str, check: bool):
        if target == "tiled":
            return lambda x_, s_, c_: tiled.ffi_assign(x_, s_, c_, precision=precision, check=check)
        if target == "fused":
            return lambda x_, s_, c_: tuple(ffi_step(x_, c_, jnp.ones((n,), acc), check=check)[:2])
        return fallback

    shape = (x.dtype, x.shape[1], c.shape[0])
    on_cuda = decide_step(*shape, platform="cuda").target
    on_cpu = decide_step(*shape, platform="cpu").target
    if on_cuda == "jnp" and on_cpu == "jnp":
        return fallback(x, x_sq, c)
    return lax.platform_dependent(
        x, x_sq, c, cpu=through(on_cpu, False), cuda=through(on_cuda, True), default=fallback
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

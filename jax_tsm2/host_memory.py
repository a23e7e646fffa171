"""Host memory the GPU reads in place: a NumPy array pinned where it lies, read by rows.

``pinned(x, rows)`` page-locks (pins) a C-contiguous NumPy array in place with
``cudaHostRegister`` (no second copy of the data) and yields a :class:`HostRows` reader;
``reader(chunk)`` under ``jax.jit`` reads rows ``[chunk * rows, (chunk + 1) * rows)`` of the
array into a device array through the ``tsm2_host_rows`` FFI target, the GPU loading them
over the host link at its DMA rate (rows past the end are zeros). The chunk index is an
operand, so one compiled program reads every chunk. On leaving the ``with`` block the
registration is released, after the device has finished what was queued on it.

Reads in order are served ahead: after each read, a copy engine copies the chunk after it
into one of two device buffers (``rows`` rows each, allocated outside XLA's memory pool;
where they cannot be had, every read goes over the link), so that a loop that reads chunk
``i`` and then computes on it has chunk ``i + 1`` on the device while it computes, and the
read is a copy in device memory. The read's kernel checks the chunk it is asked for against
the one copied, and reads any other over the link as before: the order of reads changes
their speed, never their result. As a copy may be taken before its read is queued, the
array must not change while it is pinned.

Only CUDA builds on a CUDA device pin (``pinning_unavailable`` says why not elsewhere); the
registration costs time once (the driver locks every page: seconds for tens of GB).

Example (on a GPU; elsewhere ``pinning_unavailable`` names the reason)::

    x = np.random.default_rng(0).normal(size=(10_000, 64)).astype(np.float32)
    if pinning_unavailable(x) is None:
        with pinned(x, rows=4096) as read:
            first = jax.jit(read)(jnp.int32(0))  # x[:4096] on the device
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_tsm2 import _ffi
from jax_tsm2._ffi import _tsm2_ext

__all__ = ["HostRows", "pinned", "pinning_unavailable"]

HOST_ROWS_TARGET = _ffi.HOST_ROWS_TARGET

# The dtypes the readers serve (the copy moves bytes; these are the data k-means takes).
_DTYPES = ("float16", "bfloat16", "float32", "float64")


@dataclasses.dataclass(frozen=True)
class HostRows:
    """Reads chunks of ``rows`` rows of a pinned ``(total_rows, *row_shape)`` host array.

    ``address`` is the device's address of row 0 (``cudaHostGetDevicePointer``). Frozen and
    hashable, so it can be a static argument of ``jax.jit``: a program compiled for it serves
    only memory registered at that address.
    """

    address: int
    total_rows: int
    rows: int
    row_shape: tuple[int, ...]
    dtype: str
    device: int = 0  # the CUDA ordinal the memory was registered from

    @property
    def row_bytes(self) -> int:
        return int(np.prod(self.row_shape, dtype=np.int64)) * jnp.dtype(self.dtype).itemsize

    def staging_counts(self) -> tuple[int, int] | None:
        """``(hits, misses)``: reads served from a chunk copied ahead, and reads of a chunk
        other than the one copied (over the link); None before the first read or where the
        device buffers could not be had. Waits for the device's queued work."""
        query = getattr(_tsm2_ext, "host_rows_staging_counts", None)  # CUDA builds only
        counts = None if query is None else query(self.address, self.device)
        return None if counts is None else (int(counts[0]), int(counts[1]))

    def __call__(self, chunk: Any) -> jax.Array:
        """Rows ``[chunk * rows, chunk * rows + rows)`` on the device, zeros past the end."""
        call = jax.ffi.ffi_call(
            HOST_ROWS_TARGET, jax.ShapeDtypeStruct((self.rows, *self.row_shape), self.dtype)
        )
        return call(
            jnp.asarray(chunk, jnp.int32),
            host_ptr=np.uint64(self.address),
            total_rows=np.int64(self.total_rows),
            row_bytes=np.int64(self.row_bytes),
        )


def _device() -> Any | None:
    if not _ffi.cuda_backend_present():
        return None
    return jax.devices("cuda")[0]


def pinning_unavailable(x: Any) -> str | None:
    """Why ``x`` cannot be pinned and read in place here, or None when it can.

    Example:
        >>> import numpy as np
        >>> pinning_unavailable(np.ones((4, 3), np.float32)[:, :2])  # doctest: +ELLIPSIS
        '...not C-contiguous...'
    """
    if not isinstance(x, np.ndarray):
        return f"x is a {type(x).__name__}, not a NumPy array"
    if x.dtype.name not in _DTYPES:
        return f"dtype {x.dtype.name} is not one of {_DTYPES}"
    if not x.flags.c_contiguous:
        return "x is not C-contiguous (a strided view)"
    if x.nbytes == 0:
        return "x is empty"
    if not hasattr(_tsm2_ext, "host_register"):
        return "this build of jax_tsm2 has no CUDA (TSM2_CUDA=OFF)"
    if _device() is None:
        return "no CUDA device"
    if not _ffi.cuda_kernels_usable(HOST_ROWS_TARGET in _ffi.registered_targets().get("CUDA", ())):
        return "this build's kernels do not run on this GPU"
    return None


def _ordinal(dev: Any) -> int:
    """The CUDA ordinal of a JAX device (what ``cudaSetDevice`` takes)."""
    hw = getattr(dev, "local_hardware_id", None)
    return int(dev.id if hw is None else hw)


@contextlib.contextmanager
def pinned(x: np.ndarray, rows: int) -> Iterator[HostRows]:
    """Pins ``x`` in place for the block and yields its reader of ``rows``-row chunks.

    Raises RuntimeError (with the CUDA error) when the driver refuses, ValueError when
    ``pinning_unavailable(x)`` names a reason. Memory an earlier registration covers is
    used as it is and left registered.
    """
    why = pinning_unavailable(x)
    if why is not None:
        raise ValueError(f"cannot pin x in place: {why}")
    if rows < 1:
        raise ValueError(f"rows must be >= 1, got {rows}")
    ordinal = _ordinal(_device())
    address = int(x.__array_interface__["data"][0])
    reg = _tsm2_ext.host_register(address, int(x.nbytes), ordinal)
    device_ptr = int(reg["device_ptr"])
    try:
        yield HostRows(device_ptr, x.shape[0], int(rows), x.shape[1:], x.dtype.name, ordinal)
    finally:
        try:
            _tsm2_ext.host_rows_release(device_ptr, ordinal)
        finally:
            if reg["registered"]:
                _tsm2_ext.host_unregister(address, ordinal)

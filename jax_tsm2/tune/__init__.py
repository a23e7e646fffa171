"""The optional autotuner and its per-GPU cache.

``python -m jax_tsm2.tune --shapes MxKxN,... --dtype f32,...`` (``cli``) times every
candidate (our kernels and XLA's dot) on the current GPU (``tuner``, with the timing method
of ``timing``) and stores the winners in ``cache.cache_path(device_key)``
(``$JAX_TSM2_CACHE_DIR``, else the platform's user cache directory: on Linux
``$XDG_CACHE_HOME/jax_tsm2``, else ``~/.cache/jax_tsm2``).
Routing looks a shape up with ``cache.lookup`` and falls back to the model when there is no
entry; it never needs a cache. With ``jax_tsm2.autotune()`` on, routing times a shape
without an entry at its first lowering instead (``online``).

The package imports only ``cache`` (which imports nothing of jax_tsm2), so the model can
read a measured bandwidth from it without importing the tuner.
"""

from jax_tsm2.tune.cache import cache_dir, cache_path, lookup

__all__ = ["cache_dir", "cache_path", "lookup"]

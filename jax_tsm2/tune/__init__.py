"""The optional autotuner and its per-GPU cache.

``python -m jax_tsm2.tune --shapes MxKxN,... --dtype f32,...`` times every
candidate (our kernels and XLA's dot) on the current GPU and stores the
winners in ``cache.cache_path(device_key)`` (``$JAX_TSM2_CACHE_DIR``, else
``$XDG_CACHE_HOME/jax_tsm2``, else ``~/.cache/jax_tsm2``). Routing looks a
shape up with ``cache.lookup`` and falls back to the model when there is no
entry; it never needs a cache. With ``jax_tsm2.autotune()`` on, routing times a
shape without an entry at its first lowering instead (``online``). See ``cli``,
``cache`` and ``online``.
"""

from jax_tsm2.tune.cache import cache_dir, cache_path, lookup

__all__ = ["cache_dir", "cache_path", "lookup"]

"""Session 29, call 2: is XLA's dot at precision HIGHEST the same program as at DEFAULT
for bf16/f16 NT products? Prints the optimized HLO (fingerprint form, backend configs
kept, as jax_tsm2.bench.timing.program_digest hashes it) of both, and their diff."""

import difflib
import sys

import jax
import jax.numpy as jnp
from jaxlib import _hlo

opts = _hlo.HloPrintOptions.fingerprint()
opts.print_backend_config = True
for dt in (jnp.bfloat16, jnp.float16, jnp.float32):
    a = jnp.ones((1_000_000, 256), dt)
    b = jnp.ones((16, 256), dt)
    texts = {}
    for prec in (None, jax.lax.Precision.HIGHEST):
        f = jax.jit(lambda x, y, p=prec: jnp.matmul(x, y.T, precision=p))
        c = f.lower(a, b).compile()
        mods = c.runtime_executable().hlo_modules()
        texts[str(prec)] = "\n".join(m.to_string(opts) for m in mods)
    x, y = texts.values()
    print(f"== {jnp.dtype(dt).name}: identical={x == y}")
    sys.stdout.writelines(
        line + "\n"
        for line in difflib.unified_diff(x.splitlines(), y.splitlines(), lineterm="", n=0)
    )

# Session 24 diagnostic 2: is the d = 4096 step's slow mode (~1.55 against ~1.46 ms a
# step through JAX) sticky per compiled executable, or per sample? Six fresh compiles of
# the chained fused_step, ten samples each (5 calls of 2 steps a sample), device clock.
import sys

import jax
import jax.numpy as jnp

sys.path.insert(0, "benchmarks")
import kmeans_iter as ki

from jax_tsm2.bench import timing

n, d, k = int(sys.argv[1]), int(sys.argv[2]), 16
data = ki._data(n, d, k, jnp.float32, 2)
copies = [list(col) for col in zip(*data, strict=False)]
fn = ki._chained(ki._fused_step, 2)
for c in range(6):
    lowered = jax.jit(timing.clocked(fn)).lower(*[tuple(col) for col in copies])
    prog = timing.JaxProgram(lowered.compile(), True)
    timing.run_jax(prog, copies)
    s = timing.time_jax(prog, copies, per_sample=5, repeats=10)
    print(f"d={d} compile {c}: " + " ".join(f"{t * 1e3:.3f}" for t in s), flush=True)

"""compute-sanitizer over small sweeps of odd shapes through the CUDA kernels.

Runs a child Python process under `compute-sanitizer --tool memcheck`,
instrumenting only our kernels (names containing "Tsm2"), and requires its
summary to report 0 errors; the k-means kernels (named "Kmeans": the fused
step and centroid update, the tiled assignment and both paths of its sums)
also run under racecheck and synccheck, since they share shared-memory
buffers between barriers, and so do the ABFT kernels (named "Abft..."), the row
stream, TSM2T's flat stages, TSM2S, TSM2R's tensor-core tile ("Tsm2Mma...") and
TSM2L's row-per-thread kernel.
Skipped without a GPU or without compute-sanitizer.
"""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess
import sys

import pytest
from _helpers import PACKAGE_ROOT, package_env

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def _assert_sanitizer_clean(tmp_path, sweep: str, tool: str, kernels: str, **fields) -> None:
    """Runs ``sweep`` (formatted with ``fields``) in a child process under
    compute-sanitizer's ``tool``, instrumenting only kernels whose names contain
    ``kernels``, and requires a clean summary."""
    script = tmp_path / "sweep.py"
    script.write_text(sweep.format(tests=str(pathlib.Path(__file__).parent), **fields))
    env = package_env(XLA_PYTHON_CLIENT_PREALLOCATE="false")
    cmd = ["compute-sanitizer", "--tool", tool, "--kernel-name", f"kns={kernels}",
           "--error-exitcode", "99", sys.executable, str(script)]  # fmt: skip
    out = subprocess.run(
        cmd, capture_output=True, text=True, env=env, timeout=1800, cwd=PACKAGE_ROOT
    )
    # memcheck and synccheck end with "ERROR SUMMARY: N errors", racecheck with
    # "RACECHECK SUMMARY: N hazards displayed (N errors, N warnings)".
    summary = [
        line for line in out.stdout.splitlines() if re.search(r"(ERROR|RACECHECK) SUMMARY", line)
    ]
    print("\n".join(summary))  # shown with pytest -s; the closing note quotes it
    assert out.returncode == 0, out.stdout[-5000:] + out.stderr[-5000:]
    assert summary, out.stdout[-5000:]
    last = summary[-1]
    assert "ERROR SUMMARY: 0 errors" in last or "(0 errors, " in last, out.stdout[-5000:]
    assert "sweep calls:" in out.stdout


SWEEP = """
import itertools, sys
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
sys.path.insert(0, {tests!r})
from _helpers import assert_close_to_reference, ffi_matmul, rand
import jax_tsm2

rng = np.random.default_rng(0)
shapes = [(1, 1, 1), (7, 3, 5), (65, 17, 33), (129, 63, 64), (257, 65, 3), (33, 1023, 7),
          (1000, 4097, 65), (2, 129, 1)]
count = 0
dtypes = [jnp.float32, jnp.float64, jnp.bfloat16, jnp.float16]
for (m, k, n), dtype in itertools.product(shapes, dtypes):
    kernels = [0, 1] if k <= 64 and n <= 64 else [0]
    for kernel, batch in itertools.product(kernels, [None, 3]):
        a_shape = (m, k) if batch is None else (batch, m, k)
        b_shape = (k, n) if batch is None else (1, k, n)
        a, b = rand(rng, a_shape, dtype), rand(rng, b_shape, dtype)
        c = jax.block_until_ready(ffi_matmul(a, b, kernel))
        assert_close_to_reference(c, a, b)
        count += 1
print("sweep calls:", count)
"""


@pytest.mark.skipif(shutil.which("compute-sanitizer") is None, reason="no compute-sanitizer")
def test_memcheck_reports_no_errors(tmp_path):
    _assert_sanitizer_clean(tmp_path, SWEEP, "memcheck", "Tsm2")


KMEANS_SWEEP = """
import itertools, sys
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
sys.path.insert(0, {tests!r})
from _kmeans_reference import check_step, data
from jax_tsm2 import _ffi
from jax_tsm2.clustering import fused

rng = np.random.default_rng(0)
step = jax.jit(fused.ffi_step)
update = jax.jit(fused.ffi_update)
checked = jax.jit(fused.ffi_step_checked)
count = 0
# (257, 256, 16), (211, 100, 17) and (130, 252, 32): f32 takes the tensor-core step;
# (67, 4096, 16), (37, 2052, 9) and (23, 388, 12): f32 takes the cluster step
# (kmeans_wide.cuh; the last with one part-filled block);
# (97, 2049, 5) and the others from d = 1000: rows split over a thread-block cluster.
cases = [(1, 1, 1), (67, 3, 5), (301, 17, 2), (257, 256, 16), (211, 100, 17), (130, 252, 32),
         (131, 1000, 32), (700, 128, 8), (67, 4096, 16), (37, 2052, 9), (23, 388, 12),
         (97, 2049, 5)]
for (n, d, k), dtype in itertools.product(cases, [jnp.float32, jnp.float64, jnp.bfloat16]):
    if not fused.fused_supported(dtype, d, k):
        continue
    if {skip_cluster_step} and _ffi.kmeans_plan(dtype, n, d, k)["step"] == "tensor_cores_cluster":
        continue
    x, c, w = data(rng, n, d, k, dtype)
    s = jax.block_until_ready(step(x, c, w))
    check_step(s, x, c, w)
    # The centroid update, with no empty cluster and with cluster 0 emptied
    # (the rule's path: block 0 alone, passes over mind).
    for counts in (s.counts, s.counts.at[0].set(0)):
        jax.block_until_ready(update(s.sums, counts, x, w, s.labels, s.mind, c))
    if dtype == jnp.float32:  # the row-checked step, clean and with a flip in the last row
        for inject in (None, jnp.array([1, n - 1, k - 1, 30], jnp.int32)):
            jax.block_until_ready(checked(x, c, w, inject))
    count += 1
print("sweep calls:", count)
"""


@pytest.mark.skipif(shutil.which("compute-sanitizer") is None, reason="no compute-sanitizer")
@pytest.mark.parametrize("tool", ["memcheck", "racecheck", "synccheck"])
def test_kmeans_step_sanitizers_report_no_errors(tmp_path, tool):
    # racecheck orders shared memory only by bar.sync and cluster barriers: the
    # cluster step's control warps hand one-hot fragments, labels and row masks to
    # the math warps through mbarriers (arrive after a __syncwarp, try_wait to
    # acquire), and racecheck 2025.3 reports every such byte as a RAW hazard
    # (184k on one call), while excluding that kernel by name crashed the tool
    # (docs/kmeans.md). So its cases sit out racecheck only;
    # memcheck and synccheck cover them.
    skip = tool == "racecheck"
    _assert_sanitizer_clean(tmp_path, KMEANS_SWEEP, tool, "Kmeans", skip_cluster_step=skip)


TILED_SWEEP = """
import itertools, sys
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
sys.path.insert(0, {tests!r})
from _kmeans_reference import TF32_REL, check_step, data
from jax_tsm2 import _ffi
from jax_tsm2.clustering import tiled

rng = np.random.default_rng(0)
count = 0
# The assignment in each of its modes (one centroid tile; resident X over several, which
# needs row tiles for every block; streamed; rows not of whole 16-byte chunks, loaded
# element by element; centroid tiles split over blocks), on sm_90a's warpgroup kernel too
# (f32 TF32 and refined, bf16), and the sums on both paths (one bucket; rows sorted by label).
cases = [(1, 1, 1), (67, 3, 40), (301, 17, 129), (1031, 64, 300), (257, 257, 70),
         (130, 520, 300), (1000, 64, 5000), (34_000, 64, 300)]
for (n, d, k), dtype in itertools.product(cases, [jnp.float32, jnp.bfloat16]):
    x, c, w = data(rng, n, d, k, dtype)
    x_sq = jnp.sum(x.astype(jnp.float32) ** 2, axis=1)
    for precision in tiled.PRECISIONS if dtype == jnp.float32 else ("float32",):
        s = jax.block_until_ready(tiled.ffi_step(x, x_sq, c, w, precision=precision))
        check_step(s, x, c, w, extra_rel=TF32_REL if precision == "tensorfloat32" else 0.0)
        count += 1
    # Nine in ten rows in one cluster: a segment over many pieces of the sorted path.
    labels = jnp.asarray(np.where(rng.random(n) < 0.9, k // 2, rng.integers(0, k, n)), jnp.int32)
    jax.block_until_ready(tiled.ffi_sums(x, w, labels, x_sq, k))
    count += 1
# The refined f32 mode's ways of settling a row (sm_90a): centroids with one exact copy (a
# second exact dot) and with two (the row ranked again against every centroid).
for copies in (1, 2):
    x, c, w = data(rng, 34_000, 36, 300, jnp.float32)
    part = 300 // (copies + 1)
    for i in range(1, copies + 1):
        c = c.at[i * part : (i + 1) * part].set(c[:part])
    x_sq = jnp.sum(x**2, axis=1)
    check_step(jax.block_until_ready(tiled.ffi_step(x, x_sq, c, w)), x, c, w)
    count += 1
print("sweep calls:", count)
"""


# tsm2_abft_encode, tsm2_abft_verify, tsm2_colsums, tsm2_repair_column and tsm2_abft_judge
# (kernels named "Abft..."), whose blocks share shared-memory buffers between barriers and
# whose warps share row weights by shuffles.
ABFT_SWEEP = """
import sys
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
sys.path.insert(0, {tests!r})
from _abft_reference import acc_of, assert_colsums_close, assert_repaired, repair_case
from _helpers import rand
from jax_tsm2 import abft_calls, abft_model

rng = np.random.default_rng(0)
encode = jax.jit(abft_calls.encode, static_argnames="acc")
verify = jax.jit(abft_calls.verify)
colsums = jax.jit(abft_calls.colsums, static_argnames="abs_rows")
repair = jax.jit(abft_calls.repair_column, static_argnames="acc")
judge = jax.jit(abft_calls.judge)
count = 0
for dtype in (jnp.float32, jnp.float64, jnp.bfloat16, jnp.float16):
    acc = acc_of(dtype)
    for rows, cols in ((1, 1), (7, 3), (1031, 129), (5000, 16), (3, 4097)):
        m = rand(rng, (rows, cols), dtype)
        for r in (1, 3, 4):
            v = rand(rng, (r, rows), acc)
            assert_colsums_close(jax.block_until_ready(colsums(m, v, abs_rows=1)), m, v, 1)
            count += 1
    # The checksum passes: rows of fewer than 32 lanes and of 32 (each warp on one row, the
    # row weights shared by shuffles), rows that are not whole vectors, splits.
    for rows, k, n in ((1, 1, 1), (1031, 129, 4), (2000, 640, 256), (9001, 256, 7)):
        a, b, c = repair_case(rng, rows, k, n, dtype)
        stats = jax.block_until_ready(encode(a, b, acc=acc))
        vec = abft_model.model_vector(dtype, rows, k, None, acc, extended_sums=True)
        resid, t = jax.block_until_ready(verify(c, stats, jnp.asarray(vec, acc)))
        assert bool(jnp.all(jnp.abs(resid) <= t)), (dtype, rows, k, n)
        count += 1
    for rows, k, n in ((1, 1, 1), (33, 2049, 5), (1100, 7, 3)):
        a, b, c = repair_case(rng, rows, k, n, dtype)
        for flag in (False, True):
            r = jax.block_until_ready(repair(flag, n // 2, a, b, c, acc=acc))
            if flag:
                assert_repaired(r, a, b, c, n // 2, acc)
            count += 1
        for failing in (0, 1, 2):  # nothing to do, a repair, two columns
            resid = jnp.zeros((2, n), acc).at[:, :failing].set(1.0)
            v = jax.block_until_ready(judge(resid, jnp.full((n,), 0.5, acc), 1e-3, 0.0, a, b, c))
            assert int(v.col) == (0 if failing else -1), v
            count += 1
print("sweep calls:", count)
"""


S_SWEEP = """
import itertools, sys
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
sys.path.insert(0, {tests!r})
from _helpers import assert_close_to_reference, ffi_matmul, rand

# TSM2S for bf16/f16 on tensor cores: clusters with no split, with splits and
# batched, a part-filled tile; tensor-map tiles of 64 columns (n = 4104) and
# of 128 (n = 8712, and 4240 batched); 128-column cp.async tiles with odd n
# (rows copied in 16-byte windows, the last running past B's end). f32 and f64
# (unbatched, and batched where n is odd): the clusters on CUDA cores, and the
# split kernel beyond them, in windows where n is not a whole vector.
rng = np.random.default_rng(1)
shapes = [(1, 8, 8), (3, 4104, 8), (9, 2048, 264), (16, 1000, 1000), (8, 200, 4240),
          (13, 33, 4241), (7, 1000, 4104), (5, 1000, 8712), (3, 299, 131), (16, 77, 1001)]
runs = list(itertools.product(shapes, [jnp.bfloat16, jnp.float16], [None, 3]))
runs += list(itertools.product(shapes, [jnp.float32, jnp.float64], [None]))
runs += list(itertools.product(shapes[-2:], [jnp.float32, jnp.float64], [3]))
count = 0
for (m, k, n), dtype, batch in runs:
    a_shape = (m, k) if batch is None else (batch, m, k)
    b_shape = (k, n) if batch is None else (batch, k, n)
    a, b = rand(rng, a_shape, dtype), rand(rng, b_shape, dtype)
    c = jax.block_until_ready(ffi_matmul(a, b, 2))
    assert_close_to_reference(c, a, b)
    count += 1
print("sweep calls:", count)
"""


# The row stream (kernels/row_stream.cuh): B's rows of 1, 4, 8 and 16 in each dtype that
# takes them (f32 n = 16 and 2-byte n = 8 with their cp.async rings), rows of whole vectors
# (nn) and rows at every offset in a vector (k one past a multiple; nt), m past a whole
# group of rows, a k long enough to split; the warps share B between barriers and a unit
# counter.
ROW_STREAM_SWEEP = """
import itertools, sys
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
sys.path.insert(0, {tests!r})
from _helpers import assert_close_to_reference, ffi_product, rand

rng = np.random.default_rng(0)
count = 0
for dtype in [jnp.float32, jnp.float64, jnp.bfloat16, jnp.float16]:
    vec = 16 // jnp.dtype(dtype).itemsize
    widest = 16 if vec == 4 else 8
    for n, dk in itertools.product((1, 3, 8, 16), (0, 1)):
        if n > widest:
            continue
        layout = dk  # whole-vector rows in nn, rows at every offset in nt
        m, k = 37, 64 * vec + dk
        a = rand(rng, (m, k), dtype)
        b = rand(rng, (n, k) if layout else (k, n), dtype)
        c = jax.block_until_ready(ffi_product(a, b, 0, layout))
        assert_close_to_reference(c, a, b.T if layout else b)
        count += 1
    a, b = rand(rng, (67, 30011), dtype), rand(rng, (30011, 5), dtype)
    assert_close_to_reference(jax.block_until_ready(ffi_product(a, b, 0, 0)), a, b)
    count += 1
print("sweep calls:", count)
"""


# TSM2T's flat stages (ffi/matmul/split_plan.h TUsesFlat): runs of rows starting anywhere
# in a vector, the matrix's last vector partial, tiles whose threads read past a run into
# its slot's slack, one split and many.
T_FLAT_SWEEP = """
import sys
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
sys.path.insert(0, {tests!r})
from _helpers import assert_close_to_reference, ffi_product, rand

rng = np.random.default_rng(0)
count = 0
for dtype in [jnp.float32, jnp.float64, jnp.bfloat16, jnp.float16]:
    for k, m, n in [(1, 3, 5), (37, 1, 1), (1001, 3, 2), (30011, 7, 3), (2003, 7, 33)]:
        a, b = rand(rng, (k, m), dtype), rand(rng, (k, n), dtype)
        c = jax.block_until_ready(ffi_product(a, b, 3, 2))
        assert_close_to_reference(c, a.T, b)
        count += 1
print("sweep calls:", count)
"""


# TSM2T on rows of whole vectors (ffi/matmul/kernels/tn.cuh and its tensor-core tiles), whose
# row groups add their sums through the ring (StoreGroupSums: 256 groups of one thread, 16 of
# 16, 2 of 128), one split and many, k = 1 and primes; and its tensor-core tiles on rows that
# are not whole vectors in every dtype (staged as their covering vectors, read at their
# offsets: f32/f64 lane by lane, bf16/f16 element by element), batched too.
T_TILED_SWEEP = """
import sys
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
sys.path.insert(0, {tests!r})
from _helpers import assert_close_to_reference, ffi_product, rand

rng = np.random.default_rng(0)
count = 0
cases = {{
    jnp.float32: [(1, 4, 4), (30011, 4, 4), (1001, 16, 16), (2003, 8, 64), (2003, 32, 64),
                  (2003, 31, 62)],
    jnp.float64: [(7, 2, 2), (30011, 2, 2), (1001, 16, 16), (2003, 32, 64), (1001, 17, 33)],
    jnp.bfloat16: [(30011, 8, 8), (2003, 8, 16), (1001, 32, 32), (2003, 13, 100)],
    jnp.float16: [(1, 8, 8), (2003, 16, 8), (1001, 32, 32), (1001, 37, 45)],
}}
for dtype, shapes in cases.items():
    if jnp.dtype(dtype).name != {dtype!r}:
        continue
    for k, m, n in shapes:
        a, b = rand(rng, (k, m), dtype), rand(rng, (k, n), dtype)
        c = jax.block_until_ready(ffi_product(a, b, 3, 2))
        assert_close_to_reference(c, a.T, b)
        count += 1
    # batched: each product's rows start at another offset, and the last one's covering
    # vectors end at the buffer's end
    a, b = rand(rng, (3, 1003, 37), dtype), rand(rng, (3, 1003, 45), dtype)
    c = np.asarray(jax.block_until_ready(ffi_product(a, b, 3, 2)))
    for i in range(3):
        assert_close_to_reference(c[i], a[i].T, b[i])
    count += 1
assert count, "no case of " + {dtype!r}
print("sweep calls:", count)
"""


# TSM2R on tensor cores (ffi/matmul/kernels/tsm2_mma.cuh, and tsm2_mma_tma.cuh for rows of
# whole vectors on sm_90, with f32's warpgroup MMAs on sm_90a), which shares its output
# staging between the fragments and the rows it writes: n-tiles of 8 to 64 columns (f32 at
# 17, 51 and 64 columns: n-tiles of 24, 56 and 64, warpgroup MMAs of 64, 32, 16 and 8; f64
# on DMMA, whose rows of an odd k stay on the CUDA cores),
# rows of whole vectors and not, tiles split between blocks (long k) and the fix-up, a last
# chunk that ends inside the first of its two tensor-map boxes (k = 8200), and an Inf in
# f32's A (the block recomputes its part of the tile with exact sums) at 12 and 60 columns.
R_MMA_SWEEP = """
import sys
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
sys.path.insert(0, {tests!r})
from _helpers import assert_close_to_reference, ffi_matmul, rand

rng = np.random.default_rng(0)
count = 0
for dtype, ns in [(jnp.float32, (9, 17, 51, 64)), (jnp.bfloat16, (5, 40, 41)),
                  (jnp.float16, (33, 64)), (jnp.float64, (9, 33, 64))]:
    for m, k, n in [(129 + n, 1024, n) for n in ns] + [(300, 9001, ns[0]), (67, 999, ns[-1]),
                                                       (300, 8200, ns[1])]:
        a, b = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
        assert_close_to_reference(jax.block_until_ready(ffi_matmul(a, b, 0)), a, b)
        count += 1
for k, n in ((2001, 12), (2000, 12), (2000, 60)):
    a, b = rand(rng, (300, k), jnp.float32), rand(rng, (k, n), jnp.float32)
    c = np.asarray(jax.block_until_ready(ffi_matmul(a.at[7, 1500].set(jnp.inf), b, 0)))
    assert np.isfinite(np.delete(c, 7, axis=0)).all() and np.isinf(c[7]).all(), c[7]
    count += 1
print("sweep calls:", count)
"""


# TSM2L's row-per-thread kernel (ffi/matmul/kernels/row_per_thread.cuh), whose warps
# stage their rows of C in shared memory where a lane's row of A is one vector and its
# row of C not whole vectors:
# rows of 16 and 32 bytes, n on and off that path, odd n (a partial last vector), f32
# outputs of half products, and m ending inside a warp's rows; and rows of 2, 4 and 8
# bytes, several to a vector, with m ending inside a vector.
ROW_PER_THREAD_SWEEP = """
import sys
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
sys.path.insert(0, {tests!r})
from _helpers import assert_close_to_reference, ffi_product, rand

rng = np.random.default_rng(0)
count = 0
for dtype in [jnp.float32, jnp.float64, jnp.bfloat16, jnp.float16]:
    size = jnp.dtype(dtype).itemsize
    outs = [None, jnp.float32] if size == 2 else [None]
    ks = [16 // size, 32 // size] + [rb // size for rb in (2, 4, 8) if rb >= size]
    for k, n, m, out in [(k, n, m, out) for k in ks for n in (1, 3, 7, 8)
                         for m in (1, 1041) for out in outs]:
        a, b = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
        assert_close_to_reference(jax.block_until_ready(ffi_product(a, b, 1, 0, out)), a, b)
        count += 1
print("sweep calls:", count)
"""

# TSM2L's tensor-core tile (ffi/matmul/kernels/tsm2l_mma.cuh): each dtype, each padded k
# (8-byte pieces and whole vectors), n whose rows take the lanes' stores and odd n (the
# warp's staging), layouts nn and nt, a row count that ends mid-tile and mid-block.
L_MMA_SWEEP = """
import sys
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
sys.path.insert(0, {tests!r})
from _helpers import assert_close_to_reference, ffi_product, rand

rng = np.random.default_rng(0)
count = 0
for dtype, ks, ns in [(jnp.float32, (8, 12, 20, 44, 64), (9, 16, 37, 64)),
                      (jnp.float64, (6, 30, 64), (9, 37, 64)),
                      (jnp.bfloat16, (16, 24, 64), (5, 28, 33)),
                      (jnp.float16, (8, 40), (13, 64))]:
    for k in ks:
        for n in ns:
            for m, layout in [(1, 0), (1041, 0), (1041, 1)]:
                a, b = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
                c = ffi_product(a, b.T if layout else b, 1, layout)
                assert_close_to_reference(jax.block_until_ready(c), a, b)
                count += 1
print("sweep calls:", count)
"""

# tsm2_host_rows (ffi/hostmem/kernels/host_rows.cuh) on pinned host memory: reads in order
# (served from the chunks a copy engine staged ahead), out of order and past either end
# (read over the link), rows and bases that take loads of 16, 8, 4 and 2 bytes.
HOST_ROWS_SWEEP = """
import jax, jax.numpy as jnp, numpy as np
from jax_tsm2 import host_memory

rng = np.random.default_rng(0)
count = 0
for d, dtype, skip in [(16, np.float32, 0), (1, np.float64, 0), (3, np.float32, 1),
                       (5, np.float16, 1), (7, np.float16, 3)]:
    x = rng.normal(size=(1003 + skip, d)).astype(dtype)[skip:]
    rows = 128
    chunks = -(-x.shape[0] // rows)
    with host_memory.pinned(x, rows) as read:
        f = jax.jit(read)
        for i in [*range(chunks), chunks, -1, 3, 1, 0, chunks - 1]:
            got = np.asarray(f(jnp.int32(i)))
            want = np.zeros((rows, *x.shape[1:]), x.dtype)
            if 0 <= i < chunks:
                part = x[i * rows : (i + 1) * rows]
                want[: len(part)] = part
            assert (got.view(np.uint8) == want.view(np.uint8)).all(), i
            count += 1
        assert read.staging_counts()[0] >= chunks, read.staging_counts()
print("sweep calls:", count)
"""


@pytest.mark.skipif(shutil.which("compute-sanitizer") is None, reason="no compute-sanitizer")
def test_host_rows_memcheck_reports_no_errors(tmp_path):
    _assert_sanitizer_clean(tmp_path, HOST_ROWS_SWEEP, "memcheck", "HostRows")


ABFT_ROWS_SWEEP = """
import itertools, sys
import jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
sys.path.insert(0, {tests!r})
from _helpers import assert_close_to_reference, rand
from jax_tsm2 import abft_calls

rng = np.random.default_rng(0)
count = 0
# One split and several (k past B's rows in shared memory), one row and a partial group.
shapes = [(1, 64, 1), (37, 257, 3), (263, 20011, 8), (1030, 700, 16)]
for (m, k, n), dtype in itertools.product(shapes, [jnp.float32, jnp.float64, jnp.bfloat16]):
    if n > (16 if dtype == jnp.float32 else 8):
        continue
    a, b = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
    for inject in (None, (m - 1, n - 1, 30 if dtype != jnp.float64 else 62)):
        c, verdict = abft_calls.rows(a, b, inject=inject)
        assert_close_to_reference(c, a, b)
        assert int(verdict[0]) == (0 if inject is None else 1), verdict
        count += 1
print("sweep calls:", count)
"""


# Sweeps run under every tool: each sweep's source, the part of a kernel's name that
# selects the kernels compute-sanitizer instruments (--kernel-name kns=...), and the fields
# its source is formatted with. The TN tiles' sweep runs a dtype per test: under memcheck
# the whole of it took longer than the rest of the GPU suite, and apart the four run side by
# side (pytest -n).
EVERY_TOOL_SWEEPS = {
    "tiled_kmeans": (TILED_SWEEP, "Kmeans", {}),
    "abft_kernels": (ABFT_SWEEP, "Abft", {}),
    "small_left": (S_SWEEP, "Tsm2S", {}),
    "row_stream": (ROW_STREAM_SWEEP, "Tsm2RowStream", {}),
    # The fused row check: the row stream with statistics, the check and the repair.
    "abft_rows": (ABFT_ROWS_SWEEP, "Row", {}),
    "tn_flat": (T_FLAT_SWEEP, "Tsm2TFlatKernel", {}),
    **{
        f"tn_tiled_{name}": (T_TILED_SWEEP, "Tsm2T", {"dtype": name})
        for name in ("float32", "float64", "bfloat16", "float16")
    },
    "r_tensor_core_tile": (R_MMA_SWEEP, "Tsm2Mma", {}),
    # Both row kernels (Tsm2LRowKernel, Tsm2LPackedRowKernel); the sweep's shapes reach no
    # other TSM2L kernel.
    "row_per_thread": (ROW_PER_THREAD_SWEEP, "Tsm2L", {}),
    "l_tensor_core_tile": (L_MMA_SWEEP, "Tsm2LMma", {}),
}


@pytest.mark.skipif(shutil.which("compute-sanitizer") is None, reason="no compute-sanitizer")
@pytest.mark.parametrize("tool", ["memcheck", "racecheck", "synccheck"])
@pytest.mark.parametrize("sweep", list(EVERY_TOOL_SWEEPS))
def test_sanitizers_report_no_errors(tmp_path, sweep, tool):
    source, kernels, fields = EVERY_TOOL_SWEEPS[sweep]
    _assert_sanitizer_clean(tmp_path, source, tool, kernels, **fields)

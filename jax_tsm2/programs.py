"""Products taken from real programs: what the harness times as family ``APP`` and what a
calibration measures before its random probes (``jax_tsm2.tune.calibrate.program_probes``).

Each names its layout family (R, L, S and NT: ``A`` is ``m x k``; TN: ``A`` is stored
``rows x m``, ``A.T @ B``), its sizes as the harness labels them, the dtypes it runs in and
the program it comes from.

Example:
    >>> from jax_tsm2.programs import APP_CASES
    >>> APP_CASES[0].family, APP_CASES[0].shape, APP_CASES[0].problem()
    ('R', (100000, 2000, 32), (Problem(batch=None, m=100000, k=2000, n=32), 'nn'))
"""

from __future__ import annotations

from dataclasses import dataclass

from jax_tsm2.problem import Problem

#: The layout each family's product is stored in.
FAMILY_LAYOUT: dict[str, str] = {"R": "nn", "L": "nn", "S": "nn", "NT": "nt", "TN": "tn"}
#: The dtypes' short names (the harness's) and their full names.
DTYPE_NAMES: dict[str, str] = {
    "f32": "float32",
    "f64": "float64",
    "bf16": "bfloat16",
    "f16": "float16",
}


@dataclass(frozen=True)
class AppProduct:
    """A product taken from a real program: its layout family, sizes and dtypes, where it
    comes from, and a CPU-sized product of the same layout for smoke runs (``--tiny``)."""

    family: str
    shape: tuple[int, int, int]
    dtypes: tuple[str, ...]
    source: str
    tiny: tuple[int, int, int]
    quick: bool = False  # one of the ``--quick`` subset

    def problem(self) -> tuple[Problem, str]:
        """The canonical problem and its layout (for TN the harness's ``rows x m x n`` label
        is the contraction first)."""
        a, b, c = self.shape
        if self.family == "TN":
            return Problem(None, b, a, c), "tn"
        return Problem(None, a, b, c), FAMILY_LAYOUT[self.family]


#: Products from real programs (the harness's ``--family APP``, the calibration's first probes).
APP_CASES: tuple[AppProduct, ...] = (
    AppProduct(
        "R",
        (100_000, 2000, 32),
        ("f32",),
        "randomized SVD: the sketch Y = A @ Omega of a 100000 x 2000 matrix, 32 columns",
        (1000, 200, 32),
    ),
    AppProduct(
        "TN",
        (100_000, 2000, 32),
        ("f32",),
        "randomized SVD: the projection A.T @ Q onto the sketch's 32-column basis",
        (1000, 200, 32),
        quick=True,
    ),
    AppProduct(
        "TN",
        (1_000_000, 32, 32),
        ("f32",),
        "Gram-type product X.T @ Y of two 1e6 x 32 blocks (normal equations, covariances)",
        (10_000, 32, 32),
    ),
    AppProduct(
        "R",
        (20_000, 20_000, 8),
        ("f32", "f64"),
        "block power (subspace) iteration: A @ V, a 20000 x 20000 matrix, 8 vectors",
        (400, 400, 8),
        quick=True,
    ),
    AppProduct(
        "R",
        (32_768, 4096, 16),
        ("bf16", "f32"),
        "LoRA adapter, forward: 32768 tokens x 4096 features @ the rank-16 down-projection",
        (512, 256, 16),
    ),
    AppProduct(
        "TN",
        (32_768, 4096, 16),
        ("bf16", "f32"),
        "LoRA adapter, backward: the down-projection's gradient X.T @ dZ over 32768 tokens",
        (512, 256, 16),
    ),
    AppProduct(
        "NT",
        (1_000_000, 128, 64),
        ("f32",),
        "k-means distances: X @ C.T, 1e6 points of 128 features against 64 centroids",
        (2000, 128, 64),
    ),
    AppProduct(
        "L",
        (1_000_000, 3, 3),
        ("f32",),
        "a tiny-k product: 1e6 3-D points times a 3 x 3 matrix "
        "(github.com/jax-ml/jax/issues/33004)",
        (5000, 3, 3),
    ),
    AppProduct(
        "S",
        (1, 4096, 14336),
        ("bf16",),
        "LLM decode, one sequence: h @ W_up of a 4096 -> 14336 MLP (Llama-3-8B, Mistral-7B)",
        (1, 256, 448),
        quick=True,
    ),
    AppProduct(
        "S",
        (4, 4096, 14336),
        ("bf16",),
        "LLM decode, a batch of 4 sequences through the same 4096 -> 14336 MLP",
        (4, 256, 448),
    ),
)

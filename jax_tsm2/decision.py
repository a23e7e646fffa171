"""One record for every choice the library makes: which implementation runs, and why.

Three kinds of operation choose an implementation when they are lowered: a matrix product
(a TSM2 kernel or XLA's dot, ``routing.route``, whose ``Route`` extends this record), a
k-means step (the fused kernel or the unfused jnp path, and the kernel that ends an
iteration or the jnp rule: ``clustering.fused.decide_step`` / ``decide_update``) and ABFT's
checksum passes and repair (the ABFT kernels or XLA's formulations, ``abft.decide``). Each
answers with a ``Decision``: what runs, the layer that decided (a rule, a tune-cache entry,
a timing, a committed measurement, the performance model), a sentence saying why, and the
alternatives it weighed with their predicted times where the model gave them.
``jax_tsm2.explain`` shows any of them.

Example:
    >>> from jax_tsm2.decision import Alternative, Decision
    >>> d = Decision(op="kmeans_step", target="jnp", reason="mode 'never'", platform="cuda")
    >>> print(d)
    kmeans_step on cuda: jnp [rules] mode 'never'
    >>> Alternative("xla", 1.5e-5).describe()
    'xla 15.0 us'
"""

from __future__ import annotations

import dataclasses

LAYERS = ("rules", "tune cache", "autotune", "calibration", "measured", "model")


@dataclasses.dataclass(frozen=True)
class Alternative:
    """An implementation the decision weighed: its name, predicted seconds (None where the
    model has no prediction or the implementation cannot run) and a note."""

    target: str
    seconds: float | None = None
    note: str = ""

    def describe(self) -> str:
        time = "n/a" if self.seconds is None else f"{self.seconds * 1e6:.1f} us"
        return f"{self.target} {time}" + (f" ({self.note})" if self.note else "")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Decision:
    """What runs for one operation on one platform, and why.

    Attributes:
      op: the operation: ``"matmul"``, ``"kmeans_step"``, ``"kmeans_update"``,
        ``"abft_sums"`` (the checksum passes) or ``"abft_repair"``.
      target: what runs: a kernel (``"tsm2r"`` ... ``"tsm2t"``, ``"fused"``, ``"kernel"``,
        ``"kernels"``) or the XLA path (``"xla"``, ``"jnp"``).
      reason: why, in one sentence.
      layer: what decided (``LAYERS``): ``"rules"`` (platform, mode, dtypes, shapes), a
        ``"tune cache"`` entry, an ``"autotune"`` timing, this GPU's ``"calibration"``, a
        ``"measured"`` rule committed to the code, or the performance ``"model"``.
      platform: the lowering platform the decision is for (``"cuda"``, ``"cpu"``, ...).
      alternatives: what else was weighed, with predicted times where known.
    """

    op: str
    target: str
    reason: str
    layer: str = "rules"
    platform: str = "cuda"
    alternatives: tuple[Alternative, ...] = ()

    def __str__(self) -> str:
        line = f"{self.op} on {self.platform}: {self.target} [{self.layer}] {self.reason}"
        if self.alternatives:
            line += "; weighed: " + ", ".join(a.describe() for a in self.alternatives)
        return line

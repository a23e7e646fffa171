"""XLA's dot as XLA compiles it: the kernels it launches and the bytes they move.

Whether XLA's dot streams its operands once or several times is what decides a product's
time, and it changes between neighbouring shapes: on sm_90, jax 0.11, a product whose
rows fit the GEMM's alignment is one kernel reading each operand once, while its
neighbour one element longer runs two copy fusions first (padding or transposing both
operands) and reads them three times over. The model's rules for this
(``xla.operand_passes``) are fitted to measured grids; the compiled program says it
exactly. ``plan`` compiles the product alone for this process's backend and reads the
optimized HLO: its kernels (fusions and custom calls of the entry computation) and the
bytes XLA's own cost analysis says they access. Neither needs the GPU's time.

A plan costs one compilation of the product (XLA autotunes a new GEMM shape: 0.3-1.5 s
on an H200), cached per process; the autotuning results are XLA's own cache's, so the
program that later runs the same dot compiles faster. Off a GPU there is no plan.

Example (a plan from the text and cost analysis of a compiled program):
    >>> text = '''ENTRY %main (p0: f32[64,33], p1: f32[33,8]) -> f32[64,8] {
    ...   %p0 = f32[64,33]{1,0} parameter(0)
    ...   %p1 = f32[33,8]{1,0} parameter(1)
    ...   %pad = f32[64,36]{1,0} fusion(%p0), kind=kLoop, calls=%fused_pad
    ...   %pad.1 = f32[36,8]{1,0} fusion(%p1), kind=kLoop, calls=%fused_pad.1
    ...   ROOT %gemm = f32[64,8]{1,0} fusion(%pad, %pad.1), kind=kCustom, calls=%gemm_fusion
    ... }'''
    >>> q = plan_from(text, {"bytes accessed": 30000.0, "flops": 33792.0})
    >>> q.kernels, q.bytes, q.ops
    (3, 30000.0, ('fusion:kLoop', 'fusion:kLoop', 'fusion:kCustom'))
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from typing import Any

from jax_tsm2.problem import Problem

# Entry instructions that launch nothing (views, tuples, the arguments).
_NO_KERNEL = frozenset(
    {"parameter", "constant", "tuple", "get-tuple-element", "bitcast", "after-all"}
)
_OPCODE = re.compile(r"\b([a-z][a-z0-9-]*)\(")


@dataclasses.dataclass(frozen=True)
class XlaPlan:
    """What the compiled product does: ``kernels`` launched, ``bytes`` accessed by them
    (XLA's cost analysis), ``flops``, and each kernel's opcode (``fusion:<kind>`` or
    ``custom-call:<target>``) in program order. ``bytes`` and ``flops`` are 0 where the
    cost analysis does not know them (it says -1 for a cuBLAS call XLA did not fuse): the
    model then counts the product's minimal bytes. Where they are known, they leave out a
    cuBLAS call's own operands and result (``cublas``), which the model adds."""

    bytes: float
    kernels: int
    flops: float
    ops: tuple[str, ...]

    @property
    def cublas(self) -> bool:
        """Whether a kernel of the plan is a cuBLAS call (``custom-call:__cublas...``)."""
        return any(op.startswith("custom-call:__cublas") for op in self.ops)

    def to_json(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "kernels": self.kernels, "flops": self.flops,
                "ops": list(self.ops)}  # fmt: skip

    @classmethod
    def from_json(cls, d: Any) -> XlaPlan:
        """Raises ValueError on anything but a plan ``to_json`` wrote."""
        if not isinstance(d, dict):
            raise ValueError(f"an XLA plan must be an object, got {type(d).__name__}")
        b, k, f, ops = d.get("bytes"), d.get("kernels"), d.get("flops", 0.0), d.get("ops", [])
        numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (b, f))
        if not numbers or not (math.isfinite(b) and math.isfinite(f)):
            raise ValueError(f"XLA plan bytes {b!r}, flops {f!r}")
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise ValueError(f"XLA plan kernels {k!r}")
        if not isinstance(ops, list) or not all(isinstance(o, str) for o in ops):
            raise ValueError(f"XLA plan ops {ops!r}")
        return cls(_known(b), k, _known(f), tuple(ops))


def _entry(hlo_text: str) -> list[str]:
    """The instruction lines of the entry computation of an HLO module's text."""
    at = hlo_text.find("\nENTRY")
    at = at + 1 if at >= 0 else hlo_text.find("ENTRY")
    if at < 0:
        raise ValueError("no ENTRY computation in the HLO text")
    lines = []
    for line in hlo_text[at:].splitlines()[1:]:
        if line.strip() == "}":
            break
        if "=" in line:
            lines.append(line.strip())
    return lines


def _op(line: str) -> str | None:
    """``fusion:<kind>``, ``custom-call:<target>`` or the opcode of a kernel-launching
    instruction; None for one that launches nothing."""
    rhs = line.split("=", 1)[1]
    m = _OPCODE.search(rhs)
    if m is None or m.group(1) in _NO_KERNEL:
        return None
    op = m.group(1)
    if op == "fusion":
        kind = re.search(r"kind=(k\w+)", rhs)
        return f"fusion:{kind.group(1)}" if kind else op
    if op == "custom-call":
        target = re.search(r'custom_call_target="([^"]+)"', rhs)
        return f"custom-call:{target.group(1)}" if target else op
    return op


def _known(x: Any) -> float:
    """A cost-analysis figure, 0.0 where XLA does not know it (negative)."""
    return max(0.0, float(x))


def plan_from(hlo_text: str, cost: Any) -> XlaPlan:
    """The plan of a compiled program from its optimized HLO text (``compiled.as_text()``)
    and cost analysis (``compiled.cost_analysis()``: a dict, or a list of one)."""
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    ops = tuple(o for o in map(_op, _entry(hlo_text)) if o is not None)
    return XlaPlan(
        bytes=_known(cost.get("bytes accessed", 0.0)),
        kernels=max(1, len(ops)),
        flops=_known(cost.get("flops", 0.0)),
        ops=ops,
    )


def compile_plan(p: Problem, dtype: str, layout: str, precision: str = "default") -> XlaPlan:
    """Compiles XLA's dot on operands of ``p`` stored in ``layout`` for the default backend
    and returns its plan (no device memory is touched)."""
    import jax
    from jax import numpy as jnp

    from jax_tsm2.kernel_call import stored_shapes, xla_product

    dt = jnp.dtype(dtype)
    a, b = (jax.ShapeDtypeStruct(s, dt) for s in stored_shapes(p, layout))
    f = xla_product(layout, None if precision == "default" else precision)
    compiled = jax.jit(f).lower(a, b).compile()
    return plan_from(compiled.as_text(), compiled.cost_analysis())


@functools.cache
def _cached(key: tuple[Any, ...]) -> XlaPlan | None:
    _, p, dtype, layout, precision = key
    try:
        return compile_plan(p, dtype, layout, precision)
    except Exception:  # a plan only sharpens a prediction: never fail routing over it
        return None


def plan(p: Problem, dtype: str, layout: str, precision: str = "default") -> XlaPlan | None:
    """XLA's plan for the product on this process's GPU (cached), or None off a GPU or
    where it cannot be compiled."""
    import jax

    if p.empty or jax.default_backend() != "gpu":
        return None
    device_kind = jax.devices()[0].device_kind
    return _cached((device_kind, p, dtype, layout, precision))

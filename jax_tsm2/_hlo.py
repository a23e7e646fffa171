"""Which kernels of a compiled XLA module read a given buffer (for tests and benchmarks).

``readers(hlo_text, ...)`` parses ``jax.jit(f).lower(...).compile().as_text()`` and lists the
instructions that read an entry parameter (or another entry instruction's result), following
through ops that only alias a buffer (bitcast, tuple, get-tuple-element, opt-barrier, call),
and classifies each: a ``reduce`` (fusion), a ``product`` (dot / custom call), a ``slice``
(touches part of the buffer: dynamic-slice, in-place dynamic-update-slice), a ``conditional``
(reads it only in the branch taken) or ``other`` (a copy, a loop fusion: a full extra pass).
It is how ``tests/test_abft.py`` checks that each ABFT pass reads its matrix once, and what
``benchmarks/abft_overhead.py`` prints on the GPU. Names of fusions differ between backends and
XLA versions; opcodes and the called computations' contents are what is matched.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_HEADER = re.compile(r"^(ENTRY\s+)?%(\S+)\s.*\{\s*$")
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%(\S+)\s*=\s*(.*?)\s([a-z][\w\-]*)\((.*)$")
_CALLED = re.compile(
    r"(?:calls|to_apply|body|condition|true_computation|false_computation)=%([\w.\-]+)"
)
_INDEX = re.compile(r"\bindex=(\d+)")
_ALIASES = ("bitcast", "tuple", "get-tuple-element", "opt-barrier", "call")


class Instr(NamedTuple):
    name: str
    opcode: str
    shape: str
    operands: tuple[str, ...]
    called: tuple[str, ...]
    line: str


class Module(NamedTuple):
    entry: str
    computations: dict[str, dict[str, Instr]]


def _split_operands(rest: str) -> tuple[str, str]:
    """``rest`` starts just after ``opcode(``: the operand text and what follows it."""
    depth = 1
    for pos, ch in enumerate(rest):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0:
            return rest[:pos], rest[pos + 1 :]
    return rest, ""


def parse(hlo_text: str) -> Module:
    """The computations of an HLO module text, each a dict of its instructions by name."""
    comps: dict[str, dict[str, Instr]] = {}
    entry, current = "", None
    for line in hlo_text.splitlines():
        head = _HEADER.match(line)
        if head and "=" not in line.split("(")[0]:
            current = comps.setdefault(head.group(2), {})
            entry = head.group(2) if head.group(1) else entry
            continue
        if line.strip() == "}":
            current = None
            continue
        ins = _INSTR.match(line) if current is not None else None
        if ins is None:
            continue
        name, shape, opcode, rest = ins.groups()
        ops_text, attrs = _split_operands(rest)
        called = _CALLED.findall(attrs)
        branches = re.search(r"branch_computations=\{([^}]*)\}", attrs)
        if branches:
            called += re.findall(r"%([\w.\-]+)", branches.group(1))
        operands = tuple(re.findall(r"%([\w.\-]+)", ops_text))
        current[name] = Instr(name, opcode, shape, operands, tuple(called), line)
    return Module(entry, comps)


def _contains(module: Module, comp: str, opcodes: tuple[str, ...], seen=None) -> bool:
    seen = set() if seen is None else seen
    if comp in seen or comp not in module.computations:
        return False
    seen.add(comp)
    for ins in module.computations[comp].values():
        if ins.opcode in opcodes:
            return True
        if any(_contains(module, c, opcodes, seen) for c in ins.called):
            return True
    return False


def kind(module: Module, ins: Instr) -> str:
    """``product``, ``reduce``, ``conditional``, ``slice`` or ``other``; see the module doc."""
    if ins.opcode == "conditional":  # its branches run only when taken
        return "conditional"
    products = ("dot", "convolution", "custom-call")
    if ins.opcode in products or any(_contains(module, c, products) for c in ins.called):
        return "product"
    reduces = ("reduce", "reduce-window")  # XLA splits long reductions into the two
    if ins.opcode in reduces or any(_contains(module, c, reduces) for c in ins.called):
        return "reduce"
    slices = ("dynamic-slice", "dynamic-update-slice", "slice")
    if ins.opcode in slices or any(_contains(module, c, slices) for c in ins.called):
        return "slice"
    return "other"


def _param(module: Module, comp: str, index: int) -> str | None:
    for ins in module.computations[comp].values():
        if ins.opcode == "parameter" and re.search(rf"parameter\({index}\)", ins.line):
            return ins.name
    return None


def _follow(module: Module, comp: str, name: str, tuple_index: int | None, out: list) -> None:
    for user in module.computations[comp].values():
        if name not in user.operands:
            continue
        position = user.operands.index(name)
        if user.opcode in ("bitcast", "opt-barrier"):
            _follow(module, comp, user.name, tuple_index, out)
        elif user.opcode == "tuple":
            _follow(module, comp, user.name, position, out)
        elif user.opcode == "get-tuple-element":
            got = _INDEX.search(user.line)
            if tuple_index is None or (got and int(got.group(1)) == tuple_index):
                _follow(module, comp, user.name, None, out)
        elif user.opcode == "call" and user.called:
            callee = user.called[0]
            inner = _param(module, callee, position)
            if inner is not None:
                _follow(module, callee, inner, tuple_index, out)
        else:
            out.append(user)


def readers(hlo_text: str, *, parameter: int | None = None, shape: str | None = None) -> list:
    """``(kind, instruction)`` for each instruction that reads the given entry buffer.

    Args:
      hlo_text: ``compiled.as_text()``.
      parameter: the entry parameter's number (flattened argument order), or
      shape: the HLO shape string (e.g. ``"f32[96,48]"``) of the first entry instruction that
        produces it and is not itself a parameter (e.g. the product ``C``).

    >>> text = '''HloModule m
    ... ENTRY %main (p: f32[4,3]) -> f32[3] {
    ...   %p = f32[4,3]{1,0} parameter(0)
    ...   %z = f32[] constant(0)
    ...   ROOT %r = f32[3]{0} reduce(%p, %z), dimensions={0}, to_apply=%add
    ... }'''
    >>> [(k, ins.name) for k, ins in readers(text, parameter=0)]
    [('reduce', 'r')]
    """
    module = parse(hlo_text)
    entry = module.computations[module.entry]
    if parameter is not None:
        start = _param(module, module.entry, parameter)
    else:
        start = next(
            (
                i.name
                for i in entry.values()
                if i.opcode != "parameter" and i.shape.split("{")[0] == shape
            ),
            None,
        )
    if start is None:
        raise ValueError(f"no entry buffer {parameter=} {shape=} in the module")
    out: list[Instr] = []
    _follow(module, module.entry, start, None, out)
    return [(kind(module, ins), ins) for ins in out]


def reader_kinds(hlo_text: str, **which) -> list[str]:
    """Sorted kinds of ``readers(hlo_text, **which)``, e.g. ``['product', 'reduce']``."""
    return sorted(k for k, _ in readers(hlo_text, **which))


_TARGET = re.compile(r'custom_call_target="([^"]+)"')


def reader_labels(hlo_text: str, **which) -> list[str]:
    """``reader_kinds``, except that a custom call is labelled by its target, e.g.
    ``['custom-call:tsm2_colsums', 'product']`` (not every FFI kernel is a product).

    >>> text = '''HloModule m
    ... ENTRY %main (p: f32[4,3]) -> f32[2,3] {
    ...   %p = f32[4,3]{1,0} parameter(0)
    ...   ROOT %r = f32[2,3]{1,0} custom-call(%p), custom_call_target="tsm2_colsums"
    ... }'''
    >>> reader_labels(text, parameter=0)
    ['custom-call:tsm2_colsums']
    """
    out = []
    for k, ins in readers(hlo_text, **which):
        target = _TARGET.search(ins.line) if ins.opcode == "custom-call" else None
        out.append(f"custom-call:{target.group(1)}" if target else k)
    return sorted(out)

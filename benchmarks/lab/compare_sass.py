"""Compares the SASS of every kernel in two builds of the extension, function by function.

For a change that should only move code (a refactor, a tuning struct replacing a macro), the
compiled kernels must not change. This disassembles both shared objects with ``cuobjdump
-sass``, drops addresses and encodings, pairs the kernels by demangled name and reports the
ones whose instructions differ::

    python benchmarks/lab/compare_sass.py BASE.so NEW.so [--ignore-template-arg TYPE ...]

``--ignore-template-arg tsm2::STuning`` pairs a kernel that gained a tuning-struct template
parameter with its instantiation from before. ``--arch sm_90`` compares one architecture of
builds that carry several (each kernel is in the file once per architecture).
``cuobjdump`` and ``nvdisasm`` come from the CUDA toolkit on PATH or from the
``nvidia-cuda-cuobjdump`` and ``nvidia-cuda-nvdisasm`` wheels. Exit status: 0 when every
kernel is identical, 1 otherwise, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from collections import defaultdict


def _tool_dir() -> str | None:
    """A folder holding cuobjdump and nvdisasm: PATH's, else the NVIDIA wheels'."""
    found = shutil.which("cuobjdump")
    if found and shutil.which("nvdisasm"):
        return os.path.dirname(found)
    site = sysconfig.get_paths()["purelib"]
    for cand in sorted(glob.glob(os.path.join(site, "nvidia", "*", "bin"))):
        if os.path.exists(os.path.join(cand, "cuobjdump")):
            return cand
    return None


def kernels(path: str, tools: str, arch: str | None = None) -> dict[str, list[str]]:
    """{mangled name: instructions} of every kernel in the shared object at ``path`` (of
    architecture ``arch``, e.g. ``"sm_90"``, where given)."""
    env = dict(os.environ, PATH=tools + os.pathsep + os.environ.get("PATH", ""))
    text = subprocess.run(
        [os.path.join(tools, "cuobjdump"), "-sass", *(["-arch", arch] if arch else []), path],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout
    out: dict[str, list[str]] = defaultdict(list)
    name = None
    for line in text.splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            name = m.group(1)
            out[name] = []
            continue
        ins = re.sub(r"/\*[0-9a-f]{4,}\*/|/\* 0x[0-9a-f]+ \*/", "", line).strip()
        if name is not None and ins.endswith(";"):  # instructions, not the fatbin headers
            out[name].append(ins)
    return out


def demangle(names: list[str]) -> dict[str, str]:
    text = subprocess.run(
        ["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True
    ).stdout
    return dict(zip(names, text.splitlines(), strict=True))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", help="the shared object built before the change")
    parser.add_argument("new", help="the shared object built after it")
    parser.add_argument(
        "--ignore-template-arg",
        action="append",
        default=[],
        metavar="TYPE",
        help="a template argument the new build added (e.g. tsm2::STuning); repeatable",
    )
    parser.add_argument("--arch", help="compare this architecture only, e.g. sm_90")
    args = parser.parse_args(argv)
    for path in (args.base, args.new):
        if not os.path.isfile(path):
            parser.error(f"no such file: {path}")
    tools = _tool_dir()
    if tools is None:
        parser.error(
            "cuobjdump and nvdisasm not found (CUDA toolkit, or pip install "
            "nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)"
        )

    def canon(name: str) -> str:
        for arg in args.ignore_template_arg:
            name = name.replace(f", {arg}>", ">").replace(f", {arg},", ",")
        return name

    base, new = kernels(args.base, tools, args.arch), kernels(args.new, tools, args.arch)
    db, dn = demangle(list(base)), demangle(list(new))
    b = {db[k]: v for k, v in base.items()}
    n = {canon(dn[k]): v for k, v in new.items()}
    common = sorted(set(b) & set(n))
    changed = [k for k in common if b[k] != n[k]]
    instructions = sum(len(b[k]) for k in common)
    print(
        f"kernels: {len(b)} before, {len(n)} after; {len(common) - len(changed)} identical, "
        f"{len(changed)} changed ({instructions} instructions compared)"
    )
    for k in sorted(set(b) - set(n)):
        print("only before:", k)
    for k in sorted(set(n) - set(b)):
        print("only after:", k)
    for k in changed:
        print(f"changed: {k} ({len(b[k])} -> {len(n[k])} instructions)")
    return 0 if not changed and set(b) == set(n) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Runs the suite: ceilings first, then every case with every implementation, into records.

The result is one JSON-ready dict (format in README.md next to this file): metadata at the top
level and ``records``, one per (case, implementation).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime, timezone
from typing import Any

import jax

from jax_tsm2.bench import ceilings, env, report, timing
from jax_tsm2.bench.case import CaseRun
from jax_tsm2.bench.impls import Impl, jax_impls, load_torch, torch_impl, tsm2_available
from jax_tsm2.bench.options import Options
from jax_tsm2.bench.suite import Case, select_cases

SCHEMA = "jax_tsm2.bench"
SCHEMA_VERSION = 1

Log = Callable[[str], None]

__all__ = ["SCHEMA", "SCHEMA_VERSION", "Options", "run_suite", "stderr_log"]


def stderr_log(line: str) -> None:
    """Progress goes to stderr so stdout keeps only the final table."""
    print(line, file=sys.stderr, flush=True)


def _progress(
    index: int, total: int, case: Case, records: list[dict[str, Any]], secs: float
) -> str:
    parts = []
    for rec in sorted(records, key=lambda r: r["status"] != "ok"):
        if rec["status"] == "ok":
            pct = rec.get("pct_of_ceiling")
            gbps = f"{rec['gbps']:.0f} GB/s" + (f" {pct:.0f}%" if pct else "")
            parts.append(f"{rec['impl']} {rec['seconds'] * 1e6:.1f} us {gbps}")
        elif rec["status"].startswith("skipped"):
            parts.append(f"{rec['impl']} skipped")
        else:
            parts.append(f"{rec['impl']} {rec['status'][:80]}")
    width = len(str(total))
    head = f"[{index:>{width}}/{total}] {case.label:<22} {case.dtype:<4}"
    return f"{head}  " + " | ".join(parts) + f"  ({secs:.1f} s)"


def _measure_ceilings(
    opts: Options, device: env.Device, budget: int, dtypes: list[str], log: Log
) -> dict[str, Any]:
    t0 = time.perf_counter()
    log(f"measuring ceilings (read buffers {timing.fmt_bytes(opts.ceiling_buffer_bytes)}) ...")
    ceil = ceilings.measure_bandwidth(
        buffer_bytes=min(opts.ceiling_buffer_bytes, budget // 8),
        buffers=4,
        sm_count=device.sm_count,
        repeats=opts.repeats,
        seed=opts.seed,
    )
    ceil["compute_flops_per_s"] = (
        ceilings.measure_compute(
            dtypes, size=opts.compute_size, budget_bytes=budget, repeats=opts.repeats
        )
        if opts.compute_size
        else {}
    )
    read, secs = ceil["read_bytes_per_s"], time.perf_counter() - t0
    if read:
        log(f"ceilings ({secs:.1f} s): read {read / 1e9:.0f} GB/s ({ceil['read_method']})")
    else:
        log(f"ceilings ({secs:.1f} s): read not measured ({ceil.get('read_errors')})")
    return ceil


def run_suite(opts: Options, log: Log = stderr_log) -> dict[str, Any]:
    """Run the selected cases and return the result document (see README.md)."""
    prev_x64 = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)  # f64 operands; restored on the way out
    try:
        return _run(opts, log)
    finally:
        jax.config.update("jax_enable_x64", prev_x64)


def _run(opts: Options, log: Log) -> dict[str, Any]:
    started = time.perf_counter()
    date = datetime.now(timezone.utc).isoformat(timespec="seconds")
    platform = jax.devices()[0].platform
    torch, torch_reason = None, "disabled (--no-torch)"
    if opts.torch:
        if platform == "gpu":
            torch, torch_reason = load_torch()
        else:
            torch_reason = f"not run on {platform}: torch is timed on CUDA only"
    device = env.device_info(torch)
    budget = env.case_budget(device, opts.mem_fraction)
    cases = select_cases(opts.families, opts.dtypes, opts.mode, opts.m, opts.k, opts.n, opts.cases)

    wanted = set(opts.impls) if opts.impls is not None else None
    impls, skipped = [], {}
    tsm2_reason = tsm2_available()
    all_impls = jax_impls(opts.kernel_mode) + ([torch_impl(torch)] if torch is not None else [])
    for impl in all_impls:
        if wanted is not None and impl.name not in wanted:
            continue
        if impl.name == "tsm2" and tsm2_reason:
            skipped[impl] = tsm2_reason
        else:
            impls.append(impl)
    if torch is None and (wanted is None or "torch" in wanted):
        skipped[Impl("torch", "torch", "torch.matmul", lambda a, b: None)] = torch_reason

    log(
        f"jax_tsm2.bench: {len(cases)} cases on {device.name} ({platform}), "
        f"implementations: {', '.join(i.name for i in impls)}"
        + (
            f"; skipped: {', '.join(f'{i.name} ({r})' for i, r in skipped.items())}"
            if skipped
            else ""
        )
    )
    if platform == "gpu":
        ceil = _measure_ceilings(opts, device, budget, sorted({c.dtype for c in cases}), log)
    else:
        ceil = ceilings.skipped(f"not measured on {platform}")

    ctx = {
        "platform": platform,
        "device": device,
        "budget": budget,
        "ceilings": ceil,
        "gpu": device.name,
        "date": date,
        "torch": torch,
    }
    records: list[dict[str, Any]] = []
    for index, case in enumerate(cases, 1):
        t0 = time.perf_counter()
        case_records = CaseRun(case, ctx, opts).run(impls, skipped)
        report.add_speedups(case_records)
        records.extend(case_records)
        log(_progress(index, len(cases), case, case_records, time.perf_counter() - t0))

    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "gpu": device.name,
        "platform": platform,
        "date": date,
        "command_line": opts.command_line,
        "versions": env.versions(torch),
        "build_info": env.build_info(),
        "tsm2_custom_call_mode": env.custom_call_mode(),
        "device": device.to_json(),
        "ceilings": ceil,
        "impls": {i.name: i.description for i in impls},
        "impls_skipped": {i.name: why for i, why in skipped.items()},
        "options": {k: v for k, v in asdict(opts).items() if k != "command_line"},
        "case_budget_bytes": budget,
        "elapsed_seconds": None,
        "records": records,
    }
    doc["summary"] = report.summarize(doc)
    doc["elapsed_seconds"] = time.perf_counter() - started
    return doc

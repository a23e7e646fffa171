"""Runs the suite: ceilings first, then every case with every implementation, into records.

The result is one JSON-ready dict (format in README.md next to this file): metadata at the top
level and ``records``, one per (case, implementation). With ``Options.grid`` the cases are the
validation grid's random shapes (``grid.py``) and each runs its own implementations (routed,
XLA's dot, each kernel that takes it); with ``Options.model`` every record gets the model's
prediction (``predict.py``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from datetime import datetime, timezone
from types import ModuleType
from typing import Any

import jax

from jax_tsm2.bench import ceilings, env, grid, grid_report, predict, report, timing
from jax_tsm2.bench.case import CaseRun, plan_case
from jax_tsm2.bench.impls import Impl, jax_impls, load_torch, torch_impl, tsm2_available
from jax_tsm2.bench.options import Options
from jax_tsm2.bench.suite import Case, select_cases

SCHEMA = "jax_tsm2.bench"
# Version 2 names the summary's verdicts ``summary.checks``; version 1 files carry them as
# ``summary.bars`` (``--merge`` recomputes a file's summary in the current version).
SCHEMA_VERSION = 2

Log = Callable[[str], None]
Checkpoint = Callable[[dict[str, Any]], None]

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
    # The empty launch, planned as a product of a few bytes is: as many launches per call
    # and calls per sample as the smallest cases get.
    ctx = {"ceilings": ceil, "platform": "gpu", "budget": budget, "device": device}
    plan, rounds = plan_case(ceilings.LAUNCH_BYTES, 4, ceilings.LAUNCH_BYTES, ctx, opts)
    ceil.update(
        ceilings.measure_launch(
            calls=plan.calls, per_sample=plan.per_sample, repeats=rounds, warmup=opts.warmup
        )
    )
    read, secs = ceil["read_bytes_per_s"], time.perf_counter() - t0
    if read:
        log(f"ceilings ({secs:.1f} s): read {read / 1e9:.0f} GB/s ({ceil['read_method']})")
    else:
        log(f"ceilings ({secs:.1f} s): read not measured ({ceil.get('read_errors')})")
    launch = ceil["launch_seconds"]
    if launch:
        log(f"empty launch: {launch * 1e6:.2f} us ({ceil['launch_method']}, {plan.calls} per call)")
    else:
        log(f"empty launch: not measured ({ceil.get('launch_error')})")
    return ceil


def run_suite(
    opts: Options, log: Log = stderr_log, checkpoint: Checkpoint | None = None
) -> dict[str, Any]:
    """Run the selected cases and return the result document (see README.md).

    ``checkpoint``, if given, is called with the document (records so far, no summary) after
    every case, so that a run killed by a time limit leaves what it measured.
    """
    prev_x64 = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)  # f64 operands; restored on the way out
    try:
        return _run(opts, log, checkpoint)
    finally:
        jax.config.update("jax_enable_x64", prev_x64)


def _cases(opts: Options) -> list[Case]:
    if opts.grid:
        spec = grid.spec_for(opts.mode)
        drawn = grid.draw(opts.grid, opts.grid_seed, spec, opts.families, opts.dtypes)
        return drawn[opts.grid_start :]
    return select_cases(opts.families, opts.dtypes, opts.mode, opts.m, opts.k, opts.n, opts.cases)


def _impls(
    opts: Options, torch: ModuleType | None, torch_reason: str | None
) -> tuple[list[Impl], dict[Impl, str]]:
    """The implementations every case runs, and those skipped with the reason (the grid's
    cases choose their own: ``grid.impls_for``)."""
    wanted = set(opts.impls) if opts.impls is not None else None
    impls, skipped = [], {}
    tsm2_reason = tsm2_available()
    if opts.grid and tsm2_reason:
        raise RuntimeError(f"--grid needs jax_tsm2.matmul: {tsm2_reason}")
    all_impls = jax_impls(opts.kernel_mode) + ([torch_impl(torch)] if torch is not None else [])
    for impl in all_impls:
        if wanted is not None and impl.name not in wanted:
            continue
        if impl.name == "tsm2" and opts.autotune:
            impl = replace(impl, autotune=True, description=impl.description + ", autotune on")
        if impl.name == "tsm2" and tsm2_reason:
            skipped[impl] = tsm2_reason
        else:
            impls.append(impl)
    if torch is None and (wanted is None or "torch" in wanted):
        skipped[Impl("torch", "torch", "torch.matmul", lambda a, b: None)] = torch_reason
    return impls, skipped


def _run(opts: Options, log: Log, checkpoint: Checkpoint | None) -> dict[str, Any]:
    started = time.perf_counter()
    date = datetime.now(timezone.utc).isoformat(timespec="seconds")
    platform = jax.devices()[0].platform
    torch, torch_reason = None, "disabled (--no-torch)"
    if opts.grid:  # the grid compares the routed path with XLA's dot and our kernels only
        torch_reason = "not timed on the grid (it compares with XLA's dot and our kernels)"
    elif opts.torch:
        if platform == "gpu":
            torch, torch_reason = load_torch()
        else:
            torch_reason = f"not run on {platform}: torch is timed on CUDA only"
    device = env.device_info(torch)
    budget = env.case_budget(device, opts.mem_fraction)
    cases = _cases(opts)
    model_dev = predict.model_device() if (opts.model or opts.grid) else None
    wanted = set(opts.impls) if opts.impls is not None else None
    impls, skipped = _impls(opts, torch, torch_reason)
    impls_skipped = {i.name: why for i, why in skipped.items()}
    if opts.grid:
        impls, skipped = [], {}  # each grid case runs its own list, skipped ones get no records
        what = f"grid of {len(cases)} random shapes (seed {opts.grid_seed}"
        what += f", from shape {opts.grid_start})" if opts.grid_start else ")"
        routed = "tsm2 (auto, autotune on)" if opts.autotune else "tsm2 (auto)"
        what += f", implementations: {routed}, jnp and each TSM2 kernel that takes the shape"
    else:
        what = f"{len(cases)} cases, implementations: {', '.join(i.name for i in impls)}"
    head = f"jax_tsm2.bench: {what} on {device.name} ({platform})"
    skips = ", ".join(f"{name} ({why})" for name, why in impls_skipped.items())
    log(f"{head}; skipped: {skips}" if skips else head)
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
        "tsm2_autotune": opts.autotune,
        "device": device.to_json(),
        "ceilings": ceil,
        "impls": {i.name: i.description for i in impls},
        "impls_skipped": impls_skipped,
        "options": {k: v for k, v in asdict(opts).items() if k != "command_line"},
        "case_budget_bytes": budget,
        "elapsed_seconds": None,
        "records": [],
    }
    if opts.model:
        doc["model"] = predict.device_info(model_dev)
    if opts.grid:
        doc["grid"] = {
            "shapes": opts.grid,
            "start": opts.grid_start,
            "seed": opts.grid_seed,
            "families": list(opts.families),
            "dtypes": list(opts.dtypes),
            **grid.spec_for(opts.mode).to_json(),
        }
    for index, case in enumerate(cases, 1):
        t0 = time.perf_counter()
        if opts.time_budget_s and t0 - started > opts.time_budget_s:
            doc["stopped_early"] = {
                "cases_run": index - 1,
                "cases_planned": len(cases),
                "why": f"time budget of {opts.time_budget_s:.0f} s reached",
            }
            log(f"stopping: time budget reached after {index - 1} of {len(cases)} cases")
            break
        extra, case_impls = None, impls
        if opts.grid:
            case_impls = grid.impls_for(case, model_dev, wanted, opts.autotune)
            extra = {"grid": True, "grid_index": opts.grid_start + index - 1}
            doc["impls"].update({i.name: i.description for i in case_impls})
        case_records = CaseRun(case, ctx, opts, extra).run(case_impls, skipped)
        report.add_speedups(case_records)
        if opts.model:
            predict.annotate(case_records, case_impls, model_dev, platform, opts.kernel_mode)
        doc["records"].extend(case_records)
        line = _progress(index, len(cases), case, case_records, time.perf_counter() - t0)
        log(line + (grid_report.progress(case_records) if opts.grid else ""))
        if checkpoint is not None:
            doc["elapsed_seconds"] = time.perf_counter() - started
            checkpoint(doc)
    doc["summary"] = report.summarize(doc)
    doc["elapsed_seconds"] = time.perf_counter() - started
    return doc

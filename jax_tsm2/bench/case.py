"""Runs one case: plan the calls, draw operands, compute the reference, then check and time
each implementation into one record per implementation (fields in README.md)."""

from __future__ import annotations

import contextlib
import gc
import re
import statistics
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_tsm2.bench import report, timing
from jax_tsm2.bench.impls import Impl, tolerance
from jax_tsm2.bench.options import Options
from jax_tsm2.bench.suite import DTYPES, FAMILIES, Case
from jax_tsm2.problem import KERNEL_IDS

# Device-time estimate per product for planning: bytes over this bandwidth plus a launch.
_EST_BW = {"gpu": 2.5e12, "cpu": 5e9}
_EST_LAUNCH = {"gpu": 5e-6, "cpu": 5e-5}

_HOST_BYTES = 64 * 2**20  # below this, operands are drawn and checked on the host


@lru_cache(maxsize=64)
def _generator(shape: tuple[int, ...], dtype: str) -> Callable[[Any], Any]:
    gen_dtype = jnp.float64 if dtype == "f64" else jnp.float32
    target = DTYPES[dtype]
    return jax.jit(lambda key: jax.random.normal(key, shape, gen_dtype).astype(target))


def _operands(case: Case, calls: int, seed: int, on_host: bool) -> list[list[Any]]:
    """``calls`` distinct random normal buffers for each operand of the case (never zeros).

    Drawn with numpy and copied over on the CPU, or where all copies of an operand are small
    (no compile); otherwise with ``jax.random`` on the device (no host round trip for GBs).
    """
    shapes = FAMILIES[case.family].operand_shapes(case)
    salt = zlib.crc32(f"{case.label}:{case.dtype}".encode())
    dtype = DTYPES[case.dtype]
    rng = np.random.default_rng([seed, salt])
    keys = jax.random.split(jax.random.key(seed ^ salt), len(shapes) * calls)
    gen = np.float64 if case.dtype == "f64" else np.float32
    copies = []
    for i, shape in enumerate(shapes):
        if on_host or int(np.prod(shape)) * dtype.itemsize * calls <= _HOST_BYTES:
            draw = (rng.standard_normal(shape, dtype=gen).astype(dtype) for _ in range(calls))
            copies.append([jax.device_put(x) for x in draw])
        else:
            make = _generator(shape, case.dtype)
            copies.append([make(keys[i * calls + r]) for r in range(calls)])
    return jax.block_until_ready(copies)


def _host_rows(x: Any, rows: np.ndarray) -> tuple[np.ndarray, bool]:
    """Rows of a JAX array as float64 on the host, and whether all of ``x`` is finite."""
    if x.nbytes <= _HOST_BYTES:
        host = np.asarray(x).astype(np.float64)
        return host[rows], bool(np.isfinite(host).all())
    return np.asarray(x[rows]).astype(np.float64), bool(jnp.isfinite(x).all())


_CUSTOM_CALL = re.compile(r"custom_call\s*@(tsm2\w*)\((.*)$")
_KERNEL_ATTR = re.compile(r"\bkernel\s*=\s*(\d+)")


def _kernel_names() -> dict[int, str]:
    return {v: k for k, v in KERNEL_IDS.items()}


def route_of(lowered_text: str) -> str:
    """Which path a lowered program took: the tsm2 kernels it calls (``tsm2r``, ``tsm2l``,
    from the custom call's ``kernel`` attribute) or ``"xla"`` if it calls none."""
    names = _kernel_names()
    found = set()
    for line in lowered_text.splitlines():
        match = _CUSTOM_CALL.search(line)
        if match and match.group(1) != timing.CLOCK_TARGET:  # the harness's timer
            kernel = _KERNEL_ATTR.search(match.group(2))
            if kernel is None:
                found.add(match.group(1))
            else:
                found.add(names.get(int(kernel.group(1)), f"{match.group(1)}[{kernel.group(1)}]"))
    return ",".join(sorted(found)) if found else "xla"


def _explain(operands: Sequence[Any] | None) -> str | None:
    """``jax_tsm2.explain(a, b)`` if the library offers it (optional)."""
    if operands is None:
        return None
    try:
        import jax_tsm2

        fn = getattr(jax_tsm2, "explain", None)
        if fn is None:
            return None
        try:
            return str(fn(*operands, show=False))  # stdout keeps only the final table
        except TypeError:  # an explain without ``show``
            return str(fn(*operands))
    except Exception:
        return None


def _rel_error(got: np.ndarray, ref: np.ndarray) -> float:
    denom = float(np.linalg.norm(ref))
    return float(np.linalg.norm(got - ref)) / (denom if denom > 0 else 1.0)


def _check(
    out: Any,
    expect_shape: tuple[int, ...],
    finite: bool,
    got: np.ndarray,
    ref: np.ndarray,
    tol: float,
) -> tuple[str, str | None, float | None]:
    """(status, detail, rel_error) of one output against the reference rows."""
    if tuple(out.shape) != tuple(expect_shape):
        return "failed-check", f"shape {tuple(out.shape)} != {tuple(expect_shape)}", None
    if not finite:
        return "failed-check", "output has NaN or Inf", None
    err = _rel_error(got, ref)
    if not err <= tol:
        return "failed-check", f"relative error {err:.3g} > tolerance {tol:.3g}", err
    return "ok", None, err


def plan_case(
    input_bytes: int, output_bytes: int, min_bytes: int, ctx: dict[str, Any], opts: Options
) -> tuple[timing.Plan, int]:
    """The plan (products per call, calls per sample) and the number of timed rounds of a
    product of these sizes, from an estimate of its time: the bytes over the read ceiling
    (a guess where there is none yet) plus a launch. The empty launch is planned by the same
    rule (``runner``), so that it is timed as the smallest cases are."""
    bw = ctx["ceilings"].get("read_bytes_per_s") or _EST_BW.get(ctx["platform"], 5e9)
    est = min_bytes / bw + _EST_LAUNCH.get(ctx["platform"], 5e-5)
    plan = timing.make_plan(
        input_bytes,
        output_bytes,
        est,
        budget_bytes=ctx["budget"],
        l2_bytes=ctx["device"].l2_bytes,
        target_call_s=opts.target_call_s,
        target_sample_s=opts.target_sample_s,
        max_calls=opts.max_calls,
        per_sample=opts.per_sample,
    )
    rounds = opts.repeats
    if est < opts.short_case_s:
        rounds = max(opts.repeats, opts.short_repeats)
    return plan, rounds


def floor_of(min_bytes: int, ceilings: dict[str, Any]) -> tuple[float | None, str | None]:
    """``(floor_seconds, bound)`` of a product moving ``min_bytes``: the larger of the bytes
    over the read ceiling and the empty launch, and which of the two it is (``"bytes"`` or
    ``"launch"``); ``(None, None)`` where either was not measured."""
    read, launch = ceilings.get("read_bytes_per_s"), ceilings.get("launch_seconds")
    if not read or not launch:
        return None, None
    stream = min_bytes / read
    return (stream, "bytes") if stream >= launch else (launch, "launch")


class CaseRun:
    """Runs one case: plan, operands, reference, then each implementation."""

    def __init__(
        self, case: Case, ctx: dict[str, Any], opts: Options, extra: dict[str, Any] | None = None
    ):
        """``extra``: fields every record of this case carries (the grid's ``grid: true``)."""
        self.case, self.ctx, self.opts = case, ctx, opts
        self.family = FAMILIES[case.family]
        fam, c = self.family, case
        ceiling = ctx["ceilings"]["read_bytes_per_s"]
        floor, bound = floor_of(fam.min_bytes(c), ctx["ceilings"])
        self.base: dict[str, Any] = {
            "family": c.family,
            "case": c.label,
            "dtype": c.dtype,
            "m": c.m,
            "k": c.k,
            "n": c.n,
            "product": fam.product,
            "operand_shapes": [list(shape) for shape in fam.operand_shapes(c)],
            "output_shape": list(fam.output_shape(c)),
            "bytes": fam.min_bytes(c),
            "flops": fam.flops(c),
            "intensity": fam.flops(c) / fam.min_bytes(c),
            "ceiling_bytes_per_s": ceiling,
            "floor_seconds": floor,
            "floor_bound": bound,
            "gpu": ctx["gpu"],
            "date": ctx["date"],
            **({"app": c.source} if c.source else {}),
            **(extra or {}),
        }

    def record(self, impl: Impl, status: str, **fields: Any) -> dict[str, Any]:
        rec = dict(self.base, impl=impl.name, framework=impl.framework, status=status)
        rec.update({key: None for key in report.RECORD_OPTIONAL})
        if impl.kernel is not None or self.base.get("grid"):
            rec["kernel"] = impl.kernel
        rec.update(fields)
        seconds = rec.get("seconds")
        if seconds:
            rec["gbps"] = rec["bytes"] / seconds / 1e9
            rec["gflops"] = rec["flops"] / seconds / 1e9
            ceiling = rec["ceiling_bytes_per_s"]
            rec["pct_of_ceiling"] = 100.0 * rec["bytes"] / seconds / ceiling if ceiling else None
            floor = rec["floor_seconds"]
            rec["floor_fraction"] = floor / seconds if floor else None
        return rec

    def run(self, impls: list[Impl], skipped: dict[str, str]) -> list[dict[str, Any]]:
        fam, case, opts, ctx = self.family, self.case, self.opts, self.ctx
        plan, rounds = plan_case(
            fam.input_bytes(case), fam.output_bytes(case), fam.min_bytes(case), ctx, opts
        )
        records = [self.record(i, f"skipped: {why}") for i, why in skipped.items()]
        if plan.reason:
            return records + [self.record(i, f"skipped: {plan.reason}") for i in impls]
        self.plan, self.rounds = plan, rounds
        # Where a case's wall time goes (operands and reference, each implementation's
        # compile and check, its timed samples) is recorded: it is what bounds how many
        # cases fit in one command on a GPU machine.
        started = time.perf_counter()
        try:
            copies = _operands(case, plan.calls, opts.seed, ctx["platform"] == "cpu")
            rng = np.random.default_rng(opts.seed)
            rows = fam.check_rows(case, rng)
            ref = fam.reference([c[0] for c in copies], rows)
        except Exception as err:
            why = f"error: operands/reference: {type(err).__name__}: {first_line(err)}"
            return records + [self.record(i, why) for i in impls]
        self.base["setup_seconds"] = time.perf_counter() - started
        ready: list[_Ready] = []
        done: dict[int, dict[str, Any]] = {}
        overhead = None
        try:
            for index, impl in enumerate(impls):
                t0 = time.perf_counter()
                prep = self._prepare(impl, copies, rows, ref)
                if isinstance(prep, dict):  # failed its check, or could not run
                    prep["prepare_seconds"] = time.perf_counter() - t0
                    done[index] = prep
                    continue
                prep.fields["prepare_seconds"] = time.perf_counter() - t0
                prep.index = index
                if impl.framework == "jax" and overhead is None:
                    overhead = timing.host_overhead(copies)
                ready.append(prep)
            self._take_turns(ready)
            for prep in ready:
                done[prep.index] = self._finish(prep, overhead)
        finally:
            for prep in ready:
                prep.close()
        records += [done[i] for i in sorted(done)]
        del copies
        gc.collect()
        for rec in records:
            rec["case_seconds"] = time.perf_counter() - started
        return records

    def _take_turns(self, ready: list[_Ready]) -> None:
        """Warm-up samples, then rounds of one sample per implementation (timing.py's module
        docstring says why); an implementation that fails while timed leaves the rotation."""
        per_sample = self.plan.per_sample
        for prep in ready:
            try:
                for _ in range(self.opts.warmup):
                    prep.sample(per_sample)
            except Exception as err:
                prep.error = err
        for _ in range(self.rounds):
            for prep in ready:
                if prep.error is not None:
                    continue
                t0 = time.perf_counter()
                try:
                    prep.samples.append(prep.sample(per_sample))
                except Exception as err:
                    prep.error = err
                prep.wall += time.perf_counter() - t0

    def _finish(self, prep: _Ready, overhead: float | None) -> dict[str, Any]:
        impl, fields = prep.impl, prep.fields
        if prep.error is not None:
            err = prep.error
            why = f"error: {type(err).__name__}: {first_line(err)}"
            return self.record(
                impl, why, tolerance=fields.get("tolerance"), route=fields.get("route")
            )
        fields.update(self._timing_fields(prep.samples, prep.method))
        fields["timing_seconds"] = prep.wall
        try:
            fields.update(prep.diagnostics())
        except Exception as err:  # a diagnostic never costs the timing
            fields["note"] = f"diagnostic failed: {type(err).__name__}: {first_line(err)}"
        if impl.framework == "jax":
            fields["host_overhead_seconds"] = overhead
        return self.record(impl, "ok", **fields)

    def _timing_fields(self, samples: list[float], method: str) -> dict[str, Any]:
        return {
            "seconds": statistics.median(samples),
            "seconds_min": min(samples),
            "seconds_max": max(samples),
            "samples": samples,
            "calls": self.plan.calls,
            "per_sample": self.plan.per_sample,
            "timing_method": method,
        }

    def _prepare(
        self, impl: Impl, copies: list[list[Any]], rows: np.ndarray, ref: np.ndarray
    ) -> _Ready | dict[str, Any]:
        """Compile (or capture) and check one implementation: ready to be timed, or its
        final record."""
        if impl.framework == "jax":
            return self._prepare_jax(impl, copies, rows, ref)
        return self._prepare_torch(impl, copies, rows, ref)

    def _prepare_jax(
        self, impl: Impl, copies: list[list[Any]], rows: np.ndarray, ref: np.ndarray
    ) -> _Ready | dict[str, Any]:
        fam, case = self.family, self.case
        tol = tolerance(impl, case.dtype, fam.contraction(case))
        route = detail = None
        try:
            with _switches(impl):
                compiled, text = timing.compile_jax(lambda *ops: impl.apply(fam, *ops), copies)
            route = route_of(text)
            if impl.name == "tsm2":
                detail = _explain(fam.explain_operands([c[0] for c in copies]))
            outs = timing.run_jax(compiled, copies)
            first = outs[0]
            del outs
            got, finite = _host_rows(first, rows)
            status, why, err = _check(first, fam.output_shape(case), finite, got, ref, tol)
            if status == "ok" and first.dtype != DTYPES[case.dtype]:
                status, why = "failed-check", f"result dtype {first.dtype}, expected {case.dtype}"
            del first
            fields: dict[str, Any] = {"rel_error": err, "tolerance": tol, "route": route}
            fields["route_detail"] = detail
            fields["program"] = timing.program_digest(compiled)
            if status != "ok":
                return self.record(impl, status, detail=why, **fields)
        except Exception as err:
            return self.record(
                impl, f"error: {type(err).__name__}: {first_line(err)}", tolerance=tol, route=route
            )

        host: list[float] = []  # the host clock's samples, beside the device clock's

        def sample(per_sample: int) -> float:
            return timing.time_jax(
                compiled, copies, per_sample=per_sample, repeats=1, warmup=0, host=host
            )[0]

        def diagnostics() -> dict[str, Any]:
            isolated = timing.time_jax_isolated(compiled, copies)
            out = {"seconds_isolated": statistics.median(isolated)}
            if compiled.clocked:  # the warm-up sample is not timed
                out["seconds_host"] = statistics.median(host[self.opts.warmup :] or host)
            return out

        method = "jax-jit-device-clock" if compiled.clocked else "jax-jit-steady-state-host-clock"
        return _Ready(impl, fields, sample, method, diagnostics)

    def _prepare_torch(
        self, impl: Impl, copies: list[list[Any]], rows: np.ndarray, ref: np.ndarray
    ) -> _Ready | dict[str, Any]:
        fam, case, opts = self.family, self.case, self.opts
        torch: ModuleType = self.ctx["torch"]
        tol = tolerance(impl, case.dtype, fam.contraction(case))
        runner = None

        def close() -> None:
            if runner is not None:
                runner.close()
            torch.cuda.empty_cache()

        try:
            tcopies = [[torch.from_dlpack(x) for x in c] for c in copies]
            runner = timing.TorchRunner(torch, fam.apply, tcopies, graph=opts.torch_graph)
            del tcopies
            first = runner.first()
            got = first[torch.as_tensor(rows, device=first.device)].double().cpu().numpy()
            finite = bool(torch.isfinite(first).all())
            status, why, err = _check(first, fam.output_shape(case), finite, got, ref, tol)
            del first
            fields: dict[str, Any] = {"rel_error": err, "tolerance": tol, "note": runner.note}
            if status != "ok":
                close()
                return self.record(impl, status, detail=why, **fields)
        except Exception as err:
            close()
            return self.record(
                impl, f"error: {type(err).__name__}: {first_line(err)}", tolerance=tol
            )

        def sample(per_sample: int) -> float:
            return runner.time(per_sample=per_sample, repeats=1, warmup=0)[0]

        def diagnostics() -> dict[str, Any]:
            if runner.method == "torch-eager-events":
                return {}
            return {"seconds_eager": statistics.median(runner.time_eager())}

        return _Ready(impl, fields, sample, runner.method, diagnostics, close)


@dataclass
class _Ready:
    """An implementation that passed its check, waiting for its turns to be timed."""

    impl: Impl
    fields: dict[str, Any]
    sample: Callable[[int], float]  # seconds per product over ``per_sample`` calls
    method: str
    diagnostics: Callable[[], dict[str, Any]]  # taken after the samples, never decisive
    close: Callable[[], None] = lambda: None
    samples: list[float] = field(default_factory=list)
    error: BaseException | None = None
    index: int = 0
    wall: float = 0.0  # host seconds spent in its timed samples


def first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:300] if text else ""


@contextlib.contextmanager
def _switches(impl: Impl) -> Iterator[None]:
    """The jax_tsm2 custom-call mode and autotune switch to lower ``impl`` under (both are read
    at lowering, so compiling inside the block is enough), or no change."""
    with contextlib.ExitStack() as stack:
        if impl.custom_call_mode is not None or impl.autotune:
            import jax_tsm2

            if impl.custom_call_mode is not None:
                stack.enter_context(jax_tsm2.custom_call_mode(impl.custom_call_mode))
            if impl.autotune:
                stack.enter_context(jax_tsm2.autotune())
        yield

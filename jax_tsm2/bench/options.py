"""The options of a run: the command-line flags as data (``cli.py`` builds them)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from jax_tsm2.bench.suite import DEFAULT_DTYPES, DEFAULT_FAMILIES


@dataclass
class Options:
    """Everything that selects and tunes a run (the command-line flags, as data)."""

    # The grid draws from these too (the command line gives it every grid family and dtype).
    families: Sequence[str] = DEFAULT_FAMILIES
    dtypes: Sequence[str] = DEFAULT_DTYPES
    mode: str = "full"  # "full", "quick" or "tiny"
    m: Sequence[int] | None = None
    k: Sequence[int] | None = None
    n: Sequence[int] | None = None
    cases: Sequence[str] = ()
    impls: Sequence[str] | None = None  # None: every available implementation
    torch: bool = True
    torch_graph: bool = True
    kernel_mode: str = "always"  # custom-call mode of the tsm2_kernel column
    autotune: bool = False  # --autotune: the routed tsm2 column lowers with autotune on
    repeats: int = 5
    # Cases estimated under short_case_s take short_repeats samples: at ~10 us a product's
    # samples jump between two levels (on an H100, L f32 13007x38x7: 8.5 or 14 us in every
    # implementation), and five samples made the grid's verdict a coin toss.
    short_case_s: float = 20e-6
    short_repeats: int = 15
    warmup: int = 1
    per_sample: int | None = None  # None: adaptive (see timing.make_plan)
    target_call_s: float = 0.005
    target_sample_s: float = 0.02
    max_calls: int = 256
    mem_fraction: float = 0.45
    ceiling_buffer_bytes: int = 2**30
    compute_size: int = 8192  # N of the GEMM-rate ceiling (plot only); 0: not measured
    seed: int = 0
    model: bool = False  # --model: the performance model's prediction beside each time
    grid: int = 0  # --grid N: N random shapes (the validation grid) instead of the suite
    grid_seed: int = 0
    grid_start: int = 0  # run the grid's shapes from this index on (to split a grid in two)
    time_budget_s: float | None = None  # start no case after this many seconds of the run
    command_line: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

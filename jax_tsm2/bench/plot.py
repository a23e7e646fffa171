"""Roofline plot of a result document: one panel per dtype, log-log.

x is arithmetic intensity (FLOP per minimal byte), y achieved GFLOP/s; every timed case is a
point per implementation (colour) and family (marker). The measured read ceiling is the
sloped line ``y = ceiling * x``; the measured large-GEMM rate of the dtype, where there is one,
is the flat line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

_MARKERS = {"R": "o", "L": "s", "NT": "^", "TN": "v", "S": "D", "GRAD": "P"}


def roofline(doc: dict[str, Any], path: str | Path) -> Path:
    """Draw the roofline of ``doc`` into ``path`` (PNG) and return the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in doc["records"] if r["status"] == "ok" and r["gflops"]]
    dtypes = [d for d in ("f64", "f32", "bf16", "f16") if any(r["dtype"] == d for r in ok)] or [
        "f32"
    ]
    impls = list(doc["impls"])
    colors = {name: f"C{i}" for i, name in enumerate(impls)}
    ceil = doc["ceilings"]
    read = ceil.get("read_bytes_per_s")
    compute = ceil.get("compute_flops_per_s") or {}

    from matplotlib.lines import Line2D
    from matplotlib.ticker import NullFormatter

    fig, axes = plt.subplots(1, len(dtypes), figsize=(5.5 * len(dtypes), 4.6), squeeze=False)
    for ax, dtype in zip(axes[0], dtypes, strict=True):
        recs = [r for r in ok if r["dtype"] == dtype]
        peak = (compute.get(dtype) or {}).get("flops_per_s")
        xs = [r["intensity"] for r in recs] or [0.1, 10.0]
        lo, hi = min(xs) / 2, max(xs) * 2
        if read and peak:
            hi = max(hi, 2 * peak / read)  # show the ridge point
        x = np.logspace(np.log10(lo), np.log10(hi), 128)
        if read:
            y = read * x / 1e9
            if peak:
                y = np.minimum(y, peak / 1e9)
            ax.plot(x, y, "k-", lw=1.2)
        if peak:
            ax.axhline(peak / 1e9, color="k", ls=":", lw=0.8)
        for impl in impls:
            for fam, marker in _MARKERS.items():
                pts = [r for r in recs if r["impl"] == impl and r["family"] == fam]
                if pts:
                    xy = ([r["intensity"] for r in pts], [r["gflops"] for r in pts])
                    ax.scatter(*xy, c=colors[impl], marker=marker, s=24, alpha=0.75)
        handles = [Line2D([], [], color=colors[i], marker="o", ls="", label=i) for i in impls] + [
            Line2D([], [], color="gray", marker=_MARKERS[f], ls="", label=f"family {f}")
            for f in sorted({r["family"] for r in recs})
        ]
        if read:
            handles.append(Line2D([], [], color="k", label=f"read {read / 1e9:.0f} GB/s"))
        if peak:
            label = f"GEMM {peak / 1e12:.0f} TFLOP/s"
            handles.append(Line2D([], [], color="k", ls=":", label=label))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_title(dtype)
        ax.set_xlabel("arithmetic intensity (FLOP / minimal byte)")
        ax.set_ylabel("achieved GFLOP/s")
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(handles=handles, fontsize=7, loc="upper left")
    fig.suptitle(f"jax_tsm2 roofline: {doc['gpu']} ({doc['date'][:10]})")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path

"""Benchmark plot: TFLOP/s against sequence length for portattn and each SDPA backend, one panel per
(dtype, head dim, causal). Needs matplotlib (imported only here); works from a ``portattn bench --json`` file
on any machine.
"""
from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

from .bench import SDPA_BACKENDS, BenchRow


def require_matplotlib() -> None:
    """Raise ``ImportError`` with an install hint when matplotlib is missing."""
    if importlib.util.find_spec("matplotlib") is None:
        raise ImportError("plotting needs matplotlib: pip install matplotlib")


def load_rows(path: str | Path) -> tuple[list[BenchRow], dict]:
    """The rows and metadata of a ``portattn bench --json`` file."""
    data = json.loads(Path(path).read_text())
    try:
        return [BenchRow(**r) for r in data["rows"]], dict(data.get("meta", {}))
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{path} is not a portattn bench JSON file ({exc})") from None


def plot_rows(rows: list[BenchRow], path: str | Path, meta: dict | None = None) -> Path:
    """Write the plot of ``rows`` to ``path`` (format from the suffix, e.g. ``.png``); returns the path."""
    require_matplotlib()
    from matplotlib.figure import Figure

    if not rows:
        raise ValueError("no benchmark rows to plot")
    panels = sorted({(r.dtype, r.head_dim, r.causal) for r in rows})
    cols = min(len(panels), 4)
    nrows = math.ceil(len(panels) / cols)
    fig = Figure(figsize=(4.2 * cols, 3.4 * nrows), layout="constrained")
    axes = fig.subplots(nrows, cols, squeeze=False).ravel()
    for ax, (dtype, d, causal) in zip(axes, panels):
        sel = sorted((r for r in rows if (r.dtype, r.head_dim, r.causal) == (dtype, d, causal)),
                     key=lambda r: r.seqlen)
        n = [r.seqlen for r in sel]
        ax.plot(n, [r.portattn_tflops for r in sel], marker="o", linewidth=2, label="portattn")
        for name in SDPA_BACKENDS:
            pts = [(r.seqlen, r.sdpa_tflops.get(name)) for r in sel if r.sdpa_tflops.get(name) is not None]
            if pts:
                ax.plot(*zip(*pts), marker="s", linestyle="--", label=f"SDPA {name}")
        ax.set_xscale("log", base=2)
        ax.set_xticks(n, [str(x) for x in n])
        ax.set_ylim(bottom=0)
        mode = " backward" if sel[0].mode == "backward" else ""
        ax.set_title(f"{dtype}, d={d}, {'causal' if causal else 'non-causal'}{mode}")
        ax.set_xlabel("sequence length")
        ax.set_ylabel("TFLOP/s")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    meta = meta or {}
    if meta:
        fig.suptitle(", ".join(f"{k} {v}" for k, v in meta.items()))
    out = Path(path)
    fig.savefig(out, dpi=120)
    return out

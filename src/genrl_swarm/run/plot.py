"""The reward curve of a run: every local peer's own reward per round, and eval accuracy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from genrl_swarm.run.metrics import read_metrics


def pyplot() -> Any | None:
    """matplotlib.pyplot on the file-only Agg backend, or None without matplotlib (plots are optional)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def save_figure(fig: Any, ax: Any, out: Path, *, xlabel: str, ylabel: str, title: str) -> Path:
    """Label, grid and legend the axes the same way for every curve the project writes, save, close."""
    import matplotlib.pyplot as plt

    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def plot_rewards(run_dir: Path) -> Path | None:
    """Write ``<run_dir>/reward_curve.png`` from the peers' metrics.jsonl; None without matplotlib."""
    plt = pyplot()
    if plt is None:
        return None
    files = sorted(run_dir.glob("*/metrics.jsonl"))
    if not files:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    for path in files:
        rows = read_metrics(path)
        line = ax.plot([r["round"] for r in rows], [r["reward/own"] for r in rows], label=path.parent.name)[0]
        evals = [r for r in rows if "eval/reward" in r]
        if evals:
            ax.plot([r["round"] for r in evals], [r["eval/reward"] for r in evals], "--o", color=line.get_color(), label=f"{path.parent.name} eval")
    return save_figure(fig, ax, run_dir / "reward_curve.png", xlabel="round", ylabel="mean reward", title=run_dir.name)

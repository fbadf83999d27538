"""The per-task reward table and curve of an agent run, from its peers' metrics.jsonl.

Usage: ``python -m genrl_swarm.games.agent.report runs/demo-agent`` prints one row per round and
peer (mean reward and model turns per task kind, as the learner logged them: ``agent/<kind>/...``),
then the held-out results that ``benchmarks/bench_agent_demo.py --json <run dir>/heldout_<label>.json``
wrote there (``before``, then each peer's ``after``: success, parsable calls), and writes
``<run dir>/agent_reward_curve.png`` (when matplotlib is installed).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from genrl_swarm.run.metrics import read_metrics
from genrl_swarm.run.plot import pyplot, save_figure


def task_rows(run_dir: Path) -> tuple[list[str], list[dict[str, Any]]]:
    """(task kinds, rows of round, peer and ``agent/*`` metrics) of every peer of the run."""
    rows = [row for path in sorted(run_dir.glob("*/metrics.jsonl")) for row in read_metrics(path)]
    kinds = sorted({k.split("/")[1] for row in rows for k in row if k.startswith("agent/") and k.endswith("/reward")})
    return kinds, sorted(rows, key=lambda r: (r["round"], r["peer"]))


def table(run_dir: Path) -> str:
    kinds, rows = task_rows(run_dir)
    head = ["round", "peer", *(f"{k} reward" for k in kinds), *(f"{k} turns" for k in kinds), "trained"]
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for row in rows:
        cells = [str(row["round"] + 1), str(row["peer"])]
        cells += [_num(row.get(f"agent/{k}/reward")) for k in kinds] + [_num(row.get(f"agent/{k}/turns"), 1) for k in kinds]
        lines.append(" | ".join([*cells, str(int(row.get("train/sequences", 0)))]))
    return "\n".join(f"| {line} |" for line in lines)


def heldout_table(run_dir: Path) -> str | None:
    """One row per held-out result file and task kind (``before`` first), or None without any."""
    paths = sorted(run_dir.glob("heldout_*.json"), key=lambda p: (p.stem != "heldout_before", p.stem))
    if not paths:
        return None
    head = ["held-out", "task", "N", "success", "parsable call", "answer", "wall"]
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for path in paths:
        result = json.loads(path.read_text())
        for s in result.get("scores", []):
            cells = [path.stem.removeprefix("heldout_"), str(s["kind"]), str(s["n"]), _num(s["success"]), _num(s["call"]), _num(s["answer"])]
            lines.append(" | ".join([*cells, f"{float(result.get('wall_s', 0.0)):.0f}s"]))
    return "\n".join(f"| {line} |" for line in lines)


def _num(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{float(value):.{digits}f}"


def plot(run_dir: Path) -> Path | None:
    """Reward per task kind and round (each peer a line style); None without matplotlib."""
    plt = pyplot()
    if plt is None:
        return None
    kinds, rows = task_rows(run_dir)
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    for style, peer in zip(("-o", "--s", ":^", "-.v"), sorted({r["peer"] for r in rows})):
        mine = [r for r in rows if r["peer"] == peer]
        for kind in kinds:
            points = [(r["round"] + 1, r[f"agent/{kind}/reward"]) for r in mine if f"agent/{kind}/reward" in r]
            ax.plot([x for x, _ in points], [y for _, y in points], style, label=f"{kind} ({peer})")
    return save_figure(
        fig, ax, run_dir / "agent_reward_curve.png", xlabel="round", ylabel="mean episode reward", title=f"{run_dir.name}: reward per task"
    )


def main(argv: list[str] | None = None) -> int:
    run_dir = Path((argv if argv is not None else sys.argv[1:] or ["runs/demo-agent"])[0])
    print(table(run_dir))
    heldout = heldout_table(run_dir)
    if heldout:
        print(heldout)
    out = plot(run_dir)
    print(f"reward curve per task: {out}" if out else "no curve (matplotlib missing or no rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The numbers the issue asks for, from a simulation's rounds, and a table of them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from genrl_swarm.sim.model import SimConfig
from genrl_swarm.sim.outcome import RoundOutcome


@dataclass(frozen=True)
class Summary:
    strategy: str
    peers: int
    rounds: int
    payload_kb: float
    hostile: float
    churn_per_hour: float
    received: float  # wanted payloads received by the deadline (clean ones; want = min(k, live members - 1))
    round_p50: float
    round_p95: float
    exchange_p50: float
    exchange_p95: float
    mb_in: float  # per peer per round
    mb_out: float
    mb_out_p95: float
    dirty: int  # forged or over-budget payloads accepted by honest peers (target: 0)
    copies: int  # copies accepted because the original was not pulled too
    far_future_moves: int  # rounds in which a far-future announcement moved honest peers
    catch_up_p50: float  # a rejoining peer: seconds to its first full round
    catch_up_n: int
    churn_events: int
    wall_s: float


def _pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


def summarize(cfg: SimConfig, want: int, outcomes: Sequence[RoundOutcome], moves: int, catch_up: list[float], churn: int, wall: float) -> Summary:
    clean = np.concatenate([o.clean for o in outcomes])
    wanted = np.concatenate([np.full(len(o.clean), max(min(want, o.available), 1)) for o in outcomes])
    round_s = np.concatenate([o.round_s for o in outcomes])
    exchange_s = np.concatenate([o.exchange_s for o in outcomes])
    mb_in = np.concatenate([o.bytes_in for o in outcomes]) / 1e6
    mb_out = np.concatenate([o.bytes_out for o in outcomes]) / 1e6
    return Summary(
        strategy=cfg.strategy,
        peers=cfg.peers,
        rounds=cfg.rounds,
        payload_kb=cfg.payload_bytes / 1024,
        hostile=cfg.hostile_fraction,
        churn_per_hour=cfg.churn.per_hour,
        received=float(np.minimum(clean, wanted).sum() / wanted.sum()) if len(clean) else 0.0,
        round_p50=_pct(round_s, 50),
        round_p95=_pct(round_s, 95),
        exchange_p50=_pct(exchange_s, 50),
        exchange_p95=_pct(exchange_s, 95),
        mb_in=float(mb_in.mean()) if len(mb_in) else 0.0,
        mb_out=float(mb_out.mean()) if len(mb_out) else 0.0,
        mb_out_p95=_pct(mb_out, 95),
        dirty=sum(o.dirty for o in outcomes),
        copies=sum(o.copies for o in outcomes),
        far_future_moves=moves,
        catch_up_p50=_pct(np.array(catch_up), 50),
        catch_up_n=len(catch_up),
        churn_events=churn,
        wall_s=wall,
    )


COLUMNS = (
    ("strategy", "strategy", "{}"),
    ("N", "peers", "{:,}"),
    ("payload KB", "payload_kb", "{:.0f}"),
    ("hostile", "hostile", "{:.0%}"),
    ("churn/h", "churn_per_hour", "{:g}"),
    ("received", "received", "{:.1%}"),
    ("round p50 s", "round_p50", "{:.1f}"),
    ("round p95 s", "round_p95", "{:.1f}"),
    ("exch p50 s", "exchange_p50", "{:.2f}"),
    ("exch p95 s", "exchange_p95", "{:.2f}"),
    ("MB in/peer", "mb_in", "{:.2f}"),
    ("MB out/peer", "mb_out", "{:.2f}"),
    ("bad accepted", "dirty", "{}"),
    ("copies", "copies", "{}"),
    ("catch-up s", "catch_up_p50", "{:.1f}"),
    ("wall s", "wall_s", "{:.1f}"),
)


def table(rows: Sequence[Summary]) -> str:
    """A Markdown table of summaries (the format of docs/simulation.md's tables)."""
    head = "| " + " | ".join(c[0] for c in COLUMNS) + " |"
    rule = "|" + "|".join("---" for _ in COLUMNS) + "|"
    body = ["| " + " | ".join(fmt.format(asdict(r)[key]) for _, key, fmt in COLUMNS) + " |" for r in rows]
    return "\n".join([head, rule, *body])

"""The page's data: one JSON-able snapshot built from the watched runs, the chain and peers' status.

Everything a peer wrote about *another* peer (its id in ``reward/peer/<id>`` and
``dropped/<id>``, drop reasons) is untrusted text: it is clipped here and the page renders it
as text only. Values that are not finite numbers are ignored rather than trusted.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genrl_swarm.core.types import DropKind
from genrl_swarm.dashboard.downsample import buckets, series
from genrl_swarm.dashboard.runs import HELDOUT, HELDOUT_BEFORE, MAX_ROUND, MAX_STAGES, SUCCESS, PeerLog, count, num
from genrl_swarm.run.events import clip

PEER_REWARD = "reward/peer/"
VALUE_BUDGET = 60_000  # numbers per chart across all its series; a peer's curve gets a share
STALE_S = 120.0  # seconds without a write before an unfinished run reads as stopped (at least)
MAX_REMOTE_PEERS = 256  # peers in the table only because others saw them: the most dropped first


#: What a drop kind means, for people (the kinds are DropKind's values; anything else is shown clipped).
KIND_LABELS = {
    DropKind.PAYLOAD: "bad payload",
    DropKind.EQUIVOCATION: "equivocation",
    DropKind.FORGED: "forged work",
    DropKind.BUDGET: "over budget",
    DropKind.CPU: "too slow to check",
    DropKind.REFUSED: "refused",
    DropKind.SCORING: "scoring failed",
    DropKind.COPY: "copy",
    DropKind.LATE: "late",
    DropKind.VIEW: "different view",
    DropKind.FOREIGN: "not a task here",
    DropKind.LOCAL: "this peer's settings",
    DropKind.FRESH: "newcomer, not read",
}


def kind_label(event: Mapping[str, Any]) -> str:
    """The readable kind of a drop, quarantine or omission event."""
    if event.get("kind") == "quarantine":
        return "quarantined"
    if event.get("kind") == "drops_omitted":
        return "omitted"
    drop = str(event.get("drop", ""))
    return KIND_LABELS[DropKind(drop)] if drop in DropKind._value2member_map_ else clip(drop or "dropped", 32)


def reason_text(event: Mapping[str, Any]) -> str:
    """The event's sentence without a leading copy of its kind ("late: late: no commitment" reads "late: no commitment")."""
    reason = str(event.get("reason", ""))
    drop = str(event.get("drop", ""))
    if drop and reason.lower().startswith(drop.lower() + ":"):
        reason = reason[len(drop) + 1 :].lstrip()
    return clip(reason)


def _sum(row: Mapping[str, Any], prefix: str) -> float | None:
    """Sum of the row's values whose key starts with ``prefix`` (per-stage timings)."""
    found = [v for k, value in row.items() if k.startswith(prefix) and (v := num(value)) is not None]
    return sum(found) if found else None


def timings(row: Mapping[str, Any]) -> dict[str, float | None]:
    """Seconds of one round: generation, exchange (every stage) and training."""
    return {"generate": _sum(row, "time/generate_s"), "exchange": _sum(row, "time/exchange_s"), "train": _sum(row, "time/train")}


@dataclass
class Observed:
    """A peer as the others saw it: its bodies they dropped, their quarantines of it, their scores."""

    dropped: float = 0.0
    quarantined_by: int = 0
    quarantines: int = 0
    score_sum: float = 0.0
    scorers: int = 0


def namer(logs: Sequence[PeerLog]) -> Callable[[str, str], str]:
    """How a peer is named on the page: its id, or ``<run>/<id>`` when several runs are watched,
    so two runs' ``peer-0`` stay two rows and two curves instead of being merged silently."""
    if len({log.run for log in logs}) <= 1:
        return lambda run, peer: clip(peer)
    return lambda run, peer: clip(f"{run}/{peer}")


def _current(log: PeerLog) -> tuple[int, int]:
    """(round, stages done in it): the round in progress, or the one after the last row."""
    next_round = log.last_round + 1 if log.last_round is not None else count(log.start.get("start_round")) or 0
    if log.stage is not None and log.stage[0] >= next_round:
        return log.stage[0], log.stage[1] + 1
    return next_round, 0


def _observed(logs: Sequence[PeerLog]) -> dict[str, Observed]:
    seen: defaultdict[str, Observed] = defaultdict(Observed)
    name = namer(logs)
    for log in logs:
        for sender, n in log.dropped_by.items():
            seen[name(log.run, sender)].dropped += n
        me = log.peer
        if log.rows:
            for key, value in log.last.items():
                if key.startswith(PEER_REWARD) and (v := num(value)) is not None and key[len(PEER_REWARD) :] != me:
                    seen[name(log.run, key[len(PEER_REWARD) :])].score_sum += v
                    seen[name(log.run, key[len(PEER_REWARD) :])].scorers += 1
        now = _current(log)[0]
        for sender, event in log.quarantines.items():
            seen[name(log.run, sender)].quarantines += sum(1 for e in log.incidents if e.get("kind") == "quarantine" and e.get("sender") == sender)
            if isinstance(event.get("until"), int) and now < event["until"]:
                seen[name(log.run, sender)].quarantined_by += 1
    return seen


def _reasons(logs: Sequence[PeerLog]) -> dict[str, list[str]]:
    """Per sender, its distinct recent drop and quarantine reasons, newest first (at most 3)."""
    name = namer(logs)
    events = sorted(
        ((log.run, e) for log in logs for e in log.incidents if isinstance(e.get("sender"), str)), key=lambda re: -(num(re[1].get("t")) or 0.0)
    )
    out: defaultdict[str, list[str]] = defaultdict(list)
    for run, e in events:
        reason = reason_text(e)
        text = clip(f"{kind_label(e)}: {reason}" if reason else kind_label(e))
        mine = out[name(run, e["sender"])]
        if text not in mine and len(mine) < 3:
            mine.append(text)
    return out


def _status(status: Mapping[str, Any]) -> dict[str, Any]:
    """A live status's fields, numbers finite and bounded, text clipped."""
    out: dict[str, Any] = {}
    for key, value in status.items():
        if key in ("id", "local"):
            continue
        if isinstance(value, bool) or value is None:
            out[key] = value
        elif isinstance(value, int):
            out[key] = count(value)
        elif isinstance(value, float):
            out[key] = num(value)
        elif isinstance(value, str):
            out[key] = clip(value)
    return out


def _top_remote(seen: Mapping[str, Observed], local: Iterable[str], keep: int) -> tuple[set[str], int]:
    """The ``keep`` peers seen only by others with the most drops (then quarantines, scores), and how many are left out."""
    remote = [peer for peer in seen if peer not in local]
    if len(remote) <= keep:
        return set(remote), 0
    remote.sort(key=lambda p: (-seen[p].dropped, -seen[p].quarantined_by, -seen[p].quarantines, -seen[p].scorers, p))
    return set(remote[:keep]), len(remote) - keep


def peer_rows(logs: Sequence[PeerLog], statuses: Mapping[str, Mapping[str, Any]], omitted: list[int] | None = None) -> list[dict[str, Any]]:
    """The table: every peer with a folder, every live status, and the MAX_REMOTE_PEERS peers
    others scored or dropped the most (how many more is added to ``omitted``)."""
    seen, reasons, name = _observed(logs), _reasons(logs), namer(logs)
    rows: dict[str, dict[str, Any]] = {}
    for log in logs:
        last = log.last
        evals = log.series.get("eval/reward", {})
        current, stage = _current(log)
        rows[name(log.run, log.peer)] = {
            "id": name(log.run, log.peer),
            "run": clip(log.run),
            "backend": clip(str(log.start.get("backend", ""))) or None,
            "round": current,
            "stage": stage,
            "stages": count(log.start.get("stages"), MAX_STAGES, 1),
            "max_rounds": count(log.start.get("max_rounds"), MAX_ROUND),
            "rounds_done": len(log.rows),
            "last_seen": round(log.last_seen, 3) or None,
            "reward": num(last.get("reward/own")),
            "eval": evals[max(evals)] if evals else None,
            "cumulative": num(last.get("reward/cumulative")),
            "wins": num(last.get("wins")),
            "latency": timings(last)["exchange"],
            "drops_made": _sum(last, "trust/dropped_"),
            "quarantining": num(last.get("trust/quarantined")),
            "local": True,
        }
    for peer, status in statuses.items():
        row = rows.setdefault(clip(peer), {"id": clip(peer), "local": False})
        row.update(_status(status))
    kept, left_out = _top_remote(seen, rows, MAX_REMOTE_PEERS)
    if omitted is not None:
        omitted.append(left_out)
    for peer, obs in seen.items():
        if peer not in rows and peer not in kept:
            continue
        row = rows.setdefault(peer, {"id": peer, "local": False, "backend": "remote"})
        row["scored"] = round(obs.score_sum / obs.scorers, 5) if obs.scorers else None
    for peer, row in rows.items():
        obs = seen.get(peer, Observed())
        row |= {"dropped": obs.dropped, "quarantined_by": obs.quarantined_by, "quarantines": obs.quarantines, "reasons": reasons.get(peer, [])}
    return sorted(rows.values(), key=lambda r: r["id"])


def leaderboard(logs: Sequence[PeerLog]) -> list[dict[str, Any]]:
    """Each peer's own tally from its last row (the coordinator's books), ranked within its game:
    a bandit's cumulative reward and an LM's are not one scale, so games are never ranked
    together. Games in name order, best first in each; ``rank`` counts from 1 per game."""
    name = namer(logs)
    out: list[dict[str, Any]] = [
        {
            "id": name(log.run, log.peer),
            "game": log.game,
            "run": clip(log.run),
            "cumulative": num(log.last.get("reward/cumulative")) or 0.0,
            "wins": int(num(log.last.get("wins")) or 0),
            "rounds": len(log.rows),
        }
        for log in logs
        if log.rows
    ]
    out.sort(key=lambda r: (r["game"], -r["cumulative"], -r["wins"], r["id"]))
    for i, row in enumerate(out):
        row["rank"] = 1 if i == 0 or out[i - 1]["game"] != row["game"] else out[i - 1]["rank"] + 1
    return out


def _stale_after(logs: Sequence[PeerLog]) -> float:
    """Seconds without a write after which a run that has not done its rounds counts as stopped:
    STALE_S, or five of its slowest peer's last round (a long LM round is not a stop)."""
    seconds = [sum(v for v in timings(log.last).values() if v is not None) for log in logs]
    return max(STALE_S, 5 * max(seconds, default=0.0))


def progress(logs: Sequence[PeerLog], now: float) -> list[dict[str, Any]]:
    """Per watched run, where it is, apart from the others (two runs' rounds are not one count):
    its game, ``finished`` (every peer did its planned rounds: the run writes no end event, so
    the rows are the proof), ``stopped`` (no write for ``_stale_after`` seconds before that) or
    ``running``; the rounds every peer has done, the planned rounds and stages, the furthest
    round and how many peers are at each round."""
    by_run: defaultdict[str, list[PeerLog]] = defaultdict(list)
    for log in logs:
        by_run[log.run].append(log)
    out = []
    for run, members in sorted(by_run.items()):
        planned = [count(log.start.get("max_rounds"), MAX_ROUND) for log in members]
        done = [log.last_round + 1 if log.last_round is not None else 0 for log in members]
        last_write = max(log.last_seen for log in members)
        if all(m is not None and d >= m for m, d in zip(planned, done, strict=True)):
            state = "finished"
        elif last_write and now - last_write > _stale_after(members):
            state = "stopped"
        else:
            state = "running"
        currents = [_current(log) for log in members]
        stages = [s for log in members if (s := count(log.start.get("stages"), MAX_STAGES, 1)) is not None]
        out.append({
            "run": clip(run),
            "game": next((log.game for log in members if log.start.get("game")), members[0].game),
            "state": state,
            "rounds_done": min(done),
            "max_rounds": max((m for m in planned if m is not None), default=None),
            "round": max(r for r, _ in currents),
            "stages": max(stages, default=None),
            "peers_at": sorted([r, n] for r, n in Counter(r for r, _ in currents).items()),
            "last_write": round(last_write, 3) or None,
        })  # fmt: skip
    return out


def overall(states: Sequence[Mapping[str, Any]]) -> str:
    """The badge: ``finished`` when every run is, ``stopped`` when none is running, else ``running``."""
    if not states or any(s["state"] == "running" for s in states):
        return "running"
    return "finished" if all(s["state"] == "finished" for s in states) else "stopped"


def peer_curves(logs: Sequence[PeerLog], values: Mapping[Path, Mapping[int, float]], max_points: int) -> dict[str, Any]:
    """One value per peer and x (``values``: peer folder -> x -> value) as curves per peer (named as
    in the snapshot) and their mean per run (two runs are never merged), on the x where some peer
    has one, cut to at most ``max_points`` buckets within the per-chart value budget."""
    name = namer(logs)
    xs = sorted({x for v in values.values() for x in v})
    runs = sorted({log.run for log in logs})
    share = max(16, min(max_points, VALUE_BUDGET // max(1, len(logs) + len(runs))))
    groups = buckets(xs, share)
    peers = {name(log.run, log.peer): series(values[log.directory], groups) for log in logs if values.get(log.directory)}
    means: dict[str, list[float | None]] = {}
    for run in runs:
        pooled: defaultdict[int, list[float]] = defaultdict(list)
        for log in logs:
            if log.run == run:
                for x, v in values.get(log.directory, {}).items():
                    pooled[x].append(v)
        if pooled:
            label = "swarm mean" if len(runs) == 1 else clip(f"{run} mean")
            means[label] = series({x: sum(v) / len(v) for x, v in pooled.items()}, groups)
    return {"x": [g[0] for g in groups], "peers": peers, "means": means}


def heldout(logs: Sequence[PeerLog], max_points: int) -> dict[str, Any] | None:
    """Held-out accuracy against rounds trained, or None when no peer logs it: x = 0 is the
    evaluation before training, and a row of round r holds the one after r + 1 rounds."""
    values = {log.directory: _trained(log) for log in logs}
    return peer_curves(logs, values, max_points) if any(values.values()) else None


def _trained(log: PeerLog) -> dict[int, float]:
    before = log.series.get(HELDOUT_BEFORE, {})
    after = {r + 1: v for r, v in log.series.get(HELDOUT, {}).items()}
    return ({0: before[min(before)]} if before else {}) | after


def curves(logs: Sequence[PeerLog], max_points: int) -> dict[str, Any]:
    """Per-peer reward and evaluation, the mean time split per round, MARL returns, task success."""
    rounds = sorted({r for log in logs for r in log.rows})
    share = max(16, min(max_points, VALUE_BUDGET // max(1, 2 * len(logs))))
    groups = buckets(rounds, share)
    name = namer(logs)

    def per_peer(key: str) -> dict[str, list[float | None]]:
        return {name(log.run, log.peer): series(log.series.get(key, {}), groups) for log in logs}

    def mean_of(key: str) -> list[float | None]:
        sums: defaultdict[int, list[float]] = defaultdict(list)
        for log in logs:
            for r, v in log.series.get(key, {}).items():
                sums[r].append(v)
        return series({r: sum(v) / len(v) for r, v in sums.items()}, groups)

    def has(key: str) -> bool:
        return any(log.series.get(key) for log in logs)

    # A chart with nothing to draw is left out (the page hides it) rather than sent as an empty frame.
    out: dict[str, Any] = {"x": [g[0] for g in groups], "reward": per_peer("reward/own")}
    if has("eval/reward"):
        out["eval"] = per_peer("eval/reward")
    out["swarm_mean"] = mean_of("reward/swarm_mean")
    if any(has(f"time/{part}") for part in ("generate", "exchange", "train")):
        out["times"] = {part: mean_of(f"time/{part}") for part in ("generate", "exchange", "train")}
    if any("train/env_steps" in log.series for log in logs):
        out["marl"] = {"steps": mean_of("train/env_steps"), "eval_return": mean_of("eval/reward"), "eval_std": mean_of("eval/return_std")}
    if (held := heldout(logs, max_points)) is not None:
        out["heldout"] = held
    tasks = sorted({k for log in logs for k in log.series if k.startswith(SUCCESS)})
    if tasks:
        out["tasks"] = {clip(t[len(SUCCESS) :]): mean_of(t) for t in tasks[:64]}
    return out


def incidents(logs: Sequence[PeerLog], limit: int = 100) -> list[dict[str, Any]]:
    """The newest drops and quarantines across observers, for the faults panel."""
    name = namer(logs)
    events = [(log.run, name(log.run, log.peer), e) for log in logs for e in log.incidents]
    events.sort(key=lambda pe: -(num(pe[2].get("t")) or 0.0))
    out = []
    for run, observer, e in events[:limit]:
        out.append({
            "t": num(e.get("t")),
            "round": count(e.get("round"), MAX_ROUND),
            "stage": count(e.get("stage"), MAX_STAGES),
            "observer": observer,
            "sender": name(run, str(e.get("sender", ""))),
            "kind": "quarantine" if e.get("kind") == "quarantine" else kind_label(e),
            "reason": reason_text(e) if "reason" in e else f"{e.get('count', '?')} more drops not recorded",
        })  # fmt: skip
    return out


def snapshot(
    logs: Sequence[PeerLog],
    *,
    max_points: int,
    statuses: Mapping[str, Mapping[str, Any]] | None = None,
    chain: Mapping[str, Any] | None = None,
    runs: Sequence[str] = (),
    now: float | None = None,
) -> dict[str, Any]:
    omitted: list[int] = []
    states = progress(logs, time.time() if now is None else now)
    return {
        "runs": list(runs),
        "progress": states,
        "state": overall(states),
        "peers": peer_rows(logs, statuses or {}, omitted),
        "peers_omitted": sum(omitted),
        "dropped_other": sum(log.dropped_other for log in logs),  # drops of senders past runs.MAX_KEYS per observer
        "skipped_lines": sum(log.metrics.skipped + log.events.skipped for log in logs),
        "leaderboard": leaderboard(logs),
        "chain": dict(chain) if chain else None,
        "curves": curves(logs, max_points),
        "incidents": incidents(logs),
    }

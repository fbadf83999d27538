"""The run directories the dashboard watches: each peer's metrics rows and recorded events.

A run directory holds one folder per peer (``<run dir>/<peer id>/metrics.jsonl``, written by
``run.metrics.MetricsLogger``, and ``events.jsonl``, written by ``run.events.EventLog``). A folder
that itself holds a metrics.jsonl is taken as one peer. ``RunWatcher.poll`` is called from one
thread; it stats every file, reads what was appended and says whether anything changed.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from genrl_swarm.dashboard.tail import JsonlTail
from genrl_swarm.run.events import EVENTS_FILE, clip
from genrl_swarm.run.loggers.jsonl import METRICS_FILE

MAX_EVENTS = 256  # drop and quarantine events kept per observing peer (the newest)
HELDOUT, HELDOUT_BEFORE = "heldout/accuracy", "heldout/accuracy_before"  # the demo's held-out accuracy (games/reasoning_gym/heldout.py)
CURVES = ("reward/own", "eval/reward", "reward/swarm_mean", "train/env_steps", "eval/return_std", HELDOUT, HELDOUT_BEFORE)
SUMS = {"time/generate": "time/generate_s", "time/exchange": "time/exchange_s", "time/train": "time/train"}  # per stage -> per round
DROPPED, SUCCESS = "dropped/", "success/"
# Every key and number below comes from a file any peer (or whoever can write the run folder)
# wrote: what is kept per peer is bounded, so hostile keys cost neither memory nor payload.
MAX_KEYS = 256  # distinct dropped/<id> senders and success/<task> curves kept per peer; per row, each other prefix
MAX_ABS = 1e15  # a metric beyond this is not a metric: ignored like NaN
MAX_ROUND = 10**9
MAX_STAGES = 1000
OTHER_DROPS = "_dropped_other"  # in a kept row: the drops of senders past MAX_KEYS, summed
KEPT = frozenset(CURVES) | {"reward/cumulative", "wins", "trust/quarantined"}
CAPPED = ("time/", "trust/", "reward/peer/")
# The metric picker: any other numeric key a peer logs (a game's own metrics) is kept too, for
# MAX_METRICS distinct keys per peer (the first seen); a key longer than MAX_KEY_LEN is not kept
# (never cut: two cut keys would merge). The per-sender families are not offered (the table shows them).
MAX_METRICS = 128
MAX_PICKABLE = 512  # keys offered per peer (time/ and trust/ per-stage keys included)
MAX_KEY_LEN = 120
NOT_PICKABLE = (DROPPED, "reward/peer/")


def num(value: Any) -> float | None:
    """A finite float within +-MAX_ABS, or None (booleans, strings, NaN, inf are not metrics values)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and abs(value) <= MAX_ABS:
        return float(value)
    return None


def count(value: Any, hi: int = MAX_ROUND, lo: int = 0) -> int | None:
    """An int in [lo, hi] (a round, a stage, a number of rounds), or None."""
    if isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi:
        return value
    return None


def _text(value: Any, limit: int | None = None) -> str | None:
    if not isinstance(value, str):
        return None
    return clip(value) if limit is None else clip(value, limit)


def _event(event: dict[str, Any]) -> dict[str, Any]:
    """The fields of an event the dashboard shows, checked and clipped (a 1 MB reason is not kept)."""
    out = {
        "kind": _text(event.get("kind"), 32),
        "t": num(event.get("t")),
        "round": count(event.get("round")),
        "stage": count(event.get("stage"), MAX_STAGES),
        "until": count(event.get("until")),
        "count": count(event.get("count"), 1 << 40),
        "sender": _text(event.get("sender")),
        "drop": _text(event.get("drop"), 32),
        "reason": _text(event.get("reason")),
        "peer": _text(event.get("peer")),
        "game": _text(event.get("game"), 64),
        "backend": _text(event.get("backend"), 64),
        "stages": count(event.get("stages"), MAX_STAGES, 1),
        "max_rounds": count(event.get("max_rounds")),
        "start_round": count(event.get("start_round")),
    }
    return {k: v for k, v in out.items() if v is not None}


@dataclass
class PeerLog:
    """What one peer's folder says: rows by round (a replayed round replaces its row) and events."""

    directory: Path
    run: str
    metrics: JsonlTail
    events: JsonlTail
    rows: dict[int, dict[str, Any]] = field(default_factory=dict)
    start: dict[str, Any] = field(default_factory=dict)
    stage: tuple[int, int] | None = None  # (round, stage) of the last exchange recorded
    incidents: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=MAX_EVENTS))
    quarantines: dict[str, dict[str, Any]] = field(default_factory=dict)  # sender -> latest quarantine event
    # Kept as rows arrive, so a snapshot of a long run does not rescan every row each second:
    series: dict[str, dict[int, float]] = field(default_factory=dict)  # curve -> round -> value
    dropped_by: defaultdict[str, float] = field(
        default_factory=lambda: defaultdict(float)
    )  # sender -> its bodies this peer dropped (MAX_KEYS senders)
    dropped_other: float = 0.0  # bodies of the senders past MAX_KEYS
    _success: set[str] = field(default_factory=set)  # the success/ keys given a curve (MAX_KEYS)
    _other: set[str] = field(default_factory=set)  # the other numeric keys kept, for the picker (MAX_METRICS)
    pickable: set[str] = field(default_factory=set)  # keys the metric picker offers: seen in a kept row (bounded by what _trim keeps)

    last_round: int | None = None  # the latest round with a row

    @property
    def last(self) -> dict[str, Any]:
        """The row of the latest round ({} before the first)."""
        return self.rows[self.last_round] if self.last_round is not None else {}

    @property
    def peer(self) -> str:
        """The peer id its rows give (the folder's name until there is one)."""
        for row in (self.last, self.start):
            if isinstance(row.get("peer"), str):
                return clip(row["peer"])
        return self.directory.name

    @property
    def game(self) -> str:
        """The game its start event names (the recipe's name), or ``run <name>`` for a run that
        does not say: peers are ranked within one game, and an unnamed run is a game of its own."""
        return str(self.start.get("game") or f"run {clip(self.run)}")

    @property
    def last_seen(self) -> float:
        return max(self.metrics.mtime, self.events.mtime)

    def poll(self) -> bool:
        rows, rewritten = self.metrics.read()
        if rewritten:
            self.rows.clear()
            self.series.clear()
            self.dropped_by.clear()
            self.dropped_other = 0.0
            self._success.clear()
            self._other.clear()
            self.pickable.clear()
            self.last_round = None
        for raw in rows:
            if count(raw.get("round")) is not None:
                row = self._trim(raw)
                if row["round"] in self.rows:  # a replayed round replaces its row
                    self._index(self.rows[row["round"]], -1)
                self.rows[row["round"]] = row
                self._index(row, 1)
                self.last_round = max(row["round"], self.last_round if self.last_round is not None else row["round"])
        events, restarted = self.events.read()
        if restarted:
            self.start, self.stage = {}, None
            self.incidents.clear()
            self.quarantines.clear()
        for event in events:
            self._event(event)
        return bool(rows or events or rewritten or restarted)

    def _trim(self, row: dict[str, Any]) -> dict[str, Any]:
        """What is kept of a row: its round, peer and the finite numbers the dashboard shows, at
        most MAX_KEYS per prefix; new dropped/ senders and success/ tasks get a slot while there
        is room (the drops of the rest are summed under OTHER_DROPS)."""
        out: dict[str, Any] = {"round": row["round"]}
        if isinstance(row.get("peer"), str):
            out["peer"] = clip(row["peer"])
        per_prefix: dict[str, int] = {}
        other = 0.0
        for key, value in row.items():
            if (n := num(value)) is None:
                continue
            if key.startswith(DROPPED):
                sender = clip(key[len(DROPPED) :])
                if sender in self.dropped_by or len(self.dropped_by) < MAX_KEYS:
                    self.dropped_by[sender] += 0.0  # the sender's slot, kept until the file is rewritten
                    out[DROPPED + sender] = out.get(DROPPED + sender, 0.0) + n
                else:
                    other += n
            elif key.startswith(SUCCESS):
                if key in self._success or len(self._success) < MAX_KEYS:
                    self._success.add(key)
                    out[key] = n
            elif key in KEPT:
                out[key] = n
            elif prefix := next((p for p in CAPPED if key.startswith(p)), None):
                if per_prefix.get(prefix, 0) < MAX_KEYS:
                    per_prefix[prefix] = per_prefix.get(prefix, 0) + 1
                    out[key] = n
            elif key != "round" and len(key) <= MAX_KEY_LEN and (key in self._other or len(self._other) < MAX_METRICS):
                self._other.add(key)
                out[key] = n
        if other:
            out[OTHER_DROPS] = other
        return out

    def _index(self, row: dict[str, Any], sign: int) -> None:
        r = row["round"]
        if sign > 0 and len(self.pickable) < MAX_PICKABLE:
            new = [k for k in row if k not in self.pickable and k not in ("round", "peer", OTHER_DROPS)]
            self.pickable.update([k for k in new if len(k) <= MAX_KEY_LEN and not k.startswith(NOT_PICKABLE)][: MAX_PICKABLE - len(self.pickable)])
        for key, value in row.items():
            if key.startswith(DROPPED):
                self.dropped_by[key[len(DROPPED) :]] += sign * value
        self.dropped_other += sign * row.get(OTHER_DROPS, 0.0)
        values = {k: num(row.get(k)) for k in CURVES}
        for name, prefix in SUMS.items():
            parts = [v for k, x in row.items() if k.startswith(prefix) and (v := num(x)) is not None]
            values[name] = sum(parts) if parts else None
        values |= {k: num(v) for k, v in row.items() if k.startswith(SUCCESS)}
        for key, value in values.items():
            if sign > 0 and value is not None:
                self.series.setdefault(key, {})[r] = value
            elif sign < 0:
                self.series.get(key, {}).pop(r, None)

    def _event(self, raw: dict[str, Any]) -> None:
        event = _event(raw)
        kind = event.get("kind")
        if kind == "start":
            self.start = event
        elif kind == "stage" and "round" in event and "stage" in event:
            self.stage = (event["round"], event["stage"])
        elif kind in ("drop", "quarantine", "drops_omitted"):
            self.incidents.append(event)
            sender = event.get("sender")
            if kind == "quarantine" and sender is not None and (sender in self.quarantines or len(self.quarantines) < MAX_KEYS):
                self.quarantines[sender] = event


@dataclass
class RunWatcher:
    """Every peer folder under the given run directories, discovered again on each poll."""

    run_dirs: list[Path]
    max_peers: int = 10_000
    peers: dict[Path, PeerLog] = field(default_factory=dict)

    def poll(self) -> bool:
        changed = False
        for directory, run in self._discover():
            if directory not in self.peers and len(self.peers) < self.max_peers:
                self.peers[directory] = PeerLog(directory, run, JsonlTail(directory / METRICS_FILE), JsonlTail(directory / EVENTS_FILE))
                changed = True
        for log in self.peers.values():
            changed |= log.poll()
        return changed

    @property
    def behind(self) -> bool:
        """Some file has more to read than one poll takes."""
        return any(log.metrics.behind or log.events.behind for log in self.peers.values())

    def _discover(self) -> list[tuple[Path, str]]:
        found = []
        for run_dir in self.run_dirs:
            if (run_dir / METRICS_FILE).exists() or (run_dir / EVENTS_FILE).exists():
                found.append((run_dir, run_dir.parent.name))
                continue
            try:
                children = sorted(p for p in run_dir.iterdir() if p.is_dir())
            except OSError:  # not there yet (the run has not started) or unreadable: seen next poll
                continue
            found += [(p, run_dir.name) for p in children if (p / METRICS_FILE).exists() or (p / EVENTS_FILE).exists()]
        return found

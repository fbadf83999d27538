"""What the metrics rows do not hold, appended to ``<peer dir>/events.jsonl`` by game-loop hooks.

A metrics row is one round's scalars; the dashboard also wants the backend a peer runs, the
stage a peer is in while a round is under way, and *why* payloads were dropped and senders
quarantined (reasons are text, per sender: not scalars for TensorBoard). ``EventLog.attach``
adds the hooks to a GameManager. Every line is one JSON object with ``t`` (unix time) and
``kind``: ``start`` (with the game: the recipe's name), ``stage``, ``drop``, ``drops_omitted``, ``quarantine``, ``round``.

Reasons and peer ids come from untrusted peers: they are cut to ``MAX_TEXT`` characters and at
most ``max_drops`` drops are written per round, so a hostile swarm cannot grow the file faster
than the rounds go.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from genrl_swarm.core.game import GameManager
from genrl_swarm.core.interfaces import ExchangeResult
from genrl_swarm.core.state import GameState
from genrl_swarm.core.types import RoundResult, RoundRewards
from genrl_swarm.run.storage import writing

EVENTS_FILE = "events.jsonl"
MAX_TEXT = 300


def clip(text: str, limit: int = MAX_TEXT) -> str:
    """A peer-provided string cut to ``limit`` characters (marked with an ellipsis)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


class EventLog:
    """The hooks of one peer; ``attach`` once per GameManager, like the MetricsLogger."""

    def __init__(self, directory: Path, max_drops: int = 64, game: str = "") -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / EVENTS_FILE
        self.max_drops = max_drops
        self.game = game  # the recipe's name: the dashboard ranks peers of one game together, never across games
        self._quarantines: dict[str, int] = {}  # sender -> round its quarantine ends, as last written
        self._lock = threading.Lock()

    def attach(self, manager: GameManager) -> EventLog:
        config = manager.config
        self._write(
            kind="start",
            peer=manager.peer_id,
            game=self.game,
            backend=type(manager.comm).__name__,
            coordinator=type(manager.coordinator).__name__,
            stages=config.num_stages,
            max_rounds=config.max_rounds,
            mode=config.mode,
            start_round=manager.start_round,
        )
        manager.hooks.after_stage.append(self.on_stage)
        manager.hooks.after_rewards.append(self.on_rewards)
        manager.hooks.after_round.append(self.on_round)
        return self

    def on_stage(self, manager: GameManager, state: GameState, stage: int, exchange: ExchangeResult) -> None:
        self._write(
            kind="stage", round=state.round, stage=stage, got=len(exchange.received), expected=exchange.expected, dropped=len(exchange.dropped)
        )

    def on_rewards(self, manager: GameManager, state: GameState, rewards: RoundRewards) -> None:
        """Every drop of the round is in ``state.drops`` once the rewards are scored."""
        # Evidence first (hard, then counted kinds), differences of view last: a sender cannot
        # push a provable fault out of the log by sending many bodies nobody holds against it.
        drops = sorted((d for d in state.drops if d.peer_id != manager.peer_id), key=lambda d: (not d.kind.hard, not d.kind.counted))
        for d in drops[: self.max_drops]:
            self._write(kind="drop", round=state.round, stage=d.stage, sender=clip(d.peer_id), drop=d.kind, reason=clip(d.reason))
        if len(drops) > self.max_drops:
            self._write(kind="drops_omitted", round=state.round, count=len(drops) - self.max_drops)

    def on_round(self, manager: GameManager, result: RoundResult) -> None:
        # The book changes only in close_round, on this peer's thread, before this hook runs.
        book = manager.book
        current = {p: (end, book.reasons.get(p, "")) for p, end in dict(book.until).items() if end > result.round + 1}
        for sender, (end, why) in sorted(current.items()):
            if self._quarantines.get(sender) != end:
                self._write(kind="quarantine", round=result.round, sender=clip(sender), reason=clip(why), until=end)
        self._quarantines = {p: end for p, (end, _) in current.items()}
        self._write(kind="round", round=result.round)

    def _write(self, **event: Any) -> None:
        line = json.dumps({"t": round(time.time(), 3), **event}, ensure_ascii=False) + "\n"
        with self._lock, writing(self.path), self.path.open("a", encoding="utf-8") as f:
            f.write(line)

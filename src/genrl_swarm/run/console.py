"""The console view: one table row per round once every local peer finished it, and inside a
long round (an LM generating or training for minutes) a progress line saying what each peer is
doing: rewritten in place on a terminal, a plain line now and then in a log file."""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, TextIO

from genrl_swarm.core.game import GameManager
from genrl_swarm.core.types import RoundResult

SHORT = 12  # ids longer than this are shown as their first and last characters
AFTER = 10.0  # seconds into a round before it gets a progress line
EVERY_TTY, EVERY_LOG = 2.0, 30.0  # seconds between progress lines: on a terminal (rewritten in place), in a file
LISTED = 4  # peers named one by one on the progress line; more are counted per phase


def short_ids(peer_ids: list[str]) -> dict[str, str]:
    """A column label per peer: a libp2p id (52 characters) as ``12D3Ko…x9Qa``, with as many
    trailing characters as it takes to tell this table's peers apart."""
    if all(len(p) <= SHORT for p in peer_ids):
        return {p: p for p in peer_ids}
    for tail in range(4, max(len(p) for p in peer_ids) + 1):
        labels = {p: p if len(p) <= SHORT or len(p) <= 6 + tail + 1 else f"{p[:6]}…{p[-tail:]}" for p in peer_ids}
        if len(set(labels.values())) == len(peer_ids):
            return labels
    return {p: p for p in peer_ids}


class ConsoleTable:
    """Shared by the peers of this process; prints each peer's own reward per round.

    ``attach`` hooks it to a peer; between ``start`` and ``stop`` (``run_managers``) a thread
    writes the progress line of a round running longer than ``after`` seconds."""

    def __init__(
        self,
        peer_ids: list[str],
        max_rounds: int,
        stream: TextIO | None = None,
        after: float | None = None,
        every: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        swarm: bool = False,
    ) -> None:
        self.peer_ids, self.max_rounds = peer_ids, max_rounds
        self.labels = short_ids(peer_ids)
        # swarm: one peer per process (a torchrun rank) prints every peer's reward as it computed
        # it, one column per peer of the swarm (fixed at the first row), instead of its own alone.
        self.swarm = swarm
        self.columns: list[str] = list(peer_ids)
        self.stream = stream or sys.stdout
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.after = AFTER if after is None else after
        self.every = every if every is not None else EVERY_TTY if self.tty else EVERY_LOG
        self.clock = clock
        self._pending: dict[int, dict[str, RoundResult]] = {}
        self._lock = threading.Lock()
        self._start = time.monotonic()
        self._header_done = False
        self._doing: dict[str, tuple[int, str]] = {}  # peer -> (round, what it is doing in it)
        self._stages = 1
        self._quiet = False
        self._round_since: float | None = None  # when the round awaiting its row began (None: not started)
        self._said_at = float("-inf")  # the last progress line
        self._on_screen = False  # a progress line is on the terminal: cleared before the next row
        self._stopped = threading.Event()
        self._ticker: threading.Thread | None = None

    def attach(self, manager: GameManager) -> None:
        self._stages = manager.config.num_stages
        self._quiet |= manager.config.mode == "evaluate"  # no rounds: nothing to report progress in
        self._doing[manager.peer_id] = (manager.start_round, self._first_stage)  # a resumed peer starts past 0
        manager.hooks.after_stage.append(self._after_stage)
        manager.hooks.after_rewards.append(self._after_rewards)
        manager.hooks.after_round.append(self)

    def start(self, ticking: bool = True) -> None:
        """The rounds begin: progress lines from now on (from a thread unless ``ticking`` is
        False: then only ``progress`` calls write them; ``stop`` ends the thread)."""
        with self._lock:
            self._round_since = self.clock()
        if ticking and self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, name="console-progress", daemon=True)
            self._ticker.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._ticker is not None:
            self._ticker.join(10)
        with self._lock:
            self._clear()

    def _tick(self) -> None:
        while not self._stopped.wait(max(0.01, min(self.every, self.after))):
            self.progress(self.clock())

    def _after_stage(self, manager: GameManager, state: Any, stage: int, exchange: Any) -> None:
        stages = manager.config.num_stages
        if manager.config.train_every == "stage":
            doing = f"training stage {stage + 1}/{stages}"
        else:
            doing = f"generating stage {stage + 2}/{stages}" if stage + 1 < stages else "scoring"
        with self._lock:
            self._doing[manager.peer_id] = (state.round, doing)

    def _after_rewards(self, manager: GameManager, state: Any, rewards: Any) -> None:
        with self._lock:
            self._doing[manager.peer_id] = (state.round, "training")

    def __call__(self, manager: GameManager | None, result: RoundResult) -> None:
        with self._lock:
            self._doing[result.peer_id] = (result.round + 1, self._first_stage)
            row = self._pending.setdefault(result.round, {})
            row[result.peer_id] = result
            if len(row) == len(self.peer_ids):
                self._print(result.round, self._pending.pop(result.round))
                self._round_since = self.clock()

    @property
    def _first_stage(self) -> str:
        return f"generating stage 1/{self._stages}"

    def line(self, now: float) -> str | None:
        """The progress line of the round awaiting its row, once it ran ``after`` seconds."""
        if self._quiet or self._round_since is None or now - self._round_since < self.after:
            return None
        r = min(self._pending, default=None)
        if r is None:  # no peer finished it yet: the round after the last row
            r = min((d[0] for d in self._doing.values()), default=0)
        if r >= self.max_rounds:  # every round done: what runs now (a final evaluation, saving) is not a round
            return None
        doing = {p: self._doing.get(p, (r, self._first_stage)) for p in self.peer_ids if p not in self._pending.get(r, {})}
        parts = [f"{self.labels[p]} {what}" if rr <= r else f"{self.labels[p]} {what} (round {rr + 1})" for p, (rr, what) in doing.items()]
        if len(doing) > LISTED:
            parts = [f"{n} {what}" for what, n in Counter(what for _, what in doing.values()).most_common()]
        done = len(self.peer_ids) - len(doing)
        waiting = f"; {done} of {len(self.peer_ids)} done" if done else ""
        return f"  round {r + 1}/{self.max_rounds}, {now - self._round_since:.0f}s in: {', '.join(parts)}{waiting}"

    def progress(self, now: float) -> None:
        """Write the progress line if one is due (every ``every`` seconds)."""
        with self._lock:
            text = self.line(now)
            if text is None or now - self._said_at < self.every:
                return
            self._said_at = now
            if self.tty:  # rewritten in place, cut to the terminal's width
                width = shutil.get_terminal_size().columns - 1
                self.stream.write("\r" + text[:width] + "\033[K")
                self._on_screen = True
            else:
                self.stream.write(text + "\n")
            self.stream.flush()

    def _clear(self) -> None:
        if self._on_screen:
            self.stream.write("\r\033[K")
            self._on_screen = False

    def _print(self, r: int, row: dict[str, RoundResult]) -> None:
        self._clear()
        self._said_at = float("-inf")
        if not self._header_done and self.swarm:
            self.columns = sorted(set(self.peer_ids).union(*(res.rewards for res in row.values())))
            self.labels = short_ids(self.columns)
        width = max(8, *(len(self.labels[p]) for p in self.columns))
        if not self._header_done:
            cols = "".join(f"{self.labels[p]:>{width + 2}}" for p in self.columns)
            print(f"{'round':>7}{cols}   winner       dropped  quarantined  elapsed", file=self.stream)
            self._header_done = True
        mine = next(iter(row.values()))
        cells = "".join(f"{(mine if self.swarm else row[p]).rewards.get(p, float('nan')):>{width + 2}.3f}" for p in self.columns)
        winner = [self.labels.get(w) or short_ids([w])[w] for w in mine.winners[:1]]
        elapsed = time.monotonic() - self._start
        done = f"{r + 1}/{self.max_rounds}"
        # Summed over this process's peers: bodies/payloads refused this round, and senders
        # the peers are ignoring (each peer keeps its own quarantine list).
        dropped = sum(sum(res.dropped.values()) for res in row.values())
        quarantined = max(int(res.metrics.get("trust/quarantined", 0)) for res in row.values())
        print(f"{done:>7}{cells}   {(winner or ('-',))[0]:<12} {dropped:>7}  {quarantined:>11}  {elapsed:6.1f}s", file=self.stream, flush=True)

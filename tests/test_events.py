"""The run's event log (run/events.py) under a flood: at most ``max_drops`` drops a round are
written, evidence first, so bodies nobody holds against their sender cannot push a provable
fault out of the log the dashboard's fault table reads."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from genrl_swarm.core import Drop, DropKind, GameState
from genrl_swarm.run.events import EventLog


def test_provable_drops_are_written_before_differences_of_view(tmp_path: Path) -> None:
    log = EventLog(tmp_path, max_drops=8)
    state = GameState(0, "me")
    state.drops += [Drop("other-level", 0, f"t{i}", f"task t{i} is not one of this peer's stage-0 tasks", DropKind.FOREIGN) for i in range(64)]
    state.drops += [Drop("forger", 0, "t0", "answers input aaaa, this peer built bbbb"), Drop("me", 0, "t1", "own body")]
    state.drops.append(Drop("liar", 0, None, "two signed commitments for round 0 stage 0", DropKind.EQUIVOCATION))
    log.on_rewards(SimpleNamespace(peer_id="me"), state, None)  # type: ignore[arg-type]
    events = [json.loads(line) for line in log.path.read_text().splitlines() if '"drop' in line]
    drops = [(e["sender"], e["drop"]) for e in events if e["kind"] == "drop"]
    assert drops[:2] == [("liar", "equivocation"), ("forger", "refused")] and len(drops) == 8
    assert {kind for _, kind in drops[2:]} == {"foreign"} and "me" not in {sender for sender, _ in drops}
    assert [e["count"] for e in events if e["kind"] == "drops_omitted"] == [58]

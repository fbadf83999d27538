"""Found by a hostile review: a valid-looking config made every honest peer quarantine every
other (a later-stage payload named more earlier payloads than receivers decode), and a sender
could name more sources than ``game.max_sources`` and have receivers rebuild a longer prompt."""

from __future__ import annotations

import pytest

from genrl_swarm.core import GameConfig
from genrl_swarm.core.bodies import MAX_BASIS


def test_a_config_whose_basis_receivers_would_refuse_is_refused_at_start() -> None:
    GameConfig(num_stages=17, max_sources=16)  # 256 earlier payloads: decodable
    with pytest.raises(ValueError, match=r"max_sources x \(num_stages - 1\) must be <= 256"):
        GameConfig(num_stages=6, max_sources=64)
    assert MAX_BASIS >= 16 * 5  # the default max_sources with six stages (before: 64, every peer quarantined)


def test_a_basis_naming_more_senders_than_max_sources_is_refused_not_rebuilt() -> None:
    """Every honest peer checks the same game rule: the body is refused (counted, soft), and no
    prompt with 64 senders' answers is built for it."""
    from genrl_swarm.core.interfaces import ExchangeResult
    from genrl_swarm.core.types import DropKind, Ref
    from test_trust_v4_views import stage_zero_from

    from helpers import echo

    manager, state, _ = stage_zero_from([f"peer-{i:03d}" for i in range(80)])
    mine, basis = manager._stage_inputs(state, 1)
    honest, hostile = "peer-001", "peer-079"
    wide = tuple(sorted(Ref(0, p, d) for p, d in list(state.sources[0].items())[:64]))
    narrow = tuple(sorted(Ref(0, p, d) for p, d in list(state.sources[0].items())[:16]))  # another view, within the rule
    later = {peer: tuple(echo(i, "Choice: Student #1") for i in mine) for peer in (honest, hostile)}
    state.sources[1] = dict.fromkeys(later, "00")
    exchange = ExchangeResult(dict(later), {}, 3, bases={hostile: wide, honest: narrow})
    rebuilt = manager.views.rebuild(state, 1, basis, exchange, later, deadline=0.0).inputs
    assert hostile not in rebuilt and hostile not in later  # before: rebuilt with 64 students in its prompt
    assert len(rebuilt[honest][mine[0].task_id].context["students"]) == 16
    (drop,) = [d for d in state.drops if d.peer_id == hostile]
    assert drop.kind is DropKind.REFUSED and "game.max_sources=16" in drop.reason

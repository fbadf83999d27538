"""Views converge by fetching: a later-stage body is checked against the input its sender built.

A later-stage input is built from earlier answers, and honest peers can hold different ones: a
payload lost on the way or withheld (a peer revealing to everyone but one victim), the other face
of an equivocator, or bodies this peer refused for its own settings (``DropKind.LOCAL``: another
``max_new_tokens``). So a later-stage payload names the earlier payloads its inputs were built
from (``Envelope.basis``, by their signed commitments), and this peer rebuilds that sender's
inputs from exactly those, with the game's own ``stage_inputs`` on ``GameState.view``:

* payloads it recorded, with the bodies it refused only for its own settings (kept as context
  by ``core.admission``);
* payloads it does not hold as named, fetched by their signed digest (``Communication.fetch``:
  its own store, then the senders that named them, then any peer) and checked like any payload
  (the signature over the digest, the digest, the codec's bounds, the bodies against this peer's
  inputs and ``policy.check``); a fetched later-stage payload's own inputs are rebuilt from what
  it names in turn. Fetched bodies are context only (``core.admission.admit_context``).

Fetching runs within the stage's deadline (what the exchange left of ``game.exchange_timeout``;
past it, only this peer's own store is read), and what it costs this peer's CPU is charged to the
sender whose basis named the payload (the first in commitment order: the others get it for free),
against its ``trust.cpu_budget``: a sender over it gets no further fetch this stage, and
``core.admission`` cuts its bodies as it cuts any sender's (``cpu``, never counted). Since a
sender names at most ``game.max_sources`` senders' payloads per earlier stage, one pass is bounded. A sender whose named payloads cannot be
had in time differs in view: its bodies are dropped as ``DropKind.VIEW`` (never counted), which is
now the exception, and counted per stage (``views/dropped_s<s>``, beside ``views/fetched_s<s>``).
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from genrl_swarm.core.admission import Rules, admit_context
from genrl_swarm.core.bodies import Body
from genrl_swarm.core.interfaces import Communication, DataManager, ExchangeResult, FetchedPayload, Policy
from genrl_swarm.core.state import GameState
from genrl_swarm.core.types import Drop, DropKind, Ref, StageInput

Inputs = dict[str, StageInput]  # task id -> the input a sender answered, as rebuilt here


@dataclass(frozen=True)
class Rebuilt:
    """One stage's later-stage senders, as this peer rebuilt them: ``inputs``, per sender that
    built from other payloads than this peer, the input of each of its tasks; ``costs``, the CPU
    seconds its references cost here (fetching, checking); ``fetched``, payloads fetched;
    ``dropped``, bodies dropped as a difference of view."""

    inputs: dict[str, Inputs] = field(default_factory=dict)
    costs: dict[str, float] = field(default_factory=dict)
    fetched: int = 0
    dropped: int = 0


@dataclass
class Views:
    """Rebuilds the later-stage inputs of senders whose views differ from this peer's."""

    me: str
    comm: Communication
    data: DataManager
    policy: Policy
    max_sources: int
    cpu_budget: float = math.inf  # seconds of this peer's CPU a sender's references may cost a stage (``trust.cpu_budget``)

    def rebuild(
        self, state: GameState, stage: int, basis: tuple[Ref, ...], exchange: ExchangeResult, received: dict[str, tuple[Body, ...]], deadline: float
    ) -> Rebuilt:
        """The inputs of each sender of ``received`` (this stage) that named other earlier payloads
        than ``basis`` (this peer's), fetching those it lacks until ``deadline`` (monotonic). A
        sender naming more than ``max_sources`` senders breaks the game's rule (refused, counted,
        the same at every peer); one whose inputs cannot be rebuilt differs in view (``view``).
        Dropped senders leave ``received`` and ``state.sources``, with a drop in ``state``."""
        if stage == 0:
            return Rebuilt()
        named: dict[str, tuple[Ref, ...]] = {}
        for peer in [p for p in received if p != self.me]:
            refs = exchange.bases.get(peer, ())
            if refs == basis:
                continue
            if len({r.sender for r in refs}) > self.max_sources:  # the game's rule, checked alike everywhere
                why = f"built its inputs from more than game.max_sources={self.max_sources} senders"
                self._drop(state, stage, received, Drop(peer, stage, None, why, DropKind.REFUSED))
                continue
            named[peer] = refs
        costs, fetched, proven = self._complete(state, named, deadline)
        for peer, why in proven.items():  # a fetch read a proof: quarantined like any equivocator
            self._drop(state, stage, received, Drop(peer, stage, None, why, DropKind.EQUIVOCATION))
        rebuilt, cache, dropped = dict[str, Inputs](), dict[tuple[Ref, ...], Inputs | str](), 0
        for peer, refs in [(p, r) for p, r in named.items() if p in received]:
            start = time.thread_time()
            if refs not in cache:  # the first sender with these refs pays for building them
                cache[refs] = self._inputs_from(state, stage, refs)
            costs[peer] += time.thread_time() - start
            inputs = cache[refs]
            if isinstance(inputs, str):
                dropped += len(received[peer])
                self._drop(state, stage, received, Drop(peer, stage, None, inputs, DropKind.VIEW))
            else:
                rebuilt[peer] = inputs
        return Rebuilt(rebuilt, dict(costs), fetched, dropped)

    def _complete(
        self, state: GameState, named: Mapping[str, tuple[Ref, ...]], deadline: float
    ) -> tuple[defaultdict[str, float], int, dict[str, str]]:
        """Fetch the payloads ``named`` names that ``state`` does not hold, and the earlier ones a
        fetched later-stage payload names in turn (one pass per stage at most); keep their
        bodies as context, lowest stage first (a later one's inputs are rebuilt from them).
        Returns the CPU seconds per naming sender, the payloads had, and the equivocators proven
        by what was read."""
        costs: defaultdict[str, float] = defaultdict(float)
        proven: dict[str, str] = {}
        wanted: dict[Ref, str] = {}
        for peer, refs in named.items():  # commitment order: the first sender naming a payload pays for it
            for ref in refs:
                if not state.holds((ref,)):
                    wanted.setdefault(ref, peer)
        had: dict[Ref, tuple[str, FetchedPayload]] = {}
        tried: set[Ref] = set()
        while wanted:  # one pass even past the deadline: what this peer holds itself costs no wait
            got = self.comm.fetch(state.round, wanted, self.policy.body_type, max(deadline - time.monotonic(), 0.0))
            for peer, seconds in got.costs.items():
                costs[peer] += seconds
            tried |= wanted.keys()
            proven |= got.equivocators
            had |= {ref: (wanted[ref], payload) for ref, payload in got.payloads.items()}
            further = {r: wanted[ref] for ref, payload in got.payloads.items() for r in payload.basis}
            wanted = {r: peer for r, peer in further.items() if r not in tried and not state.holds((r,)) and costs[peer] <= self.cpu_budget}
            if time.monotonic() >= deadline:
                break
        for ref in sorted(had, key=lambda r: r.stage):
            peer, payload = had[ref]
            start = time.thread_time()
            inputs = self._inputs_for(state, ref, payload)
            if inputs is not None:
                admit_context(state, ref, payload.bodies, inputs, Rules(self.policy.check, self.policy.texts))
            costs[peer] += time.thread_time() - start
        return costs, len(had), proven

    def _inputs_for(self, state: GameState, ref: Ref, payload: FetchedPayload) -> Inputs | None:
        """What a fetched payload's bodies answer: this peer's own stage-0 inputs, or for a later
        stage those rebuilt from the payload's own basis (None if that cannot be done here)."""
        if ref.stage == 0:
            return state.inputs.get(0, {})
        inputs = self._inputs_from(state, ref.stage, payload.basis)
        return None if isinstance(inputs, str) else inputs

    def _inputs_from(self, state: GameState, stage: int, refs: tuple[Ref, ...]) -> Inputs | str:
        """Stage-``stage`` inputs built from exactly ``refs``; why not, when this peer cannot."""
        missing = [r for r in refs if not state.holds((r,))]
        if missing:
            named = ", ".join(f"{r.sender[:16]} s{r.stage}" for r in missing[:3])
            return f"its stage-{stage} inputs are built from {len(missing)} payload(s) this peer could not fetch in time ({named})"
        try:
            return {i.task_id: i for i in self.data.stage_inputs(state.view(refs), stage)}
        except Exception as e:  # noqa: BLE001 - game code on a combination of others' payloads
            return f"building its stage-{stage} inputs failed here: {type(e).__name__}: {e}"

    @staticmethod
    def _drop(state: GameState, stage: int, received: dict[str, tuple[Body, ...]], drop: Drop) -> None:
        state.drops.append(drop)
        received.pop(drop.peer_id, None)
        state.sources.get(stage, {}).pop(drop.peer_id, None)

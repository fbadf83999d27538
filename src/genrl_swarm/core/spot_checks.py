"""Spot checks any receiver makes, and the proofs they leave (issue 45.4, the exchange's side).

A sender's signed commitment names the model its bodies were drawn with (``ModelClaim``: for LM
adapter peers the shared base's and the adapter's digests, and the sha256 of the adapter's bytes);
its draws are public numbers of (epoch, round, sender, input, index). After each exchange this
peer picks ``trust.spot_checks`` bodies of every sender that named a model, with numbers of its
own (``secrets``: nothing the sender knew when it committed), fetches the model's bytes by their
committed digest (``Communication.fetch_model``: its store, the sender, any holder) and asks the
policy whether that model draws those bodies (``Policy.check_work``: for LM, one teacher-forced
forward, ``lm.verify``). A body it draws is marked verified in the round's state
(``GameState.verified``); the mark is all a pass changes, since no LM learner reads a swarm
body's claimed log-probs (``lm.grpo_loss.behaviour_of``), so there is no claim a verified log-prob
could replace. A body it does not draw is a proof: the sender's signed commitment, the
payload it committed to and the model's bytes, all named by digests the sender signed. The
sender is dropped for the round with all its bodies (``DropKind.FORGED``, hard: quarantined),
and the check is passed on (``Communication.accuse``: the commitment and the body's index, in this
peer's next payloads, ``Envelope.faults``).

A peer that reads a passed-on fault re-checks it before acting on it (``Communication.faulted_work``
fetches the payload and the model from its own store, the accuser or the accused, each against
the signed digests): only a body that fails here too drops and quarantines the accused, and is
passed on again. A fault that does not reproduce is ignored (never held against the accuser:
rounding on another machine could decide a token the accuser saw outside its tolerance, however
unlikely). What this peer cannot check (another base, a model it cannot rebuild, bytes nobody
served in time) is its own difference: the sender's bodies keep the usual bounds, and it is
counted (``checks/unchecked_s<s>``).

Cost: at most ``spot_checks`` bodies per sender and stage (of ``spot_check_senders`` senders picked
at random, when set; ``spot_check_samples`` samples of each, when set: a CPU pays per token), and ``MAX_RECHECKS`` passed-on faults per stage (``MAX_RECHECKS_PER_ACCUSER`` of one accuser, in ``RECHECK_SHARE`` of the time), each re-checked once.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from genrl_swarm.core.bodies import Body
from genrl_swarm.core.interfaces import ActSeed, Communication, ExchangeResult, Fault, ModelClaim, Policy, WorkCheck
from genrl_swarm.core.state import GameState
from genrl_swarm.core.types import Drop, DropKind, Verified

log = logging.getLogger(__name__)

#: Passed-on faults re-checked per stage (each costs a fetch and one body's check).
MAX_RECHECKS = 8
#: ... of them passed on by one accuser: an accomplice's faults against throwaway ids cannot crowd
#: out an honest accuser's.
MAX_RECHECKS_PER_ACCUSER = 2
#: The share of the stage's fetch time re-checks may spend: the rest is this peer's own checks',
#: so faults whose bytes nobody serves cannot starve them.
RECHECK_SHARE = 0.5


@dataclass
class SpotChecks:
    """This peer's spot checks and re-checks of passed-on faults, stage by stage."""

    me: str
    comm: Communication
    policy: Policy
    per_sender: int = 1
    senders: int = 0  # senders checked per stage, at random (0: every one)
    samples: int = 0  # samples redone per picked body, at random (0: all)
    #: (accused, round, stage, body) faults re-checked already: each is re-checked once.
    _rechecked: set[tuple[str, int, int, int]] = field(default_factory=set)
    _random: secrets.SystemRandom = field(default_factory=secrets.SystemRandom)

    def run(
        self,
        state: GameState,
        stage: int,
        exchange: ExchangeResult,
        received: dict[str, tuple[Body, ...]],
        timeout: float,
        skip: frozenset[str] = frozenset(),
    ) -> dict[str, float]:
        """Re-check the faults ``exchange`` passed on, then check ``per_sender`` bodies of each
        sender in ``received`` that named a model; drop the senders proven (every body of theirs
        this round leaves ``state``). ``timeout``: seconds for all the fetches. ``skip``: senders
        not worth a check (quarantined here already). Returns the stage's ``checks/`` metrics."""
        start, deadline = time.perf_counter(), time.monotonic() + timeout
        rechecks_until = time.monotonic() + RECHECK_SHARE * timeout
        proven: dict[str, str] = {}
        counts = {"bodies": 0, "verified": 0, "tokens": 0, "near_ties": 0, "unchecked": 0, "rechecked": 0}
        for fault in self._pending(exchange.faults, skip, state.round):
            counts["rechecked"] += 1
            why = self._recheck(fault, max(rechecks_until - time.monotonic(), 0.0))
            if why is not None:
                proven.setdefault(fault.accused, why)
        candidates = [p for p in exchange.models if p != self.me and p not in proven and p not in skip and p in received]
        if 0 < self.senders < len(candidates):
            candidates = self._random.sample(candidates, self.senders)
        epoch = self.comm.settled_epoch()  # what every sender's draws this run are seeded with
        kept = _kept(state, stage)
        for sender in candidates if self.per_sender > 0 else []:
            found = self._check_sender(ActSeed(epoch, state.round, sender), stage, exchange, kept.get(sender, set()), counts, deadline)
            if isinstance(found, str):
                proven[sender] = found
            else:
                state.verified += found
                counts["verified"] += len(found)
        for sender, why in proven.items():
            self._drop(state, stage, received, Drop(sender, stage, None, why, DropKind.FORGED))
        metrics = {f"checks/{k}_s{stage}": float(v) for k, v in counts.items()}
        return metrics | {f"checks/proven_s{stage}": float(len(proven)), f"time/checks_s{stage}": time.perf_counter() - start}

    def _check_sender(
        self, seed: ActSeed, stage: int, exchange: ExchangeResult, kept: set[int], counts: dict[str, int], deadline: float
    ) -> str | list[Verified]:
        """Check ``per_sender`` random bodies of ``seed.sender``'s among those this peer ``kept``
        (ids of the body objects admission stored: only they train, so a payload padded with bodies
        admission never reads cannot dilute the draw), its committed model fetched by digest; why it
        is proven (and the proof passed on), or the bodies it passed (none where unchecked). A check
        whose redone tokens are mostly near ties proves nothing either way: unchecked, never passed.
        ``counts`` adds up."""
        sender = seed.sender
        claim, payload = exchange.models[sender], exchange.received.get(sender, ())
        bodies = [i for i, body in enumerate(payload) if id(body) in kept]
        picks = sorted(self._random.sample(bodies, min(self.per_sender, len(bodies))))
        if not picks:
            return []
        blob = self.comm.fetch_model(seed.round, sender, claim, max(deadline - time.monotonic(), 0.0))
        picked = [payload[i] for i in picks]
        draws = [sorted(self._random.sample(range(b.num_samples), min(self.samples, b.num_samples))) for b in picked] if self.samples > 0 else None
        checked = self._check(seed, picked, claim, blob, draws)
        if isinstance(checked, str):
            counts["unchecked"] += 1
            log.info("%s could not spot-check %s (r%d/s%d): %s", self.me, sender, seed.round, stage, checked)
            return []
        bad = [(i, why) for i, why in zip(picks, checked.mismatches) if why is not None]
        if not bad and checked.near_ties > checked.tokens:  # settings under which rounding decides most draws
            counts["unchecked"] += 1
            log.info(
                "%s: %s's bodies are mostly near ties (%d of %d tokens): unchecked",
                self.me,
                sender,
                checked.near_ties,
                checked.tokens + checked.near_ties,
            )
            return []
        counts["bodies"] += len(picks)
        counts["tokens"] += checked.tokens
        counts["near_ties"] += checked.near_ties
        if not bad:
            return [Verified(sender, stage, i, tuple(draws[n]) if draws else None, payload[i]) for n, i in enumerate(picks)]
        assert blob is not None  # checked: its bytes were served
        body, why = bad[0]
        self.comm.accuse(seed.round, stage, sender, body, blob)
        return f"spot check of body {body} (r{seed.round}/s{stage}): {why}"

    def _pending(self, faults: Sequence[Fault], skip: frozenset[str], round: int) -> list[Fault]:
        """The passed-on faults worth re-checking: not about this peer or a sender skipped, not
        re-checked before, at most ``MAX_RECHECKS`` and ``MAX_RECHECKS_PER_ACCUSER`` of one accuser."""
        out: list[Fault] = []
        by_accuser: dict[str, int] = {}
        for fault in faults:
            key = (fault.accused, fault.round, fault.stage, fault.body)
            if fault.accused == self.me or fault.accused in skip or key in self._rechecked or len(out) >= MAX_RECHECKS:
                continue
            if by_accuser.get(fault.accuser, 0) >= MAX_RECHECKS_PER_ACCUSER:
                continue
            by_accuser[fault.accuser] = by_accuser.get(fault.accuser, 0) + 1
            self._rechecked.add(key)
            out.append(fault)
        self._rechecked = {k for k in self._rechecked if k[1] >= round - 4}  # faults are read within 2 rounds (comm.commitments)
        return out

    def _recheck(self, fault: Fault, timeout: float) -> str | None:
        """Why the accused is proven by ``fault`` (the body fails here too), or None."""
        work = self.comm.faulted_work(fault, self.policy.body_type, timeout)
        if isinstance(work, str):
            log.info("%s could not re-check %s's fault against %s: %s", self.me, fault.accuser, fault.accused, work)
            return None
        body, blob = work
        checked = self._check(fault.seed, [body], fault.claim, blob)
        if isinstance(checked, str) or checked.mismatches[0] is None:
            log.info("%s: %s's fault against %s does not reproduce here", self.me, fault.accuser, fault.accused)
            return None
        self.comm.accuse(fault.round, fault.stage, fault.accused, fault.body, blob)  # passed on again
        return (
            f"spot check of body {fault.body} (r{fault.round}/s{fault.stage}) passed on by {fault.accuser}, re-checked here: {checked.mismatches[0]}"
        )

    def _check(
        self, seed: ActSeed, bodies: list[Body], claim: ModelClaim, blob: bytes | None, samples: list[list[int]] | None = None
    ) -> WorkCheck | str:
        if blob is None:
            return "its committed model's bytes were not served in time"
        try:
            return self.policy.check_work(seed, bodies, claim.name, blob, samples)
        except Exception as e:  # noqa: BLE001 - a stranger's bytes reached model code: this peer cannot check them
            log.warning("%s: checking bodies with a committed model failed: %s: %s", self.me, type(e).__name__, e)
            return f"checking failed here: {type(e).__name__}: {e}"

    @staticmethod
    def _drop(state: GameState, stage: int, received: dict[str, tuple[Body, ...]], drop: Drop) -> None:
        """``drop`` recorded; the sender's bodies leave ``received`` and every stage of ``state``,
        its bodies' ``Verified`` marks too."""
        state.drops.append(drop)
        state.verified = [v for v in state.verified if v.peer_id != drop.peer_id]
        received.pop(drop.peer_id, None)
        state.rollouts = [x for x in state.rollouts if x.peer_id != drop.peer_id]
        for by in state.sources.values():
            by.pop(drop.peer_id, None)


def _kept(state: GameState, stage: int) -> dict[str, set[int]]:
    """Per sender, ids of the body objects admission stored at ``stage`` (one pass over the state)."""
    out: dict[str, set[int]] = {}
    for x in state.rollouts:
        if x.stage == stage:
            out.setdefault(x.peer_id, set()).add(id(x.body))
    return out

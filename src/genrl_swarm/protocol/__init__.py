"""The swarm protocol without I/O: membership and liveness, which peers to pull from, deadlines,
quorum catch-up, the checks a commitment and a reveal must pass, and the books kept on senders.

Nothing here opens a socket, starts a thread or reads a clock: time is an argument. The rules
the transports and the simulator (``genrl_swarm.sim``) share are defined here once: every
transport's phase deadlines (``Deadlines``, ``REVEAL_SHARE``, in ``comm.base``), and for the
HiveMind transport (``comm.hivemind``) the liveness rule (``alive``, ``forget_after``), the
catch-up rule (``attested_round``) and whom to pull from (``Strategy``). ``collect`` and the
verdicts of ``checks`` are the simulator's row-wise form of what ``comm.base`` and the
transport's puller do per peer (tests/test_sim_transport.py plays scripted rounds on both and
compares who receives what).
The functions the simulator calls for every pair of peers take numpy arrays (one row per pair).
"""

from genrl_swarm.protocol.checks import Verdict, classify, drops_of, first_committers
from genrl_swarm.protocol.exchange import REVEAL_SHARE, Deadlines, collect
from genrl_swarm.protocol.strategy import STRATEGIES, AllToAll, Gossip, Plan, PullK, PullSpare, Strategy, make_strategy, offenders
from genrl_swarm.protocol.view import LiveView, alive, attested_round, forget_after

__all__ = [
    "REVEAL_SHARE",
    "STRATEGIES",
    "AllToAll",
    "Deadlines",
    "Gossip",
    "LiveView",
    "Plan",
    "PullK",
    "PullSpare",
    "Strategy",
    "Verdict",
    "alive",
    "attested_round",
    "classify",
    "collect",
    "drops_of",
    "first_committers",
    "forget_after",
    "make_strategy",
    "offenders",
]

"""The swarm protocol without I/O: membership and liveness, which peers to pull from, deadlines,
quorum catch-up, the checks a commitment and a reveal must pass, and the books kept on senders.

Nothing here opens a socket, starts a thread or reads a clock: time is an argument. The HiveMind
transport (``comm.hivemind.dht``) and the simulator (``genrl_swarm.sim``) both drive these
functions, so what the simulator measures at 10,000 peers is the logic that runs for real.
The functions that the simulator calls for every pair of peers take numpy arrays (one row per
pair); the transport calls the same functions with the rows of one peer.
"""

from genrl_swarm.protocol.checks import Verdict, classify, drops_of, first_committers
from genrl_swarm.protocol.exchange import REVEAL_SHARE, Deadlines, collect
from genrl_swarm.protocol.strategy import STRATEGIES, AllToAll, Gossip, Plan, PullK, PullSpare, Strategy, make_strategy, offenders
from genrl_swarm.protocol.view import LiveView, attested_round

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
    "attested_round",
    "classify",
    "collect",
    "drops_of",
    "first_committers",
    "make_strategy",
    "offenders",
]

"""What one simulated round produced, per honest receiver that finished it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RoundOutcome:
    receivers: np.ndarray  # peer numbers of the honest receivers that finished the round
    clean: np.ndarray  # clean swarm payloads each accepted
    round_s: np.ndarray  # round time: start to the end of the exchange (compute included)
    exchange_s: np.ndarray  # from posting its own payload to the end of the exchange
    bytes_in: np.ndarray  # downloaded by each receiver
    bytes_out: np.ndarray  # uploaded by every alive honest peer (sampled receivers scaled up)
    dirty: int  # forged or over-budget payloads accepted by an honest receiver (must be 0)
    copies: int  # copies accepted (the original was not among what the receiver pulled)
    ends: dict[int, float]  # every participant's end of round: its next start
    received: dict[str, frozenset[str]]  # receiver id -> senders of accepted payloads (small N only)
    available: int  # live members a receiver could pull from (a peer cannot want more than exist)

"""Communication backends. Each moves bytes; ``ByteBackend`` owns the codec and the checks."""

from genrl_swarm.comm.base import ByteBackend, RawExchange
from genrl_swarm.comm.codec import Codec, PayloadError
from genrl_swarm.comm.errors import SwarmFailure
from genrl_swarm.comm.memory import InMemoryBackend, InMemorySwarm
from genrl_swarm.comm.null import NullBackend

__all__ = ["ByteBackend", "Codec", "InMemoryBackend", "InMemorySwarm", "NullBackend", "PayloadError", "RawExchange", "SwarmFailure"]

"""The hostile peer of the trust tests: posts whatever a test tells it to on an in-memory board."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from genrl_swarm.core import Body


class Stranger:
    """A peer outside the game loop that posts whatever a test tells it to on an in-memory
    board: the hostile peer of the trust tests. Its id embeds its own key (libp2p form)."""

    def __init__(self, swarm: Any, identity: Any = None, swarm_id: str = "genrl-swarm", epoch: Any = None) -> None:
        from genrl_swarm.core.identity import Identity

        self.swarm, self.swarm_id = swarm, swarm_id
        self.epoch = epoch  # the run it signs in: the board's (None), unless a test replays another
        self.identity = identity or Identity.generate()
        self.peer_id = self.identity.peer_id

    def commit(self, round: int, stage: int, payload: bytes, sender: str | None = None, **fields: Any) -> bytes:
        import hashlib

        from genrl_swarm.comm.codec import Commitment, encode_signed

        sender = sender or self.peer_id
        epoch = self.epoch or self.swarm.epoch
        record = Commitment(self.swarm_id, epoch.value, round, stage, sender, hashlib.sha256(payload).digest(), len(payload))
        signed = encode_signed("commit", msgspec_replace(record, **fields), self.identity.sign)
        self.swarm.post(round, stage, "commit", self.peer_id, signed)
        return signed

    def reveal(self, round: int, stage: int, payload: bytes) -> None:
        self.swarm.post(round, stage, "reveal", self.peer_id, payload)

    def send(self, round: int, stage: int, bodies: Sequence[Body], envelope_sender: str | None = None) -> bytes:
        """Commit to and reveal an encoded envelope (claiming ``envelope_sender`` inside it)."""
        from genrl_swarm.comm.codec import Codec

        payload = Codec().encode(envelope_sender or self.peer_id, round, stage, bodies)
        self.commit(round, stage, payload)
        self.reveal(round, stage, payload)
        return payload


def msgspec_replace(struct: Any, **fields: Any) -> Any:
    import msgspec

    return msgspec.structs.replace(struct, **fields) if fields else struct

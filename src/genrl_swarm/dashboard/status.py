"""Live peers' status endpoints: a small JSON document per peer, fetched on each refresh.

A status endpoint is any URL answering ``{"peer": "<id>", "round": 3, "stage": 1, "backend":
"HivemindBackend", "reward": 0.5}`` (every field but ``peer`` optional, unknown ones ignored).
The answer is decoded into ``PeerStatus`` with its bounds checked; it is cut at ``MAX_BYTES``
and a slow endpoint costs at most ``timeout`` seconds, in parallel with the others.
"""

from __future__ import annotations

import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec

from genrl_swarm.core.decoders import json_decoder

MAX_BYTES = 64 << 10


class PeerStatus(msgspec.Struct, frozen=True):
    peer: Annotated[str, msgspec.Meta(min_length=1, max_length=300)]
    round: Annotated[int, msgspec.Meta(ge=0)] | None = None
    stage: Annotated[int, msgspec.Meta(ge=0)] | None = None
    backend: Annotated[str, msgspec.Meta(max_length=64)] | None = None
    reward: float | None = None


#: Built at import: the poller's threads decode their first answers at once (core.decoders).
_decode = json_decoder(PeerStatus).decode


@dataclass
class StatusPoller:
    urls: list[str]
    timeout: float = 2.0

    def __post_init__(self) -> None:
        for url in self.urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"--peer-status: {url!r} is not an http(s) URL")

    def read(self) -> tuple[dict[str, dict[str, Any]], list[str]]:
        """Status by peer id, and one error line per endpoint that did not answer properly."""
        if not self.urls:
            return {}, []
        with ThreadPoolExecutor(max_workers=min(8, len(self.urls))) as pool:
            answers = list(pool.map(self._fetch, self.urls))
        statuses, errors = {}, []
        for url, answer in zip(self.urls, answers):
            if isinstance(answer, str):
                errors.append(f"{url}: {answer}")
            else:
                fields = {k: v for k, v in msgspec.structs.asdict(answer).items() if v is not None and k != "peer"}
                statuses[answer.peer] = fields | {"live": True, "last_seen": round(time.time(), 3), "status_url": url}
        return statuses, errors

    def _fetch(self, url: str) -> PeerStatus | str:
        try:
            with urllib.request.urlopen(url, timeout=self.timeout) as response:  # noqa: S310 - http(s) only, checked above
                data = response.read(MAX_BYTES + 1)
        except OSError as e:  # URLError, timeouts and refused connections are OSErrors
            return f"unreachable ({e})"
        if len(data) > MAX_BYTES:
            return f"answer over {MAX_BYTES} bytes"
        try:
            return _decode(data)
        except msgspec.DecodeError as e:
            return f"not a status document ({e})"

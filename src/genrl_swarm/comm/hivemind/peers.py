"""The addresses of peers this peer has seen, kept on disk so that a restart can rejoin the
swarm through any of them, not only through the first peer it was told about.

A small JSON file (by default beside the identity file), newest first, bounded in size, written
atomically; a file that cannot be read is ignored with a warning, never fatal.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

log = logging.getLogger(__name__)
#: Peers remembered; the oldest are forgotten first.
LIMIT = 32


class AddressBook:
    def __init__(self, path: Path | None, own_peer_id: str, limit: int = LIMIT) -> None:
        self.path, self.own, self.limit = path, own_peer_id, limit
        self._entries: dict[str, tuple[float, tuple[str, ...]]] = {}  # peer -> (seen, maddrs)
        self._loaded = False

    def load(self) -> list[str]:
        """The remembered multiaddrs (each ending in /p2p/<peer>), newest first."""
        self._loaded = True
        if self.path is None or not self.path.is_file():
            return []
        try:
            rows = json.loads(self.path.read_text())["peers"]
            for row in rows[: self.limit]:
                peer, seen, maddrs = str(row["peer"]), float(row["seen"]), tuple(str(m) for m in row["maddrs"][:8])
                if peer != self.own and all(m.endswith(f"/p2p/{peer}") for m in maddrs):
                    self._entries[peer] = (seen, maddrs)
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.warning("ignoring the address book %s (%s); rejoining through the given initial peers only", self.path, e)
            self._entries.clear()
        return [m for _, (_, maddrs) in self._newest() for m in maddrs]

    def update(self, seen: Mapping[str, Sequence[str]], now: float | None = None) -> None:
        """Remember ``seen`` (peer -> its multiaddrs); the file is rewritten only when the set of
        peers or their addresses changed."""
        now = time.time() if now is None else now
        changed = False
        for peer, maddrs in seen.items():
            if peer == self.own or not maddrs:
                continue
            old = self._entries.get(peer)
            changed |= old is None or old[1] != tuple(maddrs)
            self._entries[peer] = (now, tuple(maddrs))
        if len(self._entries) > self.limit:
            self._entries = dict(self._newest()[: self.limit])
            changed = True
        if changed:
            self._write()

    def _newest(self) -> list[tuple[str, tuple[float, tuple[str, ...]]]]:
        return sorted(self._entries.items(), key=lambda item: -item[1][0])

    def _write(self) -> None:
        if self.path is None:
            return
        rows = [{"peer": p, "seen": seen, "maddrs": list(maddrs)} for p, (seen, maddrs) in self._newest()]
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
            with os.fdopen(fd, "w") as f:
                json.dump({"peers": rows}, f)
            os.replace(tmp, self.path)
        except OSError as e:
            log.warning("cannot write the address book %s: %s", self.path, e.strerror or e)

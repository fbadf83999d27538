"""HiveMind DHT backend: a permissionless swarm with no master.

Exchange = store this peer's encoded payload under the key (swarm, round, stage) with the peer
id as subkey and an expiration, then poll with backoff until ``min_peers`` payloads are there
or the deadline passes. Each peer also records the round it is playing, so one that fell
behind jumps to the swarm's round (``swarm_round``) instead of holding the others back.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import logging
import os
import shutil
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from genrl_swarm.comm.base import ByteBackend, RawExchange
from genrl_swarm.comm.errors import SwarmFailure

log = logging.getLogger(__name__)
PEERS_ENV = "GENRL_SWARM_INITIAL_PEERS"
#: hivemind's connections carry messages up to 4 MiB; leave room for the DHT's own framing.
DEFAULT_MAX_BYTES = 3_500_000
#: Payloads go into the DHT in chunks this small. hivemind's DHT process reads its control pipe
#: from a non-blocking fd; a store request larger than one atomic pipe write (4 KiB) can be read
#: half-way and kill that process (seen here with 60 KB - 200 KB values).
CHUNK = 3_000


def initial_peers_from_env() -> list[str]:
    return os.environ.get(PEERS_ENV, "").replace(",", " ").split()


def _children(pid: int) -> list[int]:
    """Direct children of ``pid`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _die_with_parent() -> None:
    """In hivemind's forked DHT process: when the peer process dies (even by SIGKILL), take
    p2pd down and exit, instead of lingering as an orphan that still holds the peer id."""

    def stop(signum: int, frame: object) -> None:
        for child in _children(os.getpid()):
            os.kill(child, signal.SIGKILL)
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: no parent-death signal to ask for
        return
    if os.getppid() == 1:  # the parent died before the request took effect
        stop(signal.SIGTERM, None)


def _dht_class() -> Any:
    import hivemind

    class PeerDHT(hivemind.DHT):  # type: ignore[misc]
        def run(self) -> None:
            _die_with_parent()
            super().run()

    return PeerDHT


class IdentityLock:
    """Holds an exclusive lock beside the identity file while this peer runs: two processes
    with one identity would fight over one peer id. The OS drops the lock if we die."""

    def __init__(self, identity_path: str) -> None:
        self.path = Path(identity_path).expanduser()
        if self.path.exists() and not os.access(self.path, os.R_OK):
            raise SwarmFailure(f"identity file {self.path} is not readable: fix its permissions or pass another --identity")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = open(f"{self.path}.lock", "w")  # noqa: SIM115 - held for the peer's lifetime
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            self._file.close()
            raise SwarmFailure(
                f"identity file {self.path} is already used by a running peer: stop it, or give this peer its own --identity"
            ) from e

    def release(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class HivemindBackend(ByteBackend):
    def __init__(
        self,
        initial_peers: Sequence[str] = (),
        host_maddrs: Sequence[str] = ("/ip4/127.0.0.1/tcp/0",),
        identity_path: str | None = None,
        swarm: str = "genrl-swarm",
        min_peers: int = 2,
        ttl: float = 600.0,
        startup_timeout: float = 30.0,
        max_poll_interval: float = 1.0,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        super().__init__(max_bytes)
        self.swarm, self.min_peers, self.ttl, self.max_poll = swarm, min_peers, ttl, max_poll_interval
        self.initial_peers = list(initial_peers) or initial_peers_from_env()
        self._lock = IdentityLock(identity_path) if identity_path else None
        self.dht = self._start(list(host_maddrs), identity_path, startup_timeout)
        self._peer_id = str(self.dht.peer_id)
        # A stable per-identity number, so ${peer.rank}/${peer.seed} differ between peers.
        self.rank = int(hashlib.sha256(self._peer_id.encode()).hexdigest()[:6], 16)
        log.info("DHT peer %s listening on %s", self._peer_id, " ".join(self.visible_maddrs()))

    def _start(self, host_maddrs: list[str], identity_path: str | None, timeout: float) -> Any:
        try:
            import hivemind
        except ImportError as e:
            raise SwarmFailure("the hivemind backend needs: pip install 'genrl-swarm[hivemind]'") from e
        kwargs: dict[str, Any] = {"host_maddrs": host_maddrs, "startup_timeout": timeout}
        if identity_path:
            kwargs["identity_path"] = str(Path(identity_path).expanduser())
        try:
            return _dht_class()(initial_peers=self.initial_peers, start=True, **kwargs)
        except Exception as e:  # noqa: BLE001 - hivemind raises plain Exceptions; each is explained below
            if self._lock:
                self._lock.release()
            raise SwarmFailure(self._explain(e, host_maddrs, timeout)) from e

    def _explain(self, error: BaseException, host_maddrs: list[str], timeout: float) -> str:
        text = str(error)
        if "bootstrap" in text:
            return (
                f"no initial peer answered (tried {', '.join(self.initial_peers)}). Check that those peers are "
                f"running, that each multiaddr is exactly what the first peer printed (with its /p2p/ id), and "
                f"that their ports are reachable from here."
            )
        if "address already in use" in text.lower():
            return f"port in use: cannot listen on {', '.join(host_maddrs)}; pick a free port or /tcp/0"
        if isinstance(error, TimeoutError) or "timeout" in text.lower() or "timed out" in text.lower():
            binary = shutil.which("p2pd") or "hivemind's bundled p2pd"
            return f"the p2pd daemon ({binary}) did not start within {timeout:.0f}s; raise communication.startup_timeout"
        if "identity" in text.lower() or "key" in text.lower():
            return f"cannot use the identity file: {text.splitlines()[0]}. Delete it to make a new identity."
        return f"the DHT did not start: {text.splitlines()[0] if text else type(error).__name__}"

    @property
    def peer_id(self) -> str:
        return self._peer_id

    def visible_maddrs(self) -> list[str]:
        return [str(m) for m in self.dht.get_visible_maddrs()]

    def _key(self, round: int, stage: int) -> str:
        return f"{self.swarm}/r{round}/s{stage}"

    def _exchange_bytes(self, round: int, stage: int, data: bytes, timeout: float) -> RawExchange:
        from hivemind.utils import get_dht_time

        deadline, key = time.monotonic() + timeout, self._key(round, stage)
        expiration = get_dht_time() + self.ttl
        self.dht.store(f"{self.swarm}/progress", round, expiration, subkey=self.peer_id)
        chunks = [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)] or [b""]
        for i, chunk in enumerate(chunks):
            if not self.dht.store(key, chunk, expiration, subkey=f"{self.peer_id}#{i}/{len(chunks)}"):
                log.warning("%s: the DHT did not accept chunk %d of this peer's payload for %s", self.peer_id, i, key)
        payloads, wait = {}, 0.05
        while True:
            payloads = self._read(key)
            remaining = deadline - time.monotonic()
            if len(payloads) >= self.min_peers or remaining <= 0:
                return RawExchange(payloads, expected=self.min_peers)
            time.sleep(min(wait, remaining))
            wait = min(wait * 2, self.max_poll)

    def _read(self, key: str) -> dict[str, Any]:
        """Every peer's payload under ``key``, reassembled from its chunks (``peer#i/n``); a peer
        whose chunks are not all there yet is left out. Odd records (no chunk suffix, non-bytes
        values) are passed on as they are, for the codec to reject: dropped, never a crash."""
        found = self.dht.get(key, latest=True)
        if found is None or not isinstance(found.value, dict):
            return {}
        whole: dict[str, Any] = {}
        parts: dict[str, dict[int, Any]] = {}
        counts: dict[str, int] = {}
        for sub, item in found.value.items():
            if item is None:
                continue
            peer, sep, position = str(sub).rpartition("#")
            index, _, total = position.partition("/")
            if not (sep and index.isdigit() and total.isdigit() and isinstance(item.value, bytes)):
                whole[str(sub)] = item.value
                continue
            parts.setdefault(peer, {})[int(index)] = item.value
            counts[peer] = int(total)
        for peer, chunks in parts.items():
            if len(chunks) == counts[peer] and set(chunks) == set(range(counts[peer])):
                whole[peer] = b"".join(chunks[i] for i in range(counts[peer]))
        return whole

    def swarm_round(self) -> int:
        """The highest round any peer announced: where a peer that fell behind rejoins."""
        rounds = [v for v in self._read(f"{self.swarm}/progress").values() if isinstance(v, int) and v >= 0]
        return max(rounds, default=0)

    def close(self) -> None:
        try:
            self.dht.shutdown()
        finally:
            if self._lock:
                self._lock.release()

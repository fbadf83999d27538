"""Start a peer's DHT process under its swarm identity; every bootstrap failure becomes one
line that says what to do.

The identity file is written by ``Identity.load_or_create`` (libp2p's protobuf Ed25519 format)
and handed to p2pd, so the libp2p peer id *is* the swarm peer id. Run directories are named after
that id, so no message here ever suggests deleting an identity file: a new file is a new peer.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import shutil
import socket
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from genrl_swarm.comm.errors import SwarmFailure
from genrl_swarm.comm.hivemind.process import LOCK_FDS, STARTED, dht_class, free_shared_locks, kill_all, p2pd_of
from genrl_swarm.core.identity import Identity, IdentityError

log = logging.getLogger(__name__)

PEERS_ENV = "GENRL_SWARM_INITIAL_PEERS"
#: Never advise deleting an identity: its peer id names the run directory --resume reads.
KEEP_IDENTITY = (
    "restore the original file (run directories are named after the peer id it holds), or pass another --identity path to start a NEW peer"
)
NEW_PEER = "pass another --identity path to start a NEW peer"


def initial_peers_from_env() -> list[str]:
    return os.environ.get(PEERS_ENV, "").replace(",", " ").split()


def check_multiaddrs(initial_peers: Sequence[str], host_maddrs: Sequence[str]) -> None:
    """SwarmFailure naming the first address that cannot work, and what it lacks."""
    from hivemind.utils.multiaddr import Multiaddr

    example = "/ip4/HOST/tcp/PORT/p2p/12D3KooW..."
    for text in initial_peers:
        try:
            addr = Multiaddr(text)
        except ValueError as e:
            raise SwarmFailure(f"initial peer {text!r} is not a multiaddr ({e}); expected {example}, exactly as the first peer printed it") from e
        if "p2p" not in addr:
            raise SwarmFailure(
                f"initial peer {text!r} has no /p2p/<peer id> part: libp2p dials a peer by its id, so copy the whole "
                f"address the first peer printed ({text.rstrip('/')}/p2p/12D3KooW...)"
            )
    for text in host_maddrs:
        try:
            addr = Multiaddr(text)
        except ValueError as e:
            raise SwarmFailure(f"communication.host_maddrs: {text!r} is not a multiaddr ({e}); e.g. /ip4/127.0.0.1/tcp/0") from e
        check_port_free(addr, text)


def check_port_free(addr: Any, text: str) -> None:
    """SwarmFailure if another process listens on the TCP port ``addr`` asks for. Why here: p2pd
    listens with SO_REUSEPORT, so a port another p2pd holds does not fail p2pd's own bind; the
    clash showed up only as "no initial peer answered" many seconds later."""
    family = next((f for proto, f in (("ip4", socket.AF_INET), ("ip6", socket.AF_INET6)) if proto in addr), None)
    if family is None or "tcp" not in addr or int(addr.value_for_protocol("tcp")) == 0:
        return
    host = addr.value_for_protocol("ip4" if family == socket.AF_INET else "ip6")
    with socket.socket(family, socket.SOCK_STREAM) as probe:  # no SO_REUSEPORT: any listener there refuses it
        try:
            probe.bind((host, int(addr.value_for_protocol("tcp"))))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise SwarmFailure(
                    f"port in use: cannot listen on {text}: another process (another peer's p2pd?) listens there; pick a free port or /tcp/0"
                ) from e


class IdentityLock:
    """Holds an exclusive lock beside the identity file while this peer runs: two processes
    with one identity would fight over one peer id. The OS drops the lock if we die."""

    def __init__(self, identity_path: Path) -> None:
        self.path = identity_path
        if self.path.exists() and not os.access(self.path, os.R_OK):
            raise SwarmFailure(f"identity file {self.path} is not readable: fix its permissions (chmod u+r), or {NEW_PEER}")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file: IO[str] | None = open(f"{self.path}.lock", "w")  # noqa: SIM115 - held for the peer's lifetime
        except OSError as e:
            raise SwarmFailure(f"cannot lock identity file {self.path}: {e.strerror or e}") from e
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            self._file.close()
            raise SwarmFailure(f"identity file {self.path} is already used by a running peer on this machine: stop that peer, or {NEW_PEER}") from e
        LOCK_FDS.add(self._file.fileno())

    def release(self) -> None:
        if self._file is not None:
            LOCK_FDS.discard(self._file.fileno())
            self._file.close()
            self._file = None


class PeerIdentity:
    """This peer's key file (given, or a temporary one), its lock, and the Identity in it."""

    def __init__(self, identity_path: str | None) -> None:
        self.lock: IdentityLock | None = None
        self._tmp: Path | None = None
        if identity_path is None:
            self._tmp = Path(tempfile.mkdtemp(prefix="genrl-swarm-identity-"))
            self.path = self._tmp / "identity.key"
        else:
            self.path = Path(identity_path).expanduser()
            self.lock = IdentityLock(self.path)
        try:
            self.identity = Identity.load_or_create(self.path)
        except IdentityError as e:
            self.release()
            why = "not libp2p's Ed25519 format, or corrupt"
            raise IdentityError(f"identity file {self.path} is not a key this library wrote ({why}): {KEEP_IDENTITY}") from e
        except OSError as e:
            self.release()
            raise SwarmFailure(f"cannot create identity file {self.path}: {e.strerror or e}") from e

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)


#: Starts tried when no initial peer answers the bootstrap ping (a busy peer, not a wrong address).
BOOTSTRAP_TRIES = 3


def start_dht(key: Path, initial_peers: list[str], host_maddrs: list[str], timeout: float, validators: list[Any], nat: bool = False) -> Any:
    """hivemind's DHT process with p2pd on this identity, ready within ``timeout`` or a
    SwarmFailure. (hivemind's own identity check cannot read Ed25519 keys: the lock and the
    membership records check instead.) ``nat``: let p2pd map ports on the router (UPnP) and probe
    its reachability; off by default, so a swarm on one machine sends nothing off the host.

    A start that times out is tried once more: hivemind forks its DHT process from this one, and a
    fork taken while another thread holds a lock can leave the child stuck for good (seen now and
    then in a test process running many peers' threads). A bootstrap that no initial peer answered
    is tried up to ``BOOTSTRAP_TRIES`` times: hivemind gives the ping 3 s, which a saturated
    machine's initial peer can miss (seen in a full test run beside other swarms). Any other
    failure is explained at once."""
    for attempt in range(1, BOOTSTRAP_TRIES + 1):
        try:
            return _launch(key, initial_peers, host_maddrs, timeout, validators, nat)
        except Exception as e:  # noqa: BLE001 - hivemind raises plain Exceptions from its process; each is explained
            text = str(e).lower()
            if attempt == 1 and (isinstance(e, TimeoutError) or "timeout" in text or "timed out" in text):
                log.warning("the DHT did not start within %.0fs (%s); trying once more", timeout, type(e).__name__)
                continue
            if attempt < BOOTSTRAP_TRIES and "bootstrap" in text:
                log.warning("no initial peer answered the bootstrap ping (try %d of %d); trying again", attempt, BOOTSTRAP_TRIES)
                continue
            raise SwarmFailure(explain(e, initial_peers, host_maddrs, timeout)) from e
    raise AssertionError("unreachable")


def _launch(key: Path, initial_peers: list[str], host_maddrs: list[str], timeout: float, validators: list[Any], nat: bool) -> Any:
    """One DHT process started and ready, or its exception after the process and p2pd are gone."""
    free_shared_locks()
    dht = dht_class()(
        initial_peers=initial_peers,
        start=False,
        host_maddrs=host_maddrs,
        identity_path=str(key),
        check_if_identity_free=False,
        nat_port_map=nat,
        auto_nat=nat,
        startup_timeout=timeout,
        record_validators=validators,
        # Members are always read with latest=True: hivemind's caches would only add traffic
        # (re-storing every found value, refreshing records that expire in seconds anyway).
        cache_nearest=0,
        cache_refresh_before_expiry=0,
        cache_on_store=False,
    )
    STARTED.add(dht)
    try:
        dht.run_in_background(await_ready=True, timeout=timeout + 15)
    except BaseException:
        p2pd = p2pd_of(dht.pid) if dht.pid else None
        if dht.is_alive():
            dht.terminate()
            dht.join(3)
        kill_all([p2pd])
        raise
    return dht


def explain(error: BaseException, initial_peers: Sequence[str], host_maddrs: Sequence[str], timeout: float) -> str:
    text = str(error)
    first = text.splitlines()[0] if text else type(error).__name__
    if "bootstrap" in text:
        return (
            f"no initial peer answered (tried {', '.join(initial_peers)}). Check that those peers are running, that "
            f"each multiaddr is exactly what a running peer printed (with its /p2p/ id), and that their ports are reachable from here."
        )
    if "address already in use" in text.lower():
        return f"port in use: cannot listen on {', '.join(host_maddrs)}; pick a free port or /tcp/0"
    if isinstance(error, TimeoutError) or "timeout" in text.lower() or "timed out" in text.lower():
        binary = shutil.which("p2pd") or "hivemind's bundled p2pd"
        return f"the p2pd daemon ({binary}) or the DHT did not start within {timeout:.0f}s; raise communication.startup_timeout"
    if "identity" in text.lower() or "key" in text.lower():
        return f"p2pd cannot use the identity file: {first}; {KEEP_IDENTITY}"
    if "can't access this node" in text:
        # The initial peer dialled this peer id back and did not reach this process: either a
        # firewall, or the same identity already running elsewhere (the dial reached the twin).
        return (
            f"the DHT did not start: an initial peer could not dial this peer back ({first}). Either this "
            f"identity is already used by a running peer (a copied key file): stop that peer, or {NEW_PEER}; "
            "or this peer's listen address is not reachable from its initial peers."
        )
    return f"the DHT did not start: {first}"

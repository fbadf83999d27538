"""The network, churn, compute and attack model of the simulator, with its defaults and where
they come from. Every number is a parameter of ``genrl-swarm simulate``.

Defaults (approximate readings of published measurements, not re-measured here):

* **RTT between end hosts**: log-normal, median 70 ms, sigma 0.6 (p95 about 190 ms, p99 about
  280 ms). All-pairs end-host datasets, King (Gummadi, Saroiu, Gribble, IMW 2002) and Meridian
  (Wong, Slivkins, Sirer, SIGCOMM 2005), put the median between roughly 60 and 80 ms with a
  tail past 300 ms; Hoiland-Jorgensen et al. (IMC 2016) find latency per path heavy-tailed.
* **Bandwidth**: home links are asymmetric. Ookla's Speedtest Global Index and M-Lab place
  median fixed broadband around 50-100 Mbit/s down with uplinks of 10-40 Mbit/s; cable and DSL
  uplinks of 5-20 Mbit/s are common. ``HOME`` mixes 60% 50/10 Mbit/s (cable, DSL), 30% 300/100
  (fibre) and 10% 20/5 (slow DSL, LTE); ``MIXED`` replaces a quarter of it with 1 Gbit/s
  symmetric datacenter hosts.
* **Loss**: 1% of pulls fail once and are retried after a timeout (a reset connection, a
  retransmission timeout of at least 200 ms: RFC 6298's minimum RTO is 1 s, Linux uses 200 ms).
* **Unreachable peers**: 30% cannot be dialled (behind NAT without relay). Trautwein et al.
  (SIGCOMM 2022, IPFS) report a large share of DHT peers unreachable; 30% is on the low side.
* **Churn**: ``per_hour`` of the peers leave per hour (session lengths Weibull, shape 0.6:
  Stutzbach and Rejaie, IMC 2006, measured heavy-tailed sessions); half of them crash (no
  goodbye), the others announce it; each comes back after an exponential downtime (10 min).
* **Compute** per round: log-normal, median 10 s, sigma 0.3 (a small model's generation on a
  home GPU; only its spread matters to the exchange).
* **CPU on received data**: Ed25519 verify 70 us per commitment, sha256 at 500 MB/s, decoding
  and checking typed bodies 25 ms per MB, about 1 ms per pull (``bench_exchange.py``;
  docs/benchmarks.md, "Exchange latency on gloo"). ``host_cores`` puts every peer on one machine's cores (the loopback validation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Link:
    """A class of access link: its share of the peers, down and up Mbit/s."""

    share: float
    down_mbps: float
    up_mbps: float


HOME = (Link(0.6, 50, 10), Link(0.3, 300, 100), Link(0.1, 20, 5))
MIXED = (Link(0.45, 50, 10), Link(0.22, 300, 100), Link(0.08, 20, 5), Link(0.25, 1000, 1000))
#: One machine's loopback (the validation against real p2pd peers): about 1 GB/s per stream.
LOOPBACK = (Link(1.0, 8000, 8000),)
MIXES = {"home": HOME, "mixed": MIXED, "loopback": LOOPBACK}


@dataclass(frozen=True)
class NetModel:
    rtt_median_ms: float = 70.0
    rtt_sigma: float = 0.6
    loss: float = 0.01
    retry_s: float = 0.2
    nat_fraction: float = 0.3
    mix: str = "home"


@dataclass(frozen=True)
class ChurnModel:
    per_hour: float = 0.1
    crash_share: float = 0.5
    weibull_shape: float = 0.6
    downtime_s: float = 600.0

    def mean_session_s(self) -> float:
        return math.inf if self.per_hour <= 0 else 3600.0 / self.per_hour


@dataclass(frozen=True)
class CpuModel:
    verify_s: float = 70e-6
    hash_bytes_per_s: float = 500e6
    decode_s_per_mb: float = 0.025
    pull_s: float = 1e-3  # CPU of one pull, both ends (p2pd, protobuf, the Python handler)
    host_cores: int = 0  # 0: every peer on its own machine; n: all peers share n cores (loopback)

    def receive_s(self, commits: Any, payload_bytes: Any) -> Any:
        return commits * self.verify_s + payload_bytes * (1 / self.hash_bytes_per_s + self.decode_s_per_mb / 1e6)

    def pulls_s(self, mine: Any, swarm_total: float) -> Any:
        """CPU time a phase's pulls add to one receiver: its own, or on a shared host everyone's
        pulls queued on its cores."""
        return swarm_total * self.pull_s / self.host_cores if self.host_cores else mine * self.pull_s


#: The attack classes of "Trust", dealt round-robin to the hostile peers.
ATTACKS = ("flood", "forge", "copy", "future")


@dataclass(frozen=True)
class SimConfig:
    peers: int = 100
    rounds: int = 20
    payload_bytes: int = 256 << 10
    strategy: str = "pull_spare"
    strategy_params: dict[str, Any] = field(default_factory=dict)
    want: int = 8  # swarm payloads each peer wants per round (SAPO's num_external)
    hostile_fraction: float = 0.0
    timeout_s: float = 30.0  # game.exchange_timeout
    liveness_s: float = 3.0  # communication.liveness_timeout
    compute_median_s: float = 10.0
    compute_sigma: float = 0.3
    max_bytes: int = 2 << 20  # trust.max_bytes: a flooder commits to more
    quorum: float = 0.5
    max_jump: int = 50
    observe: int = 10_000  # receivers simulated in detail when every peer pulls from all (all-to-all)
    seed: int = 0
    swarm: str = "sim"
    net: NetModel = NetModel()
    churn: ChurnModel = ChurnModel()
    cpu: CpuModel = CpuModel()

    def __post_init__(self) -> None:
        if self.peers < 2 or self.rounds < 1 or self.payload_bytes < 1 or self.want < 1:
            raise ValueError("simulate: need peers >= 2, rounds >= 1, payload >= 1 byte, want >= 1")
        if not 0 <= self.hostile_fraction < 1 or not 0 <= self.net.nat_fraction < 1 or not 0 <= self.net.loss < 1:
            raise ValueError("simulate: hostile, NAT and loss fractions must be in [0, 1)")
        if self.net.mix not in MIXES:
            raise ValueError(f"simulate: unknown bandwidth mix {self.net.mix!r}; choose {', '.join(MIXES)}")

"""Does the simulator predict the real transport? Real HiveMind peers on loopback (each its own
process with its own DHT process and p2pd, ``bench_exchange.py``) against the simulator's
prediction for the same swarm, at 4 and 8 peers.

One parameter is calibrated, at 2 peers: the CPU time of one pull (p2pd, protobuf and the Python
handler at both ends), because on one machine that, not the wire, is the round trip. Every peer
shares the machine's cores in the model (``host_cores``), as the real processes do. The
prediction at 4 and 8 peers is then out of sample. A round here is one exchange (no compute),
16 KB payloads, strategy ``all`` (what the real transport ran before ``communication.strategy``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT / "src"))

from genrl_swarm.sim import ChurnModel, CpuModel, NetModel, SimConfig, simulate  # noqa: E402

WORLDS = (2, 4, 8)
PAYLOAD = 16 << 10


def measure(iters: int = 10) -> dict[int, float]:
    """Real exchange p50 (seconds) per world size, from bench_exchange.py's table."""
    cmd = [
        sys.executable,
        str(ROOT / "benchmarks" / "bench_exchange.py"),
        "--backends",
        "hivemind",
        "--worlds",
        *map(str, WORLDS),
        "--sizes",
        "16 KB",
        "--iters",
        str(iters),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=ROOT / "benchmarks", check=True).stdout
    rows = re.findall(r"^\|\s*(\d+)\s*\|\s*16 KB\s*\|\s*([\d.,]+)\s*\|", out, flags=re.M)
    return {int(w): float(ms.replace(",", "")) / 1000 for w, ms in rows}


def predict(world: int, pull_s: float) -> float:
    cfg = SimConfig(
        peers=world,
        rounds=20,
        payload_bytes=PAYLOAD,
        strategy="all",
        compute_median_s=1e-3,
        compute_sigma=0.0,
        net=NetModel(rtt_median_ms=0.1, rtt_sigma=0.3, loss=0.0, nat_fraction=0.0, mix="loopback"),
        churn=ChurnModel(per_hour=0.0),
        cpu=CpuModel(pull_s=pull_s, host_cores=os.cpu_count() or 2),
    )
    return simulate(cfg).exchange_p50


def calibrate(real_2: float) -> float:
    """The pull CPU time that makes the 2-peer prediction equal the 2-peer measurement."""
    base, probe = predict(2, 0.0), predict(2, 1e-3)
    return 1e-3 * (real_2 - base) / (probe - base)


def main() -> None:
    real = measure()
    pull_s = calibrate(real[2])
    print(f"calibrated at 2 peers: one pull costs {pull_s * 1000:.2f} ms of CPU; {os.cpu_count()} cores shared by every peer")
    print("| peers | real exchange p50 ms | simulated p50 ms | simulated / real | within 2x |")
    print("|---|---|---|---|---|")
    for world in WORLDS:
        sim = predict(world, pull_s)
        ratio = sim / real[world]
        print(
            f"| {world} | {real[world] * 1000:.1f} | {sim * 1000:.1f} | {ratio:.2f} | {'calibration' if world == 2 else ('yes' if 0.5 <= ratio <= 2 else 'NO')} |"
        )


if __name__ == "__main__":
    main()

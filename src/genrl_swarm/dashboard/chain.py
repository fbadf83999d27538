"""The on-chain leaderboard: read-only calls to a SwarmCoordinator (no key, no transactions).

Labels are whatever each account registered (untrusted text, clipped); totals and wins are
the contract's settled books. Accounts are read in batches, at most ``max_accounts`` of them,
so a chain with a flood of registrations costs a bounded number of calls per refresh.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from genrl_swarm.coord.errors import CoordinatorError
from genrl_swarm.coord.scores import REWARD_SCALE
from genrl_swarm.run.events import clip

BATCH = 200


@dataclass
class ChainStandings:
    """``read()`` returns the chain section of the snapshot; an unreachable node is an error
    text on the page, never a crash of the server."""

    rpc_url: str
    contract: str
    max_accounts: int = 5000
    w3: Any = None
    _contract: Any = field(default=None, repr=False)

    def _bind(self) -> Any:
        if self._contract is None:
            from genrl_swarm.coord.evm import artifact, connect

            w3 = self.w3 if self.w3 is not None else connect(self.rpc_url)
            address = w3.to_checksum_address(self.contract)
            if not w3.eth.get_code(address):
                raise CoordinatorError(f"no contract at {self.contract}")
            self._contract = w3.eth.contract(address=address, abi=artifact()["abi"])
        return self._contract

    def read(self) -> dict[str, Any]:
        base = {"contract": self.contract, "time": round(time.time(), 3)}
        try:
            fns = self._bind().functions
            round_, stage, stages = fns.progress().call()
            accounts = list(fns.registeredAccounts().call())[: self.max_accounts]
            rows = []
            for i in range(0, len(accounts), BATCH):
                part = accounts[i : i + BATCH]
                labels, totals, wins = fns.labels(part).call(), fns.totalRewards(part).call(), fns.winCounts(part).call()
                rows += [
                    {"id": clip(str(label)), "account": str(a), "cumulative": t / REWARD_SCALE, "wins": int(w)}
                    for a, label, t, w in zip(part, labels, totals, wins)
                ]
        except Exception as e:  # noqa: BLE001 - web3 raises many types for a bad node; shown, retried next refresh
            return base | {"error": clip(f"{type(e).__name__}: {e}")}
        rows.sort(key=lambda r: (-r["cumulative"], -r["wins"], r["account"]))
        return base | {"round": int(round_), "stage": int(stage), "stages": int(stages), "rows": rows, "error": None}

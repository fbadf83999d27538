#!/usr/bin/env python3
"""Compile contracts/SwarmCoordinator.sol offline with the npm package solc (pinned in
contracts/package.json) into src/genrl_swarm/coord/SwarmCoordinator.json (ABI + bytecode),
so Python users need no Node.

    (cd contracts && npm install) && python scripts/compile_contract.py [--check]

--check compiles and fails if the committed artifact differs (a stale artifact).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "contracts" / "SwarmCoordinator.sol"
ARTIFACT = ROOT / "src" / "genrl_swarm" / "coord" / "SwarmCoordinator.json"
SOLCJS = ROOT / "contracts" / "node_modules" / ".bin" / "solcjs"
EVM_VERSION = "paris"  # no PUSH0: deployable on chains and dev nodes that lag behind Shanghai


def compile_source() -> dict[str, object]:
    if not SOLCJS.exists():
        raise SystemExit(f"{SOLCJS} is missing: run `npm install` in {SOLCJS.parents[2]}")
    source = SOURCE.read_text()
    request = {
        "language": "Solidity",
        "sources": {SOURCE.name: {"content": source}},
        "settings": {
            "optimizer": {"enabled": True, "runs": 200},
            "evmVersion": EVM_VERSION,
            "outputSelection": {"*": {"*": ["abi", "evm.bytecode.object"]}},
        },
    }
    done = subprocess.run([str(SOLCJS), "--standard-json"], input=json.dumps(request), capture_output=True, text=True, check=True)
    output = json.loads(done.stdout[done.stdout.index("{") :])  # solcjs prints a non-JSON line first
    errors = [e for e in output.get("errors", []) if e["severity"] == "error"]
    if errors:
        raise SystemExit("\n".join(e["formattedMessage"] for e in errors))
    contract = output["contracts"][SOURCE.name]["SwarmCoordinator"]
    version = subprocess.run([str(SOLCJS), "--version"], capture_output=True, text=True, check=True).stdout.strip()
    return {
        "contractName": "SwarmCoordinator",
        "compiler": version,
        "evmVersion": EVM_VERSION,
        "sourceSha256": hashlib.sha256(source.encode()).hexdigest(),
        "abi": contract["abi"],
        "bytecode": "0x" + contract["evm"]["bytecode"]["object"],
    }


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--check", action="store_true", help="fail if the committed artifact is stale")
    args = p.parse_args()
    artifact = compile_source()
    text = json.dumps(artifact, indent=1) + "\n"
    if args.check:
        if not ARTIFACT.is_file() or ARTIFACT.read_text() != text:
            print(f"{ARTIFACT} is stale: run python scripts/compile_contract.py", file=sys.stderr)
            return 1
        print("artifact up to date")
        return 0
    ARTIFACT.write_text(text)
    print(f"wrote {ARTIFACT} ({len(artifact['bytecode']) // 2} bytes of bytecode)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

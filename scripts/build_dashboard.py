#!/usr/bin/env python3
"""Build the dashboard's front end (dashboard/src, TypeScript + uPlot) into the Python package,
src/genrl_swarm/dashboard/static, so `pip install` needs no npm.

    (cd dashboard && npm ci) && python scripts/build_dashboard.py [--check]

The tools are pinned in dashboard/package-lock.json and esbuild's output depends only on its
input, so the same source always gives the same bytes. static/build.json records the sha256 of
the source; a test compares it, and --check rebuilds into a temporary directory and fails if
any shipped file differs (a stale bundle).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FRONT = ROOT / "dashboard"
STATIC = ROOT / "src" / "genrl_swarm" / "dashboard" / "static"
BIN = FRONT / "node_modules" / ".bin"
INPUTS = ("package-lock.json", "tsconfig.json")  # with everything under src/


def source_files() -> list[Path]:
    return sorted([*(p for p in (FRONT / "src").rglob("*") if p.is_file()), *(FRONT / name for name in INPUTS)])


def source_sha256() -> str:
    """One hash over the front end's source and pinned tool versions (paths and bytes)."""
    digest = hashlib.sha256()
    for path in source_files():
        digest.update(path.relative_to(FRONT).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def build(out: Path) -> None:
    """The bundle into ``out``: index.html, assets/app.js, assets/app.css, build.json."""
    esbuild = BIN / "esbuild"
    if not esbuild.exists():
        raise SystemExit(f"{esbuild} is missing: run `npm ci` in {FRONT}")
    (out / "assets").mkdir(parents=True, exist_ok=True)
    command = [str(esbuild), "src/main.ts", "--bundle", "--minify", "--format=esm", "--target=es2020", "--charset=utf8",
               "--legal-comments=eof", "--log-level=warning", f"--outfile={out / 'assets' / 'app.js'}"]  # fmt: skip
    subprocess.run(command, cwd=FRONT, check=True)
    shutil.copyfile(FRONT / "src" / "index.html", out / "index.html")
    version = subprocess.run([str(esbuild), "--version"], capture_output=True, text=True, check=True).stdout.strip()
    manifest = {"source_sha256": source_sha256(), "esbuild": version, "files": sorted(_files(out, skip="build.json"))}
    (out / "build.json").write_text(json.dumps(manifest, indent=2) + "\n")


def _files(directory: Path, skip: str = "") -> dict[str, str]:
    """Relative path -> sha256 of every file under ``directory``."""
    return {
        p.relative_to(directory).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in directory.rglob("*")
        if p.is_file() and p.name != skip
    }


def typecheck() -> None:
    subprocess.run([str(BIN / "tsc"), "--noEmit", "-p", str(FRONT)], check=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="rebuild in a temporary directory; fail if the shipped bundle differs")
    p.add_argument("--no-typecheck", action="store_true", help="skip tsc (the bundle does not depend on it)")
    args = p.parse_args()
    if not args.no_typecheck and not args.check:
        typecheck()
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "static"
        build(fresh)
        if args.check:
            built, shipped = _files(fresh), _files(STATIC) if STATIC.exists() else {}
            stale = sorted(name for name in built.keys() | shipped.keys() if built.get(name) != shipped.get(name))
            if stale:
                print(f"the shipped dashboard bundle is stale ({', '.join(stale)} differ): run python scripts/build_dashboard.py", file=sys.stderr)
                return 1
            print("the shipped dashboard bundle matches the source")
            return 0
        if STATIC.exists():
            shutil.rmtree(STATIC)
        shutil.copytree(fresh, STATIC)
    print(f"built {STATIC.relative_to(ROOT)}: {', '.join(sorted(_files(STATIC)))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

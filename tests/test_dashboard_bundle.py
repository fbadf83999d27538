"""The dashboard's front end ships built inside the package: it must be the build of the source
in dashboard/ (as the contract artifact must be the compile of its .sol), and it must be
package data, so `pip install` brings it and needs no npm."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from fnmatch import fnmatch
from pathlib import Path
from types import ModuleType

import pytest
import tomllib

ROOT = Path(__file__).parents[1]
STATIC = ROOT / "src" / "genrl_swarm" / "dashboard" / "static"
ESBUILD = ROOT / "dashboard" / "node_modules" / ".bin" / "esbuild"


def build_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_dashboard", ROOT / "scripts" / "build_dashboard.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_shipped_bundle_records_the_hash_of_this_source() -> None:
    """Runs everywhere (no Node needed): an edit under dashboard/src without a rebuild fails here."""
    manifest = json.loads((STATIC / "build.json").read_text())
    assert manifest["source_sha256"] == build_script().source_sha256(), (
        "dashboard/ changed since the bundle was built: run python scripts/build_dashboard.py"
    )
    assert sorted(manifest["files"]) == sorted(p.relative_to(STATIC).as_posix() for p in STATIC.rglob("*") if p.is_file() and p.name != "build.json")


@pytest.mark.skipif(not ESBUILD.exists() or shutil.which("node") is None, reason="Node and dashboard/node_modules (npm ci) are needed to rebuild")
def test_the_shipped_bundle_is_what_the_build_script_makes() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_dashboard.py"), "--check"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def test_the_bundle_is_package_data() -> None:
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["genrl_swarm.dashboard"]
    shipped = [p.relative_to(STATIC.parent).as_posix() for p in STATIC.rglob("*") if p.is_file()]
    assert shipped and all(any(fnmatch(f, pattern) for pattern in patterns) for f in shipped), shipped


def test_the_front_end_never_parses_strings_as_html() -> None:
    """Peer ids and reasons are untrusted; text goes in through text nodes only (dom.ts)."""
    for path in sorted((ROOT / "dashboard" / "src").glob("*.ts")):
        found = re.findall(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function", path.read_text())
        assert not found, f"{path.name} uses {found}"

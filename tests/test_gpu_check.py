"""``scripts/gpu_check.sh`` (issue 47.8), checked where there is no GPU: it refuses in one line,
what it would run exists, its table reads pytest's reports right, and its benchmark runs (on the
CPU here, with tiny sizes). The GPU path itself has not run: no device was lent to this project."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).parents[1]


@cache
def gpu_check() -> ModuleType:
    """scripts/gpu_check.py as a module (registered: its dataclasses look their module up)."""
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    module = sys.modules["gpu_check"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_cuda_it_stops_at_once_in_one_line() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here: scripts/gpu_check.sh runs the whole check")
    done = subprocess.run(
        [str(ROOT / "scripts" / "gpu_check.sh")], capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHON": sys.executable}
    )
    assert done.returncode == 2 and done.stdout == "", done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_check: no usable CUDA device: torch "), done.stderr
    missing = subprocess.run(
        [str(ROOT / "scripts" / "gpu_check.sh")], capture_output=True, text=True, env={**os.environ, "PYTHON": "/nonexistent/python"}
    )
    assert missing.returncode == 2 and missing.stderr.startswith("gpu_check: no interpreter at /nonexistent/python"), missing.stderr


def test_what_it_runs_exists() -> None:
    check = gpu_check()
    assert check.TESTS and all((ROOT / path).is_file() for path in check.TESTS)
    assert (ROOT / "benchmarks" / "bench_gpu.py").is_file()
    assert check.DEADLINE_S + 30 < 600  # the whole check within 10 minutes, start-up included


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" failures="1" skipped="1" tests="4">
<testcase classname="tests.test_x" name="test_ok" time="0.1"/>
<testcase classname="tests.test_x" name="test_ok_too" time="0.1"/>
<testcase classname="tests.test_x" name="test_cuda" time="0.2"><failure message="RuntimeError: Expected all tensors to be on the same device">trace</failure></testcase>
<testcase classname="tests.test_x" name="test_skip" time="0"><skipped message="no"/></testcase>
</testsuite></testsuites>"""


def test_a_pytest_report_becomes_one_row(tmp_path: Path) -> None:
    check = gpu_check()
    (tmp_path / "r.xml").write_text(JUNIT)
    row = check.junit_check("tests/test_x.py", tmp_path / "r.xml", 1.5, 1, False)
    assert (row.result, row.ok) == ("2 passed, 1 failed, 1 skipped", False)
    assert row.detail == "first: test_cuda: RuntimeError: Expected all tensors to be on the same device"
    assert not check.junit_check("tests/test_x.py", tmp_path / "absent.xml", 540.0, -1, True).ok
    rows = [
        check.Check("device", "1 GPU(s)", "H100"),
        row,
        *check.bench_rows('{"arm": "sampler", "rate": 1234.5, "unit": "tokens/s", "detail": "8x8"}\n'),
    ]
    text = check.table(rows).splitlines()
    assert len(text) == 5 and len({len(line) for line in text}) == 1  # one table, aligned
    assert "| sampler " in text[4] and "1,234.5 tokens/s" in text[4]


@pytest.mark.slow  # builds and runs the tiny model
def test_its_benchmark_runs_here_on_the_cpu() -> None:
    pytest.importorskip("transformers")  # the tiny model
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_gpu
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    args = bench_gpu.arguments(["--device", "cpu", "--prompts", "2", "--generations", "2", "--max-new-tokens", "4", "--repeats", "1"])
    rows = bench_gpu.run(args)
    assert [r.arm for r in rows] == [name for name, _ in bench_gpu.SAMPLERS] + ["GRPO step (generate + update)"]
    assert all(r.rate > 0 and r.detail.endswith("cpu") for r in rows)

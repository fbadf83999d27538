"""Mixed precision for the learner: bf16 matmuls under autocast, float32 master weights.

The parameters, their gradients and AdamW's moments stay float32, so the optimiser step is
exactly AdamW on the (bf16-computed) gradient; only the forward/backward matmuls and the
activations they produce are bf16. That pays only where the hardware has native bf16
(AVX512-BF16 / AMX on CPUs, Ampere+ GPUs): elsewhere bf16 matmuls are emulated and slower.
The learner's log-probs then differ from a float32 sampler's by bf16 rounding; the off-policy
correction (pi_prox / mu) sees that as a small behaviour mismatch, which it is.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import torch

Precision = Literal["auto", "float32", "bfloat16"]


@functools.cache
def native_bf16(device_type: str = "cpu") -> bool:
    """Whether bf16 matmuls run natively here (CPU flags avx512_bf16 / amx_bf16, or a CUDA GPU with bf16)."""
    if device_type == "cuda":
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def compute_dtype(precision: Precision, device_type: str) -> torch.dtype:
    """float32 or bfloat16; ``auto`` is bf16 where it is native."""
    if precision == "auto":
        return torch.bfloat16 if native_bf16(device_type) else torch.float32
    return torch.bfloat16 if precision == "bfloat16" else torch.float32


@contextlib.contextmanager
def autocast(dtype: torch.dtype, device_type: str) -> Iterator[None]:
    """Autocast to ``dtype`` for forward passes; a no-op for float32."""
    if dtype == torch.float32:
        yield
        return
    with torch.autocast(device_type=device_type, dtype=dtype):
        yield


def inexact_fp32(device: torch.device, dtype: torch.dtype) -> str | None:
    """Why draws (or a check's forward) in ``dtype`` on ``device`` are not exact fp32, or None.

    ``lm.verify``'s tolerance holds fp32 matmuls on any CPU or GPU kernel (measured on an H200
    against CPUs, docs/benchmarks.md), not bf16 weights, and not TF32 (``torch.backends.cuda.
    matmul.allow_tf32``, or ``torch.set_float32_matmul_precision("high")``, a common GPU setting):
    a TF32 sender failed 22% of an fp32 receiver's checks on the tiny model and every one on
    SmolLM2. A peer that draws or checks so commits no model and checks no one, rather than have
    honest peers prove each other wrong."""
    if dtype != torch.float32:
        return f"{str(dtype).removeprefix('torch.')} weights"
    if torch.get_float32_matmul_precision() != "highest":
        return f"float32 matmul precision {torch.get_float32_matmul_precision()!r}"
    if device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32:
        return "TF32 matmuls (torch.backends.cuda.matmul.allow_tf32)"
    return None

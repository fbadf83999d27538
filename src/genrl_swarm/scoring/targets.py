"""Scorers are named ``package.module:function``: a name travels to the sandbox, a function does not."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

_resolved: dict[str, Callable[..., Any]] = {}


def resolve(target: str) -> Callable[..., Any]:
    """``module:function`` -> the function (imported once per process)."""
    if target not in _resolved:
        module, _, name = target.partition(":")
        _resolved[target] = getattr(importlib.import_module(module), name)
    return _resolved[target]

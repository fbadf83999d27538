"""The error of a model that cannot be loaded, importable without torch (the command reports it)."""

from __future__ import annotations


class ModelLoadError(RuntimeError):
    """A model that could not be loaded; the message says what was tried and what to do."""

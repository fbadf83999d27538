"""Helpers the tests import (``from helpers import Echo, RecordingGame, Stranger``); conftest.py
keeps only fixtures and hooks. ``helpers.dist`` (torch) holds what torchrun ranks and peer
processes load by Hydra target (``PYTHONPATH=tests``), so it is not imported here."""

from helpers.game import Echo, RecordingGame, echo
from helpers.stranger import Stranger, msgspec_replace

__all__ = ["Echo", "RecordingGame", "Stranger", "echo", "msgspec_replace"]

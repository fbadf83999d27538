"""Whether this process is a torchrun rank, asked without importing torch: the launcher asks it
for every run, and the bandit and the core install without torch."""

from __future__ import annotations

import os


def under_torchrun() -> bool:
    """True in a process started by torchrun (or with the same environment set by hand)."""
    return "TORCHELASTIC_RUN_ID" in os.environ or ("RANK" in os.environ and "WORLD_SIZE" in os.environ)

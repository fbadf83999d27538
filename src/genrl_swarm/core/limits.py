"""Settings under which a game would play without playing: refused with the limit to raise.

Why an error of its own. A prompt longer than an episode's token limit leaves the model no turn:
the episode ends before it starts, the learner has nothing to train on, and the run used to go
through every round and exit 0 without a word. A ``LimitError`` ends the run at once instead, as
a recipe error naming the setting that has to change (the command prints it in one line).
"""

from __future__ import annotations


class LimitError(ValueError):
    """A limit leaves a game nothing to play; the message names the setting to raise."""

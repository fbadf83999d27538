"""Third-party chatter kept off the console, precisely.

``genrl-swarm`` logs at INFO so that our own one-line notes show (thread budget, resume,
caches). The root logger's INFO would also let libraries narrate their internals, e.g. JAX's
``Unable to initialize backend 'tpu': ... libtpu.so`` and ``Resetting cache at <empty>`` on
every MARL start. The loggers named here go to WARNING: their warnings and errors still show,
our loggers (``genrl_swarm.*``) are untouched, and a level the user set on one of them wins.
"""

from __future__ import annotations

import logging

#: Libraries whose INFO records are internals, not news for whoever runs a swarm. JAX's records
#: come from ``jax._src.*``; the ``jax`` logger itself is left alone because JAX reads its level's
#: *name* at import (the default of its ``jax_logging_level`` flag), and hivemind renames
#: WARNING to "WARN", which JAX refuses: with both, ``import jax`` raised ValueError.
CHATTY = ("jax._src", "absl", "httpx", "httpcore", "huggingface_hub", "urllib3", "filelock")


def quiet_third_party() -> None:
    for name in CHATTY:
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:  # set by the user (or their logging config): left alone
            logger.setLevel(logging.WARNING)

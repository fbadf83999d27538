"""Errors a backend raises when the swarm itself (not one payload) fails."""


class SwarmFailure(RuntimeError):
    """The swarm cannot continue from this peer: a rank died or hung, a daemon did not start,
    no initial peer answered. The message says what was tried and what to do next."""

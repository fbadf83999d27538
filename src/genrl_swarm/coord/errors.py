"""Errors of coordinators, importable without web3 (the CLI reports them in one line)."""


class CoordinatorError(RuntimeError):
    """The chain cannot be used as configured; the message says what to fix."""

"""Coordinators: the local one (default) and, as an optional extra, the EVM one."""

from genrl_swarm.coord.local import LocalCoordinator

__all__ = ["LocalCoordinator"]

"""envd: the environment service. A controller routes sessions to worker processes, whose
sandboxed children run the task code; reachable in-process (``LocalEnv``) or over gRPC
(``genrl-swarm envd``, ``RemoteEnv``). grpc is imported only by the gRPC modules."""

from genrl_swarm.envd.api import EnvClient, Environment, connect
from genrl_swarm.envd.controller import EnvdConfig

__all__ = ["EnvClient", "EnvdConfig", "Environment", "connect"]

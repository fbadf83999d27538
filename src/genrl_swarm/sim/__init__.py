"""A discrete-event simulator of the swarm's exchange at internet scale (``genrl-swarm simulate``).

It drives the protocol core (``genrl_swarm.protocol``) that the HiveMind transport runs, over a
model of the network (``model``): payloads are never materialised, only their sizes, digests
and the CPU their checks cost.
"""

from genrl_swarm.sim.engine import Simulation, simulate
from genrl_swarm.sim.model import ChurnModel, CpuModel, NetModel, SimConfig
from genrl_swarm.sim.summary import Summary, table

__all__ = ["ChurnModel", "CpuModel", "NetModel", "SimConfig", "Simulation", "Summary", "simulate", "table"]

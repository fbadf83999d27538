"""Hydra config groups shared by every recipe (found through ``pkg://genrl_swarm.conf``).

``communication/`` picks the backend (memory | none | torch | hivemind) and ``coordinator/``
the referee (local | evm). A recipe names its defaults; ``communication=torch`` overrides them.
"""

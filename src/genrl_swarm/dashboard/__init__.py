"""``genrl-swarm dashboard``: a live page over run directories, peers' status and the chain.

The server (``server``, ``serve``) needs the ``dashboard`` extra (starlette, uvicorn); the
readers (``runs``, ``view``) and the ``run.events`` hook need nothing beyond the core, so a run can
record what the page shows without the extra installed. The front end is built from
``dashboard/`` at the repository root by ``scripts/build_dashboard.py`` and shipped in
``static/``: installing the package needs no npm.
"""

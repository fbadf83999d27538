"""Asynchronous GRPO on Ray: rollout workers and one learner that overlap.

Rollout workers (LMPolicy replicas) generate and score groups while the learner trains on
the groups already in a versioned buffer; a group sampled more than ``max_staleness`` learner
versions ago is dropped or down-weighted. Weights travel through Ray's object store (NCCL on
GPUs). The modules have one job each:

- ``config``: the ``learner.pipeline`` / ``learner.ray`` sections and their checks;
- ``staleness``: how stale a group is, what that costs it, the distribution as metrics;
- ``buffer``: the versioned rollout buffer (pure Python, no Ray);
- ``trainer``: GRPO on a list of groups with per-group weights (no Ray);
- ``weight_sync``: publishing and loading weights (object store; NCCL guarded);
- ``worker`` / ``learner_actor``: the Ray actors' bodies;
- ``cluster``: ``ray.init`` and the placement group;
- ``pipeline``: the driver loop that overlaps them, with fault tolerance and checkpoints;
- ``peer``: ``AsyncGRPOLearner``, the pipeline behind the game's Learner interface.

Only the modules that need Ray import it; ``config``, ``staleness``, ``buffer`` and
``trainer`` stay importable without it.
"""

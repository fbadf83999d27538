"""A tiny Llama and a tokenizer trained offline: fast, deterministic tests and benchmarks.

The model is briefly trained (~10 s on one CPU thread) on chat-formatted arithmetic, so it is
not degenerate: its greedy continuation depends on the prompt (it echoes the operands and the
operator it saw, more or less), its distribution is peaked (temperature and top-p change what
is drawn), and its replies end with EOS after a prompt-dependent number of tokens. A random
model gave every prompt the same greedy output and almost never emitted EOS, so tests built on
it could not fail.
"""

from __future__ import annotations

import random
from pathlib import Path

import torch

SPECIALS = ["<pad>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
#: Part of the cache key (lm.models.ensure_tiny_model): bump it whenever the build changes, so a
#: model cached by an older build is never reused.
VERSION = 2
TRAIN_STEPS = 200
BATCH = 16


def _corpus(seed: int) -> list[str]:
    """Arithmetic, answers and prompt words: what the tests' prompts are made of."""
    rng = random.Random(seed)
    words = [
        "Calculate",
        "What",
        "is",
        "the",
        "answer",
        "Answer",
        "Student",
        "Choice",
        "Critique",
        "question",
        "system",
        "user",
        "assistant",
        "Give",
        "your",
        "final",
        "answer",
        "in",
        "<answer>",
        "</answer>",
        "tags",
        "think",
        "reason",
        "step",
        "by",
        "step",
        "the",
        "of",
        "and",
        "is",
    ]
    lines = []
    for _ in range(2000):
        a, b = rng.randint(-999, 999), rng.randint(-999, 999)
        op = rng.choice("+-*/")
        lines.append(f"{rng.choice(words)} {a} {op} {b} = <answer>{a + b}</answer> {' '.join(rng.sample(words, 4))}")
    return lines


def _chats(seed: int, count: int, system_prompt: str) -> list[str]:
    """Chat transcripts (the template's format): a question "a op b" on digits, a reply that echoes
    it and answers, then EOS; products are thought about "step by step" first, so replies end
    after a prompt-dependent number of tokens. Half of them carry the policy's system prompt."""
    rng = random.Random(seed)
    chats = []
    for _ in range(count):
        a, b, op = rng.randint(0, 9), rng.randint(0, 9), rng.choice("+-*")
        value = {"+": a + b, "-": a - b, "*": a * b}[op]
        reply = f"{'step by step ' if op == '*' else ''}{a} {op} {b} = <answer>{value}</answer>"
        turns = [("system", system_prompt)] if rng.random() < 0.5 else []
        turns += [("user", f"{rng.choice(['Calculate', 'What is', 'Compute', 'Solve'])} {a} {op} {b}."), ("assistant", reply)]
        chats.append("".join(f"<|im_start|>{role}\n{text}<|im_end|>\n" for role, text in turns))
    return chats


def _train(model: torch.nn.Module, sequences: list[list[int]], pad_id: int) -> None:
    """Next-token training, ``BATCH`` sequences per step, on one thread (bitwise reproducible)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    model.train()
    for step in range(TRAIN_STEPS):
        chunk = sequences[step * BATCH : (step + 1) * BATCH]
        width = max(len(s) for s in chunk)
        ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for i, s in enumerate(chunk):
            ids[i, : len(s)], mask[i, : len(s)] = torch.tensor(s, dtype=torch.long), 1
        loss = model(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100)).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()


def build_tiny_model(directory: Path, seed: int = 0, hidden: int = 64, layers: int = 2) -> None:
    """Tokenizer and model into ``directory``; leaves the caller's RNG and thread count alone."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from genrl_swarm.paradigms.lm.answers import DEFAULT_SYSTEM_PROMPT

    bpe = Tokenizer(models.BPE(unk_token=None))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(_corpus(seed), trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, pad_token="<pad>", bos_token="<|im_start|>", eos_token="<|im_end|>")
    tokenizer.chat_template = CHAT_TEMPLATE
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
    sequences = tokenizer(_chats(seed, TRAIN_STEPS * BATCH, DEFAULT_SYSTEM_PROMPT), add_special_tokens=False)["input_ids"]
    threads = torch.get_num_threads()
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        torch.set_num_threads(1)  # a multi-threaded matmul may sum in another order: another model
        try:
            model = LlamaForCausalLM(config)
            _train(model, sequences, tokenizer.pad_token_id)
        finally:
            torch.set_num_threads(threads)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)

"""Pulling the final answer out of a completion, for models that rarely answer cleanly."""

from __future__ import annotations

import re
from fractions import Fraction

OPEN, CLOSE = "<answer>", "</answer>"
#: What the LM policy asks for by default (``LMPolicy.system_prompt``), and what ``extract_answer`` reads first.
DEFAULT_SYSTEM_PROMPT = "You are a careful assistant. Reason briefly, then give only the final answer inside <answer></answer> tags."
_BOXED = re.compile(r"\\boxed\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)\}")
_PHRASE = re.compile(r"(?:final answer|answer)\s*(?:is|:|=)\s*(.+)", re.IGNORECASE)


def extract_answer(text: str) -> str | None:
    """The last ``<answer>`` block; else an unclosed one; else the last ``\\boxed{}``; else the
    last "answer is/answer:" phrase; else the last non-empty line. None for an empty text.

    Completions are peer-controlled text: every step here is linear in its length (a lazy
    ``<answer>(.*?)</answer>`` regex took 25 s on 20,000 unclosed tags)."""
    block = _answer_block(text)
    if block is not None:
        return _clean(block)
    found = _BOXED.findall(text)
    if found:
        return _clean(found[-1])
    lines = [line for line in text.strip().splitlines() if line.strip()]
    for line in reversed(lines):
        match = _PHRASE.search(line)
        if match:
            return _clean(match.group(1))
    return _clean(lines[-1]) if lines else None


def tagged_answer(text: str) -> str | None:
    """Reasoning Gym's extraction (``reasoning_gym.utils.extract_answer``), in linear time: the
    content of the last closed ``<answer>...</answer>`` pair (case-sensitive, pairs taken left to
    right without overlap, each open tag closed by the first close after it), stripped; None when
    there is none. Its regex (``<answer>\\s?(.*?)\\s?</answer>``) is quadratic on unclosed tags."""
    found, at = None, 0
    while (start := text.find(OPEN, at)) >= 0 and (end := text.find(CLOSE, start + len(OPEN))) >= 0:
        found, at = (start + len(OPEN), end), end + len(CLOSE)
    return None if found is None else text[found[0] : found[1]].strip()


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?")


def last_number(text: str) -> str | None:
    found = _NUMBER.findall(text)
    return found[-1].replace(",", "") if found else None


_LATEX_FRACTION = re.compile(r"\\d?frac\{\s*(-?\d{1,64})\s*\}\{\s*(\d{1,64})\s*\}")


def extract_for(gold: str | None, text: str) -> str | None:
    """``extract_answer``, but when the gold answer is a number and the extracted text is not,
    fall back to the last number in the completion ("... so 4 x 9 = 36"). LaTeX fractions
    (``\\frac{3}{4}``) read as ``3/4`` first: the last number of one is its denominator."""
    answer = extract_answer(_LATEX_FRACTION.sub(r"\1/\2", text))
    if gold is not None and _number(gold) is not None and (answer is None or _number(answer) is None):
        return last_number(answer or "") or last_number(text) or answer
    return answer


def _clean(answer: str) -> str:
    return answer.strip().strip("*").strip().rstrip(".").strip()


def _answer_block(text: str) -> str | None:
    """The content of the last closed ``<answer>`` block (case-insensitive), else of the last
    unclosed one, else None."""
    lower = text.lower()
    end = lower.rfind(CLOSE)
    if end >= 0:
        start = lower.rfind(OPEN, 0, end)
        if start >= 0:
            return text[start + len(OPEN) : end]
    start = lower.rfind(OPEN)
    return text[start + len(OPEN) :] if start >= 0 and lower.find(CLOSE, start) < 0 else None


def well_formatted(text: str) -> bool:
    """Exactly one closed, non-empty ``<answer>`` block."""
    lower = text.lower()
    if lower.count(OPEN) != 1 or lower.count(CLOSE) != 1:
        return False
    start, end = lower.find(OPEN) + len(OPEN), lower.find(CLOSE)
    return start <= end and bool(text[start:end].strip())


#: What ``_number`` accepts: plain decimals and fractions of bounded length, an exponent of at
#: most 3 digits. ``Fraction("1e30000000")`` computes 10**30000000 (minutes of CPU, holding the
#: GIL), and completions are peer-controlled text.
_PLAIN_NUMBER = re.compile(r"[-+]?(\d{1,64}(\.\d{0,64})?|\.\d{1,64})([eE][-+]?\d{1,3})?(/\d{1,64})?")


def _number(text: str) -> Fraction | None:
    cleaned = text.replace(",", "").replace("$", "").replace(" ", "").rstrip("%")
    if len(cleaned) > 200 or not _PLAIN_NUMBER.fullmatch(cleaned):
        return None
    try:
        return Fraction(cleaned)
    except (ValueError, ZeroDivisionError):
        return None


def answers_match(predicted: str | None, gold: str) -> bool:
    """Numerically equal when both parse as numbers (1/2 == 0.5 == 0.50), else equal ignoring case and spaces."""
    if predicted is None:
        return False
    a, b = _number(predicted), _number(gold)
    if a is not None and b is not None:
        return a == b
    return " ".join(predicted.lower().split()) == " ".join(gold.lower().split())

"""A safe arithmetic evaluator for the calculator tool: a recursive-descent parser, no ``eval``.

Exact rational arithmetic (``Fraction``) over + - * / % ^ (also **) and parentheses. Bounded so a
model cannot make it expensive: input length, nesting depth, magnitude of every intermediate
value, and small integer exponents only. Every rejection is a ``ToolFailure`` the model reads.
"""

from __future__ import annotations

import re
from fractions import Fraction

from genrl_swarm.envd.tasks.base import ToolFailure

MAX_CHARS = 256
MAX_DEPTH = 32
MAX_MAGNITUDE = Fraction(10) ** 30
MAX_EXPONENT = 64
_TOKEN = re.compile(r"\s*(?:(\d+(?:\.\d*)?|\.\d+)|(\*\*|[-+*/%^()]))")


def _tokens(text: str) -> list[str]:
    out, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            rest = text[pos:].lstrip()
            if not rest:
                break
            raise ToolFailure(f"unexpected character {rest[0]!r} at position {len(text) - len(rest)}")  # where it is, not the blank before
        out.append(m.group(1) or m.group(2))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, tokens: list[str]) -> None:
        self.tokens, self.pos, self.depth = tokens, 0, 0

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise ToolFailure("the expression ends too early")
        self.pos += 1
        return token

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ToolFailure(f"the expression nests deeper than {MAX_DEPTH} levels")

    def expr(self) -> Fraction:
        value = self.term()
        while self.peek() in ("+", "-"):
            value = _bounded(value + self.term() if self.take() == "+" else value - self.term())
        return value

    def term(self) -> Fraction:
        value = self.unary()
        while self.peek() in ("*", "/", "%"):
            op, right = self.take(), self.unary()
            if op != "*" and right == 0:
                raise ToolFailure("division by zero")
            value = _bounded(value * right if op == "*" else value / right if op == "/" else value % right)
        return value

    def unary(self) -> Fraction:
        if self.peek() in ("+", "-"):
            self.enter()
            sign = -1 if self.take() == "-" else 1
            value = sign * self.unary()
            self.depth -= 1
            return value
        return self.power()

    def power(self) -> Fraction:
        base = self.atom()
        if self.peek() not in ("^", "**"):
            return base
        self.take()
        self.enter()
        exponent = self.unary()
        self.depth -= 1
        if exponent.denominator != 1 or abs(exponent) > MAX_EXPONENT:
            raise ToolFailure(f"exponents must be whole numbers up to {MAX_EXPONENT}")
        if base == 0 and exponent < 0:
            raise ToolFailure("division by zero")
        # No size pre-check: a base is a literal of at most MAX_CHARS digits or a bounded value, so
        # even the largest power allowed (a 256-digit base ^ 64) takes microseconds; _bounded decides.
        return _bounded(base ** int(exponent))

    def atom(self) -> Fraction:
        token = self.take()
        if token == "(":
            self.enter()
            value = self.expr()
            if self.take() != ")":
                raise ToolFailure("a parenthesis is not closed")
            self.depth -= 1
            return value
        if token[0].isdigit() or token[0] == ".":
            return Fraction(token)
        raise ToolFailure(f"unexpected {token!r}")


def _bounded(value: Fraction) -> Fraction:
    if abs(value) > MAX_MAGNITUDE or value.denominator > MAX_MAGNITUDE:
        raise ToolFailure("the result is too large")
    return value


def evaluate(text: str) -> Fraction:
    """The exact value of an arithmetic expression; ToolFailure when it is not one."""
    if len(text) > MAX_CHARS:
        raise ToolFailure(f"the expression is longer than {MAX_CHARS} characters")
    parser = _Parser(_tokens(text))
    if not parser.tokens:
        raise ToolFailure("the expression is empty")
    value = parser.expr()
    if parser.peek() is not None:
        raise ToolFailure(f"unexpected {parser.peek()!r} after a complete expression")
    return value


def show(value: Fraction) -> str:
    """An integer as is; anything else as a decimal to 6 places (trailing zeros dropped)."""
    if value.denominator == 1:
        return str(value.numerator)
    scaled = round(abs(value) * 10**6)
    sign = "-" if value < 0 and scaled else ""  # a negative value that rounds to 0 is "0", not "-0"
    whole, rest = divmod(scaled, 10**6)
    return f"{sign}{whole}.{rest:06d}".rstrip("0").rstrip(".")

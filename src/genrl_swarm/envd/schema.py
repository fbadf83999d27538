"""Tool declarations (OpenAI/HF ``tools=`` entries) and argument checks against them.

Only the JSON-Schema subset tools here use is checked: an object of named properties, each a
string (``maxLength``, ``enum``), integer or number (``minimum``, ``maximum``) or boolean, with
``required`` and no extra keys. A failed check is a sentence for the model, never an exception.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

_TYPES: dict[str, tuple[type, ...]] = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,)}


@dataclass(frozen=True)
class Param:
    """One argument of a tool."""

    type: str  # string | integer | number | boolean
    description: str
    max_length: int | None = None
    enum: tuple[Any, ...] = ()
    minimum: float | None = None
    maximum: float | None = None

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "description": self.description}
        for key, value in (("maxLength", self.max_length), ("minimum", self.minimum), ("maximum", self.maximum)):
            if value is not None:
                out[key] = value
        if self.enum:
            out["enum"] = list(self.enum)
        return out

    def problem(self, sent: object) -> str | None:
        """Why ``sent`` (a JSON value from the model) does not fit, or None."""
        if not isinstance(sent, _TYPES[self.type]) or (self.type != "boolean" and isinstance(sent, bool)):
            return f"must be a {self.type}, got {type(sent).__name__}"
        value: Any = sent  # a str, int, float or bool from here on
        if self.max_length is not None and len(value) > self.max_length:
            return f"is {len(value)} characters long (at most {self.max_length})"
        if self.enum and value not in self.enum:
            return f"must be one of {list(self.enum)}"
        if self.minimum is not None and value < self.minimum:
            return f"must be >= {self.minimum}"
        if self.maximum is not None and value > self.maximum:
            return f"must be <= {self.maximum}"
        return None


@dataclass(frozen=True)
class Tool:
    """A tool a task offers: its name, what it does, and its parameters (all required unless
    listed in ``optional``)."""

    name: str
    description: str
    params: dict[str, Param] = field(default_factory=dict)
    optional: frozenset[str] = frozenset()

    def declaration(self) -> dict[str, Any]:
        """The OpenAI/HF ``tools=`` entry."""
        properties = {k: p.schema() for k, p in self.params.items()}
        required = [k for k in self.params if k not in self.optional]
        parameters = {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
        return {"type": "function", "function": {"name": self.name, "description": self.description, "parameters": parameters}}

    def problem(self, arguments: dict[str, Any]) -> str | None:
        """Why ``arguments`` do not fit this tool's schema, as a sentence for the model, or None."""
        unknown = sorted(set(arguments) - set(self.params))
        if unknown:
            return f"{self.name} has no argument {unknown[0]!r} (arguments: {', '.join(self.params) or 'none'})"
        missing = [k for k in self.params if k not in arguments and k not in self.optional]
        if missing:
            return f"{self.name} needs the argument {missing[0]!r}"
        for key, value in arguments.items():
            why = self.params[key].problem(value)
            if why:
                return f"{self.name}: argument {key!r} {why}"
        return None

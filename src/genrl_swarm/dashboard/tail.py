"""Reading a JSONL file that another process appends to, a bounded slice per call.

The dashboard polls file sizes: a file that grew is read from where the last call stopped; a
file that was rewritten (a resumed run rewrites its metrics.jsonl, then appends) is read again
from the start: it shrank, or the bytes just before where the last call stopped changed; a line
still being written (no newline yet) waits for the next call. Each call reads at most
``chunk`` bytes, so a huge file is caught up over several polls instead of stalling the server.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO


@dataclass
class JsonlTail:
    path: Path
    chunk: int = 4 << 20
    max_line: int = 1 << 20  # a longer "line" is not a metrics row: skipped
    offset: int = 0
    skipped: int = 0  # lines that were not a JSON object (cut, foreign, hostile), over the file's life
    mtime: float = 0.0
    _partial: bytes = field(default=b"", repr=False)
    _seen: bytes = field(default=b"", repr=False)  # the last bytes read, to notice a rewrite

    def read(self) -> tuple[list[dict[str, Any]], bool]:
        """New complete rows, and whether the file was rewritten (the caller drops what it had)."""
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return [], False
        self.mtime = stat.st_mtime
        with self.path.open("rb") as f:
            reset = stat.st_size < self.offset or not self._unchanged(f)
            if reset:
                self.offset, self._partial, self._seen = 0, b"", b""
            if stat.st_size == self.offset:
                return [], reset
            f.seek(self.offset)
            data = f.read(self.chunk)
        self.offset += len(data)
        self._seen = (self._seen + data)[-64:]
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > self.max_line:
            self._partial = b""
            self.skipped += 1
        rows = []
        for line in lines:
            if line.strip():
                row = _parse(line)
                if row is None:
                    self.skipped += 1
                else:
                    rows.append(row)
        return rows, reset

    def _unchanged(self, f: BinaryIO) -> bool:
        if not self._seen:
            return True
        f.seek(self.offset - len(self._seen))
        return bool(f.read(len(self._seen)) == self._seen)

    @property
    def behind(self) -> bool:
        """More bytes are waiting than the last call read (call again soon)."""
        try:
            return os.stat(self.path).st_size > self.offset
        except FileNotFoundError:
            return False


MAX_DEPTH = 32  # a metrics row or event nests 2-3 deep; json.loads recurses once per level
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_NOT_BRACKET = re.compile(rb"[^\[\]{}]+")


def _too_deep(line: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether the line nests over ``limit`` arrays/objects. Checked before ``json.loads``, which
    recurses in C: with the recursion limit raised (some libraries do) ``[[[[...`` overflows the
    C stack and kills the process instead of raising RecursionError."""
    if line.count(b"[") + line.count(b"{") <= limit:
        return False
    depth = 0
    for c in _NOT_BRACKET.sub(b"", _STRING.sub(b"", line)):
        depth += 1 if c in b"[{" else -1
        if depth > limit:
            return True
    return False


def _parse(line: bytes) -> dict[str, Any] | None:
    """One row, or None for a blank, cut, foreign or hostile line (the metrics reader skips them too)."""
    if not line.strip() or _too_deep(line):
        return None
    try:
        row = json.loads(line)
    except (ValueError, RecursionError):  # broken JSON, bad UTF-8, a 5000-digit int, ``[[[[...`` nested past the stack
        return None
    return row if isinstance(row, dict) else None

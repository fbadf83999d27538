"""Length-prefixed msgpack frames over pipes and sockets between our own processes.

Four bytes of big-endian length, then the payload. The length is checked against a cap before
anything is read, so a confused peer cannot make the reader allocate without bound.
"""

from __future__ import annotations

import asyncio
import os
import struct

MAX_FRAME = 4 << 20
_HEADER = struct.Struct(">I")


class FrameError(Exception):
    """The other side sent a frame over the cap, or closed mid-frame."""


def pack(payload: bytes) -> bytes:
    if len(payload) > MAX_FRAME:
        raise FrameError(f"frame of {len(payload)} bytes is over the {MAX_FRAME}-byte cap")
    return _HEADER.pack(len(payload)) + payload


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    """The next payload; IncompleteReadError at a clean end of stream."""
    (size,) = _HEADER.unpack(await reader.readexactly(_HEADER.size))
    if size > MAX_FRAME:
        raise FrameError(f"frame of {size} bytes announced, over the {MAX_FRAME}-byte cap")
    return await reader.readexactly(size)


def _read_exactly(fd: int, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame_blocking(fd: int) -> bytes | None:
    """The next payload from a blocking fd, or None at end of stream."""
    header = _read_exactly(fd, _HEADER.size)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    if size > MAX_FRAME:
        raise FrameError(f"frame of {size} bytes announced, over the {MAX_FRAME}-byte cap")
    return _read_exactly(fd, size)


def write_frame_blocking(fd: int, payload: bytes) -> None:
    view = memoryview(pack(payload))
    while view:
        view = view[os.write(fd, view) :]

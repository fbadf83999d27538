"""Atomic checkpoints: a crash mid-write never leaves a checkpoint that looks complete.

Each checkpoint is written into a hidden temporary directory, then renamed into place (an
atomic step on POSIX); ``latest`` is replaced the same way. A reader trusts only directories
that contain ``state.json``, which is written last.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Protocol

from genrl_swarm.run.storage import saving, writing

log = logging.getLogger(__name__)

STATE_FILE = "state.json"


class Saveable(Protocol):
    def save(self, directory: Path) -> None: ...

    def load(self, directory: Path) -> None: ...


def write_atomic(path: Path, text: str) -> None:
    """``path`` holds ``text`` whole or keeps what it held: a failed write (a full disk) removes
    its temporary and leaves ``path`` untouched."""
    with writing(path):
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def save_checkpoint(root: Path, round: int, parts: Mapping[str, Saveable], info: dict[str, Any], keep: int = 3) -> Path:
    """Save each part (policy, learner) into its own subdirectory after ``round``, with ``info``
    (the peer's books) in state.json; returns the checkpoint directory."""
    root.mkdir(parents=True, exist_ok=True)
    name = f"round_{round:06d}"
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=root))
    final = root / name
    try:
        with saving(tmp, named=final):  # named by the checkpoint, not by its temporary (removed below)
            for part_name, part in parts.items():
                (tmp / part_name).mkdir()
                part.save(tmp / part_name)
            write_atomic(tmp / STATE_FILE, json.dumps({"round": round, **info}))
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    write_atomic(root / "latest", name)
    for old in sorted(p for p in root.glob("round_*") if (p / STATE_FILE).is_file())[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def remove_stale_temporaries(root: Path) -> int:
    """Remove what a process killed mid-save left behind (``.round_N.*`` directories, ``.latest.*``
    files): never a checkpoint, since a reader trusts only renamed, complete ones. Call it only
    while holding the run directory's lock, so no live writer's temporary is removed."""
    if not root.is_dir():
        return 0
    stale = [p for p in root.iterdir() if p.name.startswith((".round_", ".latest."))]
    for path in stale:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return len(stale)


def drop_part_from_older(root: Path, part: str) -> None:
    """Remove ``part`` from every complete checkpoint under ``root`` but the newest: renamed to a
    hidden name first, so a checkpoint never holds half a part (a kill leaves a stale temporary)."""
    complete = sorted(p for p in root.glob("round_*") if (p / STATE_FILE).is_file())
    for old in complete[:-1]:
        if (old / part).is_dir():
            doomed = Path(tempfile.mkdtemp(prefix=f".{old.name}.{part}.", dir=root))
            os.replace(old / part, doomed / part)
            shutil.rmtree(doomed, ignore_errors=True)


def load_checkpoint(directory: Path, parts: Mapping[str, Saveable], optional: Collection[str] = ()) -> dict[str, Any]:
    """Restore each part from ``directory``; returns the saved state.json (round and books). A
    part named in ``optional`` and absent from the checkpoint keeps its fresh state (logged)."""
    for name, part in parts.items():
        if name in optional and not (directory / name).is_dir():
            log.warning("%s holds no %s state (run.learner_state_in_latest_only): it starts fresh", directory, name)
            continue
        part.load(directory / name)
    state: dict[str, Any] = json.loads((directory / STATE_FILE).read_text())
    return state


def latest_checkpoint(root: Path) -> tuple[int, Path] | None:
    """The newest complete checkpoint under ``root``, or None."""
    complete = sorted(p for p in root.glob("round_*") if (p / STATE_FILE).is_file())
    pointer = root / "latest"
    if pointer.is_file() and (root / pointer.read_text().strip() / STATE_FILE).is_file():
        chosen = root / pointer.read_text().strip()
    elif complete:
        chosen = complete[-1]
    else:
        return None
    return int(json.loads((chosen / STATE_FILE).read_text())["round"]), chosen

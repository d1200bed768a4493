"""Other processes as tests see them through /proc: their argument lists (to find a Spark driver to kill)."""
from __future__ import annotations

from pathlib import Path


def argv_of(pid: str | int) -> list[str]:
    """The process's arguments; empty when it is gone (or not ours to read)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]

"""Other processes as tests see them through /proc: their argument lists (to find a Spark driver to kill)."""
from __future__ import annotations

import json
from pathlib import Path


def argv_of(pid: str | int) -> list[str]:
    """The process's arguments; empty when it is gone (or not ours to read)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def snapshot_tables(argv: list[str]) -> list[str]:
    """The tables a snapshot app's command line names: its ``--chunk-group`` JSON's, or its ``--table``."""
    if "--chunk-group" in argv:
        try:
            group = json.loads(argv[argv.index("--chunk-group") + 1])
            return [str(part["table"]) for part in group["parts"]]
        except (IndexError, ValueError, KeyError, TypeError):
            return []
    if "--table" in argv and argv.index("--table") + 1 < len(argv):
        return [argv[argv.index("--table") + 1]]
    return []

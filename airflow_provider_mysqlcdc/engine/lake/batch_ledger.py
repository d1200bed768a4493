"""The batch ledger: the stream checkpoint's record of each batch id the sink began and committed.

``<checkpoint>/mysqlcdc/batches/batch=<id>.json``, written by the batch commit (``changelog_commit``): once
with ``state: "writing"`` before any of the batch's files (so a batch id seen again is known to be a replay:
the run was killed after Spark planned it), and once with ``state: "committed"`` and what the batch wrote
(``replay``, ``rows`` per table, ``start_offset``/``end_offset`` as ``BinlogOffset`` dicts,
``committed_at``). The last ``LEDGER_RETAIN`` entries are kept. Version 0 (no ``format_version``): what
earlier releases wrote, the same fields.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_mysqlcdc.engine.lake.layout import filesystem, read_json, write_json_atomic
from airflow_provider_mysqlcdc.engine.lake.record_format import (
    FORMAT_VERSION,
    offset_dict,
    optional_str,
    parse_offset,
    record_version,
)
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset

LEDGER_VERSION = 1  # 1: format_version added (version 0: the same fields without it)
LEDGER_DIR = "mysqlcdc/batches"
LEDGER_RETAIN = 1000  # batch ledgers kept in the checkpoint (Spark itself keeps ~100 batches of metadata)
WRITING, COMMITTED = "writing", "committed"


@dataclass(frozen=True)
class LedgerEntry:
    """One batch id of the stream, as the checkpoint's ledger keeps it."""

    batch_id: int
    state: str  # WRITING or COMMITTED
    attempt: str | None = None
    replay: bool | None = None  # (committed only)
    rows: dict[str, int] = field(default_factory=dict)
    start_offset: BinlogOffset | None = None
    end_offset: BinlogOffset | None = None
    committed_at: str | None = None
    version: int = LEDGER_VERSION  # as read; always written as LEDGER_VERSION

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {FORMAT_VERSION: LEDGER_VERSION, "batch_id": self.batch_id, "state": self.state,
                               "attempt": self.attempt}
        if self.state == COMMITTED:
            out.update({"replay": bool(self.replay), "rows": dict(self.rows),
                        "start_offset": offset_dict(self.start_offset),
                        "end_offset": offset_dict(self.end_offset), "committed_at": self.committed_at})
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LedgerEntry:
        version = record_version(data, f"the ledger entry of batch {data.get('batch_id')}", LEDGER_VERSION)
        rows = data.get("rows")
        replay = data.get("replay")
        return cls(
            int(data["batch_id"]), str(data.get("state") or WRITING), optional_str(data.get("attempt")),
            bool(replay) if replay is not None else None,
            {str(k): int(v) for k, v in rows.items()} if isinstance(rows, dict) else {},
            parse_offset(data.get("start_offset")), parse_offset(data.get("end_offset")),
            optional_str(data.get("committed_at")), version,
        )


def ledger_path(checkpoint: str, batch_id: int) -> str:
    return posixpath.join(checkpoint.rstrip("/"), LEDGER_DIR, f"batch={batch_id:012d}.json")


def read_ledger_entry(checkpoint: str, batch_id: int) -> LedgerEntry | None:
    data = read_json(ledger_path(checkpoint, batch_id))
    return None if data is None else LedgerEntry.from_dict(data)


def write_ledger_entry(checkpoint: str, entry: LedgerEntry) -> None:
    """Write (atomically) a batch's entry; a committed entry also drops the one ``LEDGER_RETAIN`` ids back."""
    write_json_atomic(ledger_path(checkpoint, entry.batch_id), entry.to_dict())
    if entry.state == COMMITTED and entry.batch_id >= LEDGER_RETAIN:
        fs, inner = filesystem(ledger_path(checkpoint, entry.batch_id - LEDGER_RETAIN))
        try:
            fs.delete_file(inner)
        except FileNotFoundError:
            pass

"""Where a DAG run's pipeline lives, recorded in XCom by the plan task for the stream task and the UI page.

Only locations and ids: no password (a chunk store URL with a password must come from
``$MYSQLCDC_CHUNK_STORE_URL`` on the workers, and is then recorded with the password hidden).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

XCOM_KEY = "mysqlcdc_pipeline"


@dataclass(frozen=True)
class PipelineRecord:
    mysql_conn_id: str
    chunk_store: str  # URL or SQLite path, password hidden
    output: str  # output root (Parquet), local path or URI
    checkpoint: str  # the stream's Spark checkpoint
    tables: tuple[str, ...]  # the tables this run covers (db.table), patterns resolved: with only_new the
    # pipeline's tables the patterns match (planned now or before), with redo_chunks the tables redone
    stream_tables: tuple[str, ...] = ()  # the table patterns the stream reads
    redo: dict[str, list[int]] = field(default_factory=dict)  # chunk ids re-snapshotted by this run, by table

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["tables"], data["stream_tables"] = list(self.tables), list(self.stream_tables)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PipelineRecord:
        return cls(
            mysql_conn_id=str(data["mysql_conn_id"]),
            chunk_store=str(data["chunk_store"]),
            output=str(data["output"]),
            checkpoint=str(data["checkpoint"]),
            tables=tuple(map(str, data.get("tables") or ())),
            stream_tables=tuple(map(str, data.get("stream_tables") or ())),
            redo={str(k): [int(i) for i in v] for k, v in (data.get("redo") or {}).items()},
        )

"""One chunk's SELECT through connectorx, in its own consistent read view: Arrow from the wire, no Python
object per row.

connectorx streams the result (``arrow_stream``) from a thread of its own. A read that is given up before its
end (the table's columns changed at HW, the consumer stopped) would leave that session holding its read view,
so ``close`` finds the session by the tag in its query text and KILLs it from the control session.
"""
from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.snapshot.native_read import session
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings

log = logging.getLogger(__name__)


class NativeReadFailed(Exception):
    """connectorx failed; ``text`` is its error without the password, ``code`` the MySQL error if any."""

    def __init__(self, text: str, code: int | None, lost: bool) -> None:
        super().__init__(text)
        self.text, self.code, self.lost = text, code, lost


def _is_connectorx_error(exc: BaseException) -> bool:
    # connectorx raises RuntimeError, or pyo3's PanicException (a BaseException) when its writer thread fails
    return isinstance(exc, Exception) or type(exc).__name__ == "PanicException"


@dataclass
class FirstRows:
    position: BinlogPosition
    batch: pa.RecordBatch  # without the position column


class NativeSelect:
    """``SELECT hw, <columns> FROM ...`` after the read-view statements, on one connectorx connection
    (``open``, ``rest``); or ``SELECT <columns>`` between two watermarks, read whole (``read_all``)."""

    def __init__(self, settings: MySQLSettings, select_sql: str, statements: list[str], batch_rows: int,
                 binlog_file: str) -> None:
        self.settings = settings
        self.tag = f"mysqlcdc-read-{uuid.uuid4().hex}"
        head = "SELECT "
        if select_sql.startswith("SELECT /*+ "):  # an optimizer hint must follow SELECT directly
            head = select_sql[:select_sql.index("*/") + 3]
        self.sql = head + f"/* {self.tag} */ " + select_sql[len(head):]
        self.statements, self.batch_rows, self.binlog_file = statements, batch_rows, binlog_file
        self._reader: Any = None
        self._finished = False

    def _failed(self, exc: BaseException) -> NativeReadFailed:
        text = str(exc)
        return NativeReadFailed(session.error_text(exc, self.settings), session.error_code(text),
                                session.is_lost_connection(text))

    def open(self) -> FirstRows | None:
        """Run the statements and the SELECT; the first rows and the view's binlog point, or None for an
        empty result (which carries no position)."""
        try:
            self._start()
            for batch in self._reader:
                if batch.num_rows:
                    return FirstRows(self._position(batch.column(0)), batch.drop_columns(["hw"]))
        except BaseException as exc:
            if not _is_connectorx_error(exc):
                raise
            self._finished = True
            raise self._failed(exc) from None
        self._finished = True
        return None

    def read_all(self) -> list[pa.RecordBatch]:
        """Run the statements and the SELECT (no position column: watermark-table mode) to its end."""
        try:
            self._start()
            batches = [batch for batch in self._reader if batch.num_rows]
        except BaseException as exc:
            if not _is_connectorx_error(exc):
                raise  # the read may still run: ``close`` KILLs it
            self._finished = True
            raise self._failed(exc) from None
        self._finished = True
        return batches

    def _start(self) -> None:
        """connectorx runs the statements, then the SELECT, on
        one connection, streaming from a thread of its own."""
        import connectorx

        self._reader = connectorx.read_sql(
            session.connectorx_url(self.settings), self.sql, return_type="arrow_stream",
            batch_size=self.batch_rows, pre_execution_query=self.statements,
        )

    def _position(self, hw: pa.Array) -> BinlogPosition:
        low, high = pc.min_max(hw).values()
        if hw.null_count or low.as_py() != high.as_py():
            raise NativeReadFailed(
                "the read view's binlog point did not come back from the reading session (its setup ran on "
                "another connection or server)", None, True)
        return session.unpack_position(int(low.as_py()), self.binlog_file)

    def rest(self) -> Iterator[pa.RecordBatch]:
        """The batches after the first, without the position column."""
        try:
            for batch in self._reader:
                if batch.num_rows:
                    yield batch.drop_columns(["hw"])
        except BaseException as exc:
            if not _is_connectorx_error(exc):
                raise
            raise self._failed(exc) from None
        finally:
            self._finished = True

    def close(self, control: Any) -> None:
        """End the read; a read given up before its end has its session KILLed (``control``: a session of
        the same user on the same server)."""
        reader, self._reader = self._reader, None
        if reader is None:
            return
        if not self._finished:
            with contextlib.suppress(Exception), control.cursor() as cur:
                cur.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE INFO LIKE %s "
                            "AND ID <> CONNECTION_ID()", (f"%{self.tag}%",))
                for (session_id,) in cur.fetchall():
                    cur.execute("KILL %s", (int(session_id),))
            try:
                for _ in reader:  # what connectorx buffered, then the KILL's error
                    pass
            except BaseException as exc:
                if not _is_connectorx_error(exc):
                    raise
        with contextlib.suppress(Exception):
            reader.close()

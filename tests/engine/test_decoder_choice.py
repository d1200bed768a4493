"""Which decoder reads rows events (engine/binlog/decoder_choice.py), on a real server: the compiled one by
default, mysql-replication when asked or where the compiled one cannot serve, and in compare mode (the
suite's) a difference stops the read naming the table and column."""
from __future__ import annotations

import decimal
import logging

import pytest

from airflow_provider_mysqlcdc.engine.binlog import decoder_choice
from airflow_provider_mysqlcdc.engine.binlog.decoder_choice import (
    COMPARE,
    PYTHON,
    DecoderMismatch,
    check_same,
    compared_images,
    decoder_mode,
    fallback_reasons,
)
from airflow_provider_mysqlcdc.engine.binlog.reader import BinlogReader
from airflow_provider_mysqlcdc.engine.binlog.rows_decoder import DecodedRows, LayoutChoice
from airflow_provider_mysqlcdc.engine.binlog.server_ids import allocate_server_id
from airflow_provider_mysqlcdc.engine.common.environment import ROWS_DECODER_ENV
from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from tests.engine.test_binlog_reader import execute, status


def _read(server, table: TableId, start, end) -> list:
    settings = MySQLSettings.from_url(server.cdc_url)
    with server.admin(table.database) as admin:
        schemas = {table: load_schema(admin, table)}
    reader = BinlogReader(settings, allocate_server_id(settings, 2), {table}, schemas)
    return [c for c in reader.read(BinlogOffset.at(start), end)]


@pytest.fixture
def written(mysql_server, mysql_db):
    """A table with an insert, an update and a delete in the binlog: (table, start, end)."""
    with mysql_server.admin(mysql_db) as conn:
        execute(conn, "CREATE TABLE t (id INT PRIMARY KEY, d DECIMAL(30,12), "
                      "s VARCHAR(20) CHARACTER SET latin1)")
        start = status(conn)
        execute(conn, "INSERT INTO t VALUES (1, 12345678.123456789012, 'caf\u00e9'), (2, NULL, '')",
                "UPDATE t SET d = -0.000000000001 WHERE id = 2", "DELETE FROM t WHERE id = 1")
        end = status(conn)
    return TableId(mysql_db, "t"), start, end


def test_the_suite_runs_in_compare_mode_and_the_compiled_decoder_reads_every_image(mysql_server, written):
    table, start, end = written
    assert decoder_mode() == COMPARE
    before = compared_images(table)
    changes = _read(mysql_server, table, start, end)
    assert [c.op for c in changes] == ["+I", "+I", "-U", "+U", "-D"]
    assert changes[0].values == {"id": 1, "d": decimal.Decimal("12345678.123456789012"), "s": "caf\u00e9"}
    assert changes[3].values["d"] == decimal.Decimal("-1E-12")
    assert compared_images(table) - before == 5 and not fallback_reasons(table)


def test_a_difference_stops_the_read_naming_table_and_column(mysql_server, written, monkeypatch):
    """The compiled decoder made wrong on purpose (one value changed): compare mode must catch it."""
    table, start, end = written
    real, real_framed = decoder_choice.decode_event, decoder_choice.decode_framed

    def off_by_one(decoded: DecodedRows) -> DecodedRows:
        images = tuple([list(col) for col in half] for half in decoded.images)
        ids = images[0][decoded.column_names.index("id")]
        ids[0] = ids[0] + 1
        return DecodedRows(decoded.column_names, decoded.row_count, decoded.halves, images)

    # rows events the compiled framer parsed, and those mysql-replication parsed
    monkeypatch.setattr(decoder_choice, "decode_framed", lambda e, lay, u: off_by_one(real_framed(e, lay, u)))
    monkeypatch.setattr(decoder_choice, "decode_event", lambda e, lay: off_by_one(real(e, lay)))
    with pytest.raises(DecoderMismatch,
                       match=rf"{table}, column 'id'.*gives 1 \(int\), the compiled decoder 2"):
        _read(mysql_server, table, start, end)


def test_python_mode_reads_with_mysql_replication_only(mysql_server, written, monkeypatch):
    table, start, end = written
    monkeypatch.setenv(ROWS_DECODER_ENV, PYTHON)

    def never(event, layout):
        raise AssertionError("the compiled decoder ran in python mode")

    monkeypatch.setattr(decoder_choice, "decode_event", never)
    monkeypatch.setattr(decoder_choice, "decode_framed", lambda *args: never(*args[:2]))
    changes = _read(mysql_server, table, start, end)
    assert len(changes) == 5 and changes[-1].values["s"] == "caf\u00e9"


def test_a_table_the_compiled_decoder_cannot_take_falls_back_said_once(mysql_server, written, monkeypatch,
                                                                       caplog):
    table, start, end = written

    def cannot(event, schema, decoders=None):
        return LayoutChoice(None, f"table {schema.table}: a reason given by the layout")

    monkeypatch.setattr(decoder_choice.EventLayout, "of", cannot)
    with caplog.at_level(logging.WARNING, logger=decoder_choice.__name__):
        first = _read(mysql_server, table, start, end)
        second = _read(mysql_server, table, start, end)
    assert [c.values for c in first] == [c.values for c in second] and len(first) == 5
    said = [r.getMessage() for r in caplog.records if "pure Python" in r.getMessage()]
    assert len(said) == 1 and str(table) in said[0] and "a reason given by the layout" in said[0], said
    assert fallback_reasons(table) == [f"table {table}: a reason given by the layout"]


def test_a_bad_mode_names_the_variable(monkeypatch):
    monkeypatch.setenv(ROWS_DECODER_ENV, "fast")
    with pytest.raises(ConfigurationError,
                       match=f"{ROWS_DECODER_ENV}='fast': give one of compiled, python, compare"):
        decoder_mode()


def test_check_same_tells_types_apart():
    table = TableId("db", "t")
    check_same(table, "here", {"a": 1, "b": "x"}, {"a": 1, "b": "x"})
    with pytest.raises(DecoderMismatch, match="column 'a'.*1.0 \\(float\\)"):
        check_same(table, "here", {"a": 1}, {"a": 1.0})
    with pytest.raises(DecoderMismatch, match="column 'b'.*<absent>"):
        check_same(table, "here", {"a": 1, "b": None}, {"a": 1})

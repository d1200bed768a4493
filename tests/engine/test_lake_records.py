"""The lake's stored records (batch marker, stream progress, batch ledger, snapshot manifest): one definition
each, written with ``format_version``, read back unchanged; records of earlier releases (no version) read as
before; a record of a newer release is refused, saying so."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_provider_mysqlcdc.engine.lake.batch_ledger import (
    COMMITTED,
    WRITING,
    LedgerEntry,
    ledger_path,
    read_ledger_entry,
    write_ledger_entry,
)
from airflow_provider_mysqlcdc.engine.lake.batch_marker import (
    MARKER_VERSION,
    BatchMarker,
    read_batch_marker,
    write_batch_marker,
)
from airflow_provider_mysqlcdc.engine.lake.changelog import read_batch
from airflow_provider_mysqlcdc.engine.lake.layout import (
    LAYOUT_VERSION,
    changelog_dir,
    changelog_marker,
    read_json,
    stream_progress_path,
)
from airflow_provider_mysqlcdc.engine.lake.record_format import StoredFormatError
from airflow_provider_mysqlcdc.engine.lake.stream_figures import BatchFigures, StreamTotals
from airflow_provider_mysqlcdc.engine.lake.stream_progress import (
    PROGRESS_VERSION,
    StreamProgress,
    read_stream_progress,
    write_stream_progress,
)
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.tables import TableId

T = TableId("shop", "orders")
START, END = BinlogOffset("mysql-bin.000012", 400), BinlogOffset("mysql-bin.000012", 900, skip_events=2)

# As the release before versioned records wrote them (tests/faults/test_previous_release.py runs that release
# itself; these are its shapes, by hand, for a test that needs no server).
OLD_MARKER = {
    "layout_version": 1, "batch_id": 3, "table": "shop.orders", "attempt": "0001-abcd",
    "files": ["part-00000-0001-abcd-t7.parquet"], "changelog_json_files": [], "rows": 5,
    "first_position": "a", "last_position": "b", "start_offset": START.to_dict(), "end_offset": END.to_dict(),
    "committed_at": "2026-01-01T00:00:00+00:00",
}
OLD_PROGRESS = {"layout_version": 1, "batch_id": 3, "end_offset": END.to_dict(), "tables": ["shop.orders"],
                "committed_at": "2026-01-01T00:00:00+00:00"}
OLD_LEDGER = {"layout_version": 1, "batch_id": 3, "state": "committed", "attempt": "0001-abcd",
              "replay": False, "rows": {"shop.orders": 5}, "start_offset": START.to_dict(),
              "end_offset": END.to_dict(), "committed_at": "2026-01-01T00:00:00+00:00"}


def _write(path: str, data: dict) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data))


def test_a_marker_round_trips_and_carries_its_version(tmp_path):
    root = str(tmp_path)
    marker = BatchMarker(7, "shop.orders", "a1", ("p.parquet",), ("p.json",), 3, "x", "y", START, END, "now")
    write_batch_marker(root, T, marker)
    stored = read_json(changelog_marker(root, T, 7))
    assert stored is not None and stored["format_version"] == MARKER_VERSION
    assert stored["layout_version"] == LAYOUT_VERSION
    assert read_batch_marker(root, T, 7) == marker
    assert BatchMarker.from_dict(marker.to_dict()) == marker
    batch = read_batch(root, T, 7)
    assert batch.files == (f"{changelog_dir(root, T, 7)}/p.parquet",) and batch.end_offset == END
    assert batch.record == marker and batch.marker == marker.to_dict()


def test_an_earlier_releases_marker_reads_as_before(tmp_path):
    root = str(tmp_path)
    _write(changelog_marker(root, T, 3), OLD_MARKER)
    marker = read_batch_marker(root, T, 3)
    assert marker is not None and marker.version == 0
    assert (marker.batch_id, marker.table, marker.files, marker.rows) == (
        3, "shop.orders", ("part-00000-0001-abcd-t7.parquet",), 5)
    assert (marker.start_offset, marker.end_offset, marker.last_position) == (START, END, "b")
    # what this release writes differs only by the version
    rewritten = marker.to_dict()
    assert rewritten.pop("format_version") == MARKER_VERSION
    assert rewritten == {k: v for k, v in OLD_MARKER.items() if k != "layout_version"}


def test_a_marker_naming_only_its_files_or_nothing(tmp_path):
    """Hand-made or older markers: only ``files`` (no offsets), or no file list (read the directory)."""
    root = str(tmp_path)
    _write(changelog_marker(root, T, 0), {"layout_version": 1, "files": ["a.parquet"]})
    _write(changelog_marker(root, T, 1),
           {"layout_version": 1, "batch_id": 1, "end_offset": "mysql-bin.000003:77"})
    only_files = read_batch_marker(root, T, 0)
    assert only_files is not None and (only_files.batch_id, only_files.files, only_files.end_offset) == (
        0, ("a.parquet",), None)
    no_list = read_batch_marker(root, T, 1)
    assert no_list is not None and no_list.files is None and no_list.end_offset is not None
    assert read_batch(root, T, 1).files == ()  # the directory holds nothing
    assert read_batch_marker(root, T, 2) is None


@pytest.mark.parametrize("kind", ["marker", "progress", "ledger"])
def test_a_record_of_a_newer_release_is_refused(tmp_path, kind):
    root = str(tmp_path)
    newer = {"format_version": 99}
    if kind == "marker":
        _write(changelog_marker(root, T, 3), {**OLD_MARKER, **newer})
        read = lambda: read_batch_marker(root, T, 3)
    elif kind == "progress":
        _write(stream_progress_path(root), {**OLD_PROGRESS, **newer})
        read = lambda: read_stream_progress(root)
    else:
        _write(ledger_path(root, 3), {**OLD_LEDGER, **newer})
        read = lambda: read_ledger_entry(root, 3)
    with pytest.raises(StoredFormatError, match="format_version 99, written by a newer mysqlcdc release"):
        read()


def test_progress_round_trips_and_reads_an_earlier_releases_record(tmp_path):
    root = str(tmp_path)
    _write(stream_progress_path(root), OLD_PROGRESS)
    old = read_stream_progress(root)
    assert old is not None and old.version == 0
    assert (old.batch_id, old.end_offset, old.tables) == (3, END, ("shop.orders",))
    assert old.batch is None and old.totals is None
    figures = BatchFigures(4, {"shop.orders": 2}, {"shop.orders": 100}, rows_read=9, dropped=1)
    progress = StreamProgress(4, END, ("shop.orders",), "now", "then", figures, StreamTotals().plus(figures))
    write_stream_progress(root, progress)
    assert read_json(stream_progress_path(root))["format_version"] == PROGRESS_VERSION
    assert read_stream_progress(root) == progress


def test_ledger_entries_round_trip_and_read_an_earlier_releases_entry(tmp_path):
    checkpoint = str(tmp_path)
    _write(ledger_path(checkpoint, 3), OLD_LEDGER)
    old = read_ledger_entry(checkpoint, 3)
    assert old is not None and old.version == 0 and old.end_offset == END and old.rows == {"shop.orders": 5}
    rewritten = old.to_dict()
    assert rewritten.pop("format_version") == 1
    assert rewritten == {k: v for k, v in OLD_LEDGER.items() if k != "layout_version"}
    write_ledger_entry(checkpoint, LedgerEntry(4, WRITING, "a2"))
    assert set(read_json(ledger_path(checkpoint, 4)) or {}) == {
        "layout_version", "format_version", "batch_id", "state", "attempt"}
    entry = LedgerEntry(4, COMMITTED, "a2", True, {"shop.orders": 1}, START, END, "now")
    write_ledger_entry(checkpoint, entry)
    assert read_ledger_entry(checkpoint, 4) == entry

"""Read the lake's Delta tables as a data consumer does (delta-rs, no code of ours), and hold them against
what our markers say was committed."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa

from airflow_provider_mysqlcdc.engine.lake.changelog_reader import read_changelog
from airflow_provider_mysqlcdc.engine.lake.delta_changelog import APP_ID, changelog_table_uri
from airflow_provider_mysqlcdc.engine.lake.delta_mirror import mirror_table_uri
from airflow_provider_mysqlcdc.engine.lake.mirror_manifest import read_manifest, read_manifest_files
from airflow_provider_mysqlcdc.engine.model.tables import TableId, TableSchema


def delta_changelog(root: str, schema: TableSchema) -> pa.Table | None:
    """The table's changelog as delta-rs reads it (None: no Delta table)."""
    from deltalake import DeltaTable

    uri = changelog_table_uri(root, schema.table)
    if not DeltaTable.is_deltatable(uri):
        return None
    return DeltaTable(uri).to_pyarrow_table()


def assert_delta_changelog_matches_markers(root: str, schema: TableSchema) -> None:
    """The Delta changelog holds exactly the records of the batches the markers committed: each once, with the
    same values (TIME as microseconds), and the Delta log's last transaction is the last committed batch."""
    from deltalake import DeltaTable

    from airflow_provider_mysqlcdc.engine.lake.changelog import committed_batch_ids

    committed = read_changelog(root, schema)
    delta = delta_changelog(root, schema)
    if delta is None:
        assert committed.num_rows == 0, (
            f"{schema.table}: {committed.num_rows} changelog records and no Delta table")
        return
    names = [n for n in committed.schema.names if n in delta.schema.names]
    assert set(committed.schema.names) <= set(delta.schema.names), (committed.schema.names,
                                                                     delta.schema.names)
    marker_rows = Counter(_rows(committed, names))
    delta_rows = Counter(_rows(delta, names))
    assert delta_rows == marker_rows, (
        f"{schema.table}: Delta changelog differs from the committed batches: "
        f"{sum((delta_rows - marker_rows).values())} extra, "
        f"{sum((marker_rows - delta_rows).values())} missing"
    )
    assert DeltaTable(changelog_table_uri(root, schema.table)).transaction_version(APP_ID) == max(
        committed_batch_ids(root, schema.table)
    )


def delta_mirror(root: str, table: TableId, version: int | None = None) -> pa.Table | None:
    """The table's mirror as delta-rs reads it, at its latest or a given version (None: no Delta table)."""
    from deltalake import DeltaTable

    uri = mirror_table_uri(root, table)
    if not DeltaTable.is_deltatable(uri):
        return None
    delta = DeltaTable(uri, version=version)
    if "deletionVectors" in (delta.protocol().reader_features or []):
        # pyarrow datasets refuse deletion vectors; delta-rs's own scan applies them
        return pa.table(pa.RecordBatchReader.from_stream(delta.scan()))
    return delta.to_pyarrow_table()


def assert_delta_mirror_matches_manifest(root: str, table: TableId) -> None:
    """The mirror's Delta table holds exactly the manifest's files, and reads as the manifest's files do."""
    from deltalake import DeltaTable

    delta = delta_mirror(root, table)
    assert delta is not None, f"{table}: no mirror Delta table"
    files = {f.split("/mirror/", 1)[1] for f in DeltaTable(mirror_table_uri(root, table)).file_uris()}
    assert files == {f.split("mirror/", 1)[1] for f in read_manifest(root, table).files}
    ours = read_manifest_files(root, table)
    assert Counter(_rows(delta, ours.column_names)) == Counter(_rows(ours, ours.column_names)), table


def _rows(table: pa.Table, names: list[str]) -> list[tuple]:
    columns = []
    for name in names:
        column = table.column(name)
        if pa.types.is_duration(column.type):
            column = column.cast(pa.int64())
        columns.append(column.to_pylist())
    return list(zip(*columns))

"""OpenLineage without a DAG run (issue 40, point 1): ``mysqlcdc://`` assets through Airflow's own asset
translation (the provider manager finds our converter), dataset names that never carry credentials, the lake
columns and their lineage as the writers lay them out, and nothing of it loaded or run without the provider.

The events of a real run (plan, snapshot groups, stream, the Spark parent conf) are checked on the example
DAG's run in ``test_example_dag.py`` (``lineage_events.py``), which pays no Spark start of its own for it.
"""
from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_mysqlcdc.assets import table_asset, table_asset_uri
from airflow_provider_mysqlcdc.engine.lake.layout import CHANGELOG, MIRROR, SNAPSHOT
from airflow_provider_mysqlcdc.engine.model.arrow_batches import METADATA_NAMES
from airflow_provider_mysqlcdc.engine.model.tables import Column, TableId, TableSchema
from airflow_provider_mysqlcdc.lineage.columns import lake_columns
from airflow_provider_mysqlcdc.lineage.naming import lake_location, source_table

PACKAGE = Path(__file__).resolve().parents[2] / "airflow_provider_mysqlcdc"
# modules that import openlineage (or the provider's extractors) at their top: only lineage methods load them
OPENLINEAGE_MODULES = {"openlineage", "airflow.providers.openlineage",
                       *(f"airflow_provider_mysqlcdc.lineage.{m}"
                         for m in ("reports", "datasets", "run_facets"))}
LIGHT_LINEAGE = ("asset_datasets.py", "spark_parent.py", "switch.py", "naming.py", "columns.py",
                 "stream_points.py")


def test_a_table_asset_is_the_source_tables_dataset():
    """Airflow's OpenLineage provider translates a ``mysqlcdc://`` asset (a task's inlet, say) with the
    converter our provider info registers: the very dataset the operators report as their input."""
    from airflow.providers.openlineage.utils.utils import translate_airflow_asset
    from airflow.sdk import Asset

    for table in ("shop.orders", "a b.c/d"):
        dataset = translate_airflow_asset(table_asset("db.example.com", 3306, table), None)
        assert dataset is not None, "no converter for mysqlcdc:// (get_provider_info asset-uris)"
        assert (dataset.namespace, dataset.name) == source_table("db.example.com", 3306, table)
        assert (dataset.namespace, dataset.name) == ("mysql://db.example.com:3306", table)
    # an asset of another form fails where it is defined, naming the form (and never a password)
    with pytest.raises(ValueError, match=r"mysqlcdc://<host>:<port>/<database>/<table>"):
        Asset(uri="mysqlcdc://db.example.com/shop")
    with (pytest.warns(UserWarning, match="password"),  # Airflow drops the user info first, and says so
          pytest.raises(ValueError, match=r"got mysqlcdc://db.example.com:3306/shop$")):
        Asset(uri="mysqlcdc://u:secret-pw@db.example.com:3306/shop")
    assert Asset(uri=table_asset_uri("h", 1, "d.t")).uri == "mysqlcdc://h:1/d/t"


@pytest.mark.parametrize(("location", "namespace", "name"), [
    ("/lake/out", "file", "/lake/out"),
    ("file:///lake/out/", "file", "/lake/out"),
    ("s3://AKIAKEY:s3cret@bucket/lake/out?secret_key=s3cret", "s3://bucket", "lake/out"),
    ("s3a://bucket/lake", "s3://bucket", "lake"),
    ("gs://bucket/lake", "gs://bucket", "lake"),
    ("hdfs://namenode:8020/lake", "hdfs://namenode:8020", "/lake"),
    ("abfss://container:s3cret@account.dfs.core.windows.net/lake", "abfss://container@account.dfs.core.windows.net",
     "lake"),
])
def test_lake_names_follow_openlineage_naming_without_credentials(location, namespace, name):
    got = lake_location(location)
    assert (got.namespace, got.name) == (namespace, name)
    assert "s3cret" not in got.namespace + got.name


def _schema() -> TableSchema:
    return TableSchema(TableId("shop", "orders"), (
        Column("id", "int", "int(11)", False), Column("day", "date", "date", False),
        Column("at", "timestamp", "timestamp(6)", True), Column("took", "time", "time(3)", True),
        Column("secret", "varchar", "varchar(40)", True), Column("born", "datetime", "datetime", True),
    ), primary_key=("id", "day"))


def test_lake_columns_are_what_the_writers_write():
    """Metadata columns first (not in the mirror), the excluded column and its companion left out, a
    companion after each date column, TIME as int64 microseconds in the Delta tables; each data column from
    its source column, a companion from its date column."""
    schema = _schema()
    data = ["id", "day", "day__zero_date", "at", "at__zero_date", "took", "born", "born__zero_date"]
    for kind, metadata in ((SNAPSHOT, METADATA_NAMES), (CHANGELOG, METADATA_NAMES), (MIRROR, [])):
        columns = lake_columns(schema, kind, excluded=["secret"])
        assert [c.name for c in columns] == [*metadata, *data], kind
        assert [(c.source, c.companion) for c in columns if c.name.endswith("__zero_date")] == [
            ("day", True), ("at", True), ("born", True)]
        assert all(c.source is None for c in columns if c.name in METADATA_NAMES)
        took = next(c for c in columns if c.name == "took")
        assert took.type == str(pa.duration("us") if kind == SNAPSHOT else pa.int64()), kind
    # zero_dates="null": only the key columns keep their companion
    names = [c.name for c in lake_columns(schema, MIRROR, zero_dates="null", key_columns=("id", "day"))]
    assert names == ["id", "day", "day__zero_date", "at", "took", "secret", "born"]


def test_column_lineage_maps_one_to_one():
    """The facet built for an output: every data column from the same column of each source, metadata and
    excluded columns absent."""
    from openlineage.client.serde import Serde

    from airflow_provider_mysqlcdc.lineage.datasets import lake_name, lake_output

    schema, table = _schema(), TableId("shop", "orders")
    source = source_table("db", 3306, table)
    out = lake_output("/lake", table, MIRROR, schema, [source, lake_name("/lake", table, SNAPSHOT)],
                      excluded=["secret"])
    fields = Serde.to_dict(out)["facets"]["columnLineage"]["fields"]
    assert list(fields) == ["id", "day", "day__zero_date", "at", "at__zero_date", "took", "born",
                            "born__zero_date"]
    assert [(f["namespace"], f["name"], f["field"]) for f in fields["at__zero_date"]["inputFields"]] == [
        ("mysql://db:3306", "shop.orders", "at"), ("file", "/lake/shop/orders/snapshot", "at")]
    assert fields["at__zero_date"]["inputFields"][0]["transformations"][0]["subtype"] == "TRANSFORMATION"
    assert fields["id"]["inputFields"][0]["transformations"][0]["subtype"] == "IDENTITY"


def _top_level_imports(path: Path) -> set[str]:
    """Modules a file imports when it is loaded (not under ``if TYPE_CHECKING``, not inside functions)."""
    found: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_without_the_provider_nothing_of_lineage_loads_or_runs(monkeypatch):
    """The operators, the asset converter's module (loaded at provider discovery) and the Spark parent
    helper import nothing of OpenLineage when loaded; without the provider, no parent conf and no lineage
    work."""
    loaded_always = [*(PACKAGE / "operators").glob("*.py"), PACKAGE / "assets.py",
                     PACKAGE / "get_provider_info.py",
                     *(PACKAGE / "lineage" / name for name in LIGHT_LINEAGE)]
    for path in loaded_always:
        heavy = {m for m in _top_level_imports(path)
                 if any(m == h or m.startswith(h + ".") for h in OPENLINEAGE_MODULES)}
        assert not heavy, (path.name, heavy)

    from airflow_provider_mysqlcdc.lineage.spark_parent import with_parent_job
    from airflow_provider_mysqlcdc.lineage.switch import openlineage_on

    for name in [m for m in sys.modules if m.startswith("airflow.providers.openlineage")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "airflow.providers.openlineage", None)  # as if not installed
    conf = {"spark.speculation": "false"}
    assert with_parent_job(conf, context=None) == conf
    assert openlineage_on() is False


def test_a_failed_snapshot_reports_its_datasets_and_what_failed(monkeypatch, tmp_path):
    """A failure event (no query: the source may be what failed): the group's table and snapshot files by
    name, and the chunks as the chunk store recorded them, the failed one with its error."""
    from openlineage.client.serde import Serde

    from airflow_provider_mysqlcdc.operators.snapshot import MySqlCdcSnapshotOperator

    monkeypatch.setenv("AIRFLOW_CONN_LINEAGE_SOURCE", '{"conn_type": "mysql", "host": "db.example.com", '
                       '"port": 3306, "login": "cdc", "password": "never-in-lineage"}')
    group = {"parts": [{"table": "shop.orders", "generation": 2, "chunk_ids": [3, 4]}]}
    task = MySqlCdcSnapshotOperator(task_id="snapshot", chunk_group=group, output_path=str(tmp_path / "lake"),
                                    mysql_conn_id="lineage_source")
    chunk = {"table": "shop.orders", "rows": 10, "attempts": 1, "lw": "mysql-bin.000002:4",
             "hw": "mysql-bin.000002:90", "run_id": "r", "error": None}
    task._lineage_result = {
        "parts": [{"table": "shop.orders", "rows": 10, "min_hw": "mysql-bin.000002:90",
                   "max_hw": "mysql-bin.000002:90", "table_complete": False}],
        "chunks": [{**chunk, "chunk_id": 3, "status": "committed"},
                   {**chunk, "chunk_id": 4, "status": "failed", "rows": None, "hw": None,
                    "error": "Lost connection to MySQL server during query"}],
        "rows": 10, "min_hw": "mysql-bin.000002:90", "max_hw": "mysql-bin.000002:90"}
    lineage = task.get_openlineage_facets_on_failure(task_instance=None)
    assert [(d.namespace, d.name) for d in lineage.inputs] == [("mysql://db.example.com:3306", "shop.orders")]
    assert [(d.namespace, d.name) for d in lineage.outputs] == [
        ("file", f"{tmp_path}/lake/shop/orders/snapshot")]
    facet = Serde.to_dict(lineage.run_facets["mysqlcdc_snapshot"])
    assert facet["group"] == "shop.orders chunks 3-4 (plan generation 2)"
    assert [(c["chunkId"], c["status"], c.get("error")) for c in facet["chunks"]] == [
        (3, "committed", None), (4, "failed", "Lost connection to MySQL server during query")]
    assert "never-in-lineage" not in json.dumps(facet) + repr(lineage)

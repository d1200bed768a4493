"""OpenLineage events of a real DAG run, and what the example DAG's run must report (issue 40, point 1).

``openlineage_to_file`` turns Airflow's OpenLineage listener on for the ``dag.test()`` runs inside it, with
the provider's own file transport (one JSON event per line), and off again after. Airflow loads its listener
plugins once per process, and the OpenLineage plugin registers its listener only when a transport is
configured at that moment (the suite configures none): so the listener is added to (and taken off) the task
SDK's listener manager here, the one the task runner calls. Events are emitted in a thread of the task
process (``execute_in_thread``: no fork of the test process with its watcher threads).

The checks compare the events with what the run left: the source schemas as ``information_schema`` has
them, the chunk store's chunks and HWs, the stream's progress file, the output layout, the Spark command
lines sampled while the run went (the parent job conf).
"""
from __future__ import annotations

import json
import os
import posixpath
import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.lake.layout import table_dir
from airflow_provider_mysqlcdc.engine.lake.stream_progress import read_stream_progress
from airflow_provider_mysqlcdc.engine.model.arrow_batches import METADATA_NAMES
from airflow_provider_mysqlcdc.engine.model.tables import TableId, TableSchema
from airflow_provider_mysqlcdc.engine.source.catalog import load_schemas
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.operators.spark_apps import RUNNER_APP, SNAPSHOT_APP, STREAM_APP

SETTINGS = {
    "AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD": "True",
    "AIRFLOW__OPENLINEAGE__SPARK_INJECT_PARENT_JOB_INFO": "True",
    "AIRFLOW__OPENLINEAGE__NAMESPACE": "mysqlcdc-tests",
}
START, COMPLETE = "START", "COMPLETE"


@contextmanager
def openlineage_to_file(path: Path) -> Iterator[Path]:
    """Airflow's OpenLineage listener on (file transport into ``path``) for what runs inside."""
    from airflow.listeners.listener import get_listener_manager as core_listeners
    from airflow.providers.openlineage.plugins.listener import get_openlineage_listener
    from airflow.sdk.listener import get_listener_manager as task_listeners

    # both managers load the listener plugins now, with no transport set: the OpenLineage plugin adds none
    managers = (core_listeners(), task_listeners())
    settings = {**SETTINGS, "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
        {"type": "file", "log_file_path": str(path), "append": True})}
    saved = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    listener = get_openlineage_listener()
    listener.adapter._client = None  # built from the settings above at the first event
    managers[1].add_listener(listener)
    try:
        yield path
    finally:
        for manager in managers:
            if manager.pm.is_registered(listener):
                manager.pm.unregister(listener)
        listener.adapter._client = None
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def read_events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def events_of(events: Iterable[dict[str, Any]], job: str, kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["job"]["name"] == job and e["eventType"] == kind]


def _datasets(items: Iterable[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["namespace"], d["name"]): d for d in items}


def _lake(output: str, table: TableId, kind: str) -> tuple[str, str]:
    return "file", posixpath.join(table_dir(output, table), kind)


def _schema_fields(dataset: dict[str, Any]) -> list[tuple[str, str]]:
    return [(f["name"], f["type"]) for f in dataset["facets"]["schema"]["fields"]]


def _data_names(schema: TableSchema) -> list[str]:
    """The table's columns as the lake writes them with ``zero_dates="keep"`` (a companion after each
    DATE/DATETIME/TIMESTAMP column)."""
    names = []
    for c in schema.columns:
        names.append(c.name)
        if c.data_type in ("date", "datetime", "timestamp"):
            names.append(c.name + "__zero_date")
    return names


def _check_column_lineage(dataset: dict[str, Any], schema: TableSchema,
                          sources: Sequence[tuple[str, str]]) -> None:
    """Each data column from the same column of every source (a companion from its date column), one to
    one; metadata columns from none."""
    fields = dataset["facets"]["columnLineage"]["fields"]
    assert set(fields) == set(_data_names(schema)), (dataset["name"], sorted(fields))
    for name, entry in fields.items():
        base = name.removesuffix("__zero_date")
        got = [(f["namespace"], f["name"], f["field"], f["transformations"][0]["subtype"])
               for f in entry["inputFields"]]
        subtype = "IDENTITY" if base == name else "TRANSFORMATION"
        assert got == [(ns, n, base, subtype) for ns, n in sources], (dataset["name"], name, got)


def check_example_run_lineage(events: list[dict[str, Any]], *, dag_id: str, snapshot_task: str,
                              settings: MySQLSettings, output: str, tables: Sequence[TableId],
                              store: ChunkStore, group_names: Sequence[str]) -> None:
    """The events of the example DAG's first run: plan, each snapshot group and the stream, started and
    completed, with their datasets, schema and column-lineage facets and run facets; never the password."""
    assert settings.password and settings.password not in json.dumps(events)
    source = f"mysql://{settings.host}:{settings.port}"
    with connect(settings) as conn:
        schemas = load_schemas(conn, list(tables))
    names = {str(t): t for t in tables}

    # plan: reads the tables (MySQL's own column types), writes no dataset; its run facet is the plan
    [plan] = events_of(events, f"{dag_id}.plan", COMPLETE)
    assert events_of(events, f"{dag_id}.plan", START)[0]["run"]["runId"] == plan["run"]["runId"]
    inputs = _datasets(plan["inputs"])
    assert set(inputs) == {(source, str(t)) for t in tables} and plan["outputs"] == [], plan
    for t in tables:
        assert _schema_fields(inputs[(source, str(t))]) == [(c.name, c.column_type)
                                                            for c in schemas[t].columns]
    planned = plan["run"]["facets"]["mysqlcdc_plan"]["tables"]
    assert {t: (v["generation"], v["chunks"]) for t, v in planned.items()} == {
        str(t): (1, len(store.chunks(str(t)))) for t in tables}, planned

    # snapshot: one completed event per chunk group: its table in, its snapshot files out, each chunk's HW
    done = events_of(events, f"{dag_id}.{snapshot_task}", COMPLETE)
    facets = [e["run"]["facets"]["mysqlcdc_snapshot"] for e in done]
    assert sorted(f["group"] for f in facets) == sorted(group_names), facets
    started = {e["run"]["facets"]["mysqlcdc_snapshot"]["group"]
               for e in events_of(events, f"{dag_id}.{snapshot_task}", START)}
    assert started == set(group_names), started
    for event, facet in zip(done, facets):
        [name] = facet["tables"]
        table, schema = names[name], schemas[names[name]]
        assert list(_datasets(event["inputs"])) == [(source, name)], event["inputs"]
        [out] = event["outputs"]
        assert (out["namespace"], out["name"]) == _lake(output, table, "snapshot"), out
        assert [n for n, _ in _schema_fields(out)] == [*METADATA_NAMES, *_data_names(schema)]
        assert out["facets"]["storage"]["fileFormat"] == "parquet"
        _check_column_lineage(out, schema, [(source, name)])
        committed = {c.chunk_id: c for c in store.chunks(name)}
        assert facet["chunks"] and all(c["status"] == "committed" for c in facet["chunks"]), facet
        assert {c["chunkId"]: c["hw"] for c in facet["chunks"]} == {
            c["chunkId"]: str(committed[c["chunkId"]].hw) for c in facet["chunks"]}, facet
        assert facet["maxHw"] == str(max(committed[c["chunkId"]].hw for c in facet["chunks"])), facet

    # stream: the tables (and their snapshot files) in, each table's changelog and mirror Delta tables out;
    # it started at the smallest chunk HW (a new checkpoint) and ended at the progress file's batch
    [stream] = events_of(events, f"{dag_id}.stream", COMPLETE)
    inputs, outputs = _datasets(stream["inputs"]), _datasets(stream["outputs"])
    assert set(inputs) == {(source, str(t)) for t in tables} | {_lake(output, t, "snapshot") for t in tables}
    assert set(outputs) == {_lake(output, t, kind) for t in tables for kind in ("changelog", "mirror")}
    for t in tables:
        schema = schemas[t]
        changelog, mirror = outputs[_lake(output, t, "changelog")], outputs[_lake(output, t, "mirror")]
        assert [n for n, _ in _schema_fields(changelog)] == [*METADATA_NAMES, *_data_names(schema)]
        assert [n for n, _ in _schema_fields(mirror)] == _data_names(schema)
        assert changelog["facets"]["storage"]["storageLayer"] == "delta" == mirror["facets"]["storage"][
            "storageLayer"]
        _check_column_lineage(changelog, schema, [(source, str(t))])
        _check_column_lineage(mirror, schema, [(source, str(t)), _lake(output, t, "snapshot")])
    run = stream["run"]["facets"]["mysqlcdc_stream"]
    hws = [c.hw for t in tables for c in store.chunks(str(t))]
    assert run["start"] == {"position": str(min(hws)), "from": "the smallest chunk HW"}, run
    progress = read_stream_progress(output)
    assert progress is not None and run["end"]["batch"] == progress.batch_id, (run, progress)
    assert run["end"]["position"] == str(progress.end_offset.ordered_position), run
    assert set(run["tables"]) == set(names) and run["trigger"] == "available-now", run


_PARENT = re.compile(r"spark\.openlineage\.(parentRunId|parentJobName|rootParentRunId)=(\S+)")


def check_spark_parents(events: list[dict[str, Any]], command_lines: Iterable[str], *, dag_id: str,
                        snapshot_task: str) -> None:
    """Every Spark application the lineage run started names its task as OpenLineage parent (the run id
    of that task's events) and the DAG run as root: the group runner, each group's own application (after
    the runner died), the stream. The applications of the lineage run are those naming its DAG run as root:
    at least its runner and its stream must be among them."""
    runs: dict[str, set[str]] = {}
    for e in events:
        runs.setdefault(e["job"]["name"], set()).add(e["run"]["runId"])
    roots = {e["run"]["facets"]["parent"]["root"]["run"]["runId"] for e in events
             if "parent" in e["run"]["facets"]}
    found: dict[str, int] = {}
    for line in command_lines:
        conf = dict(_PARENT.findall(line))
        if "parentRunId" not in conf or not ("spark-submit" in line or "SparkSubmit" in line):
            continue
        if conf.get("rootParentRunId") not in roots:
            continue  # another DAG run's application (the redo run), or another process's on this machine
        app = next((a for a in (RUNNER_APP, SNAPSHOT_APP, STREAM_APP) if f"/{a}" in line), None)
        task = {RUNNER_APP: "start_runner", SNAPSHOT_APP: snapshot_task, STREAM_APP: "stream"}.get(app or "")
        assert task is not None, line[:300]
        assert conf["parentJobName"] == f"{dag_id}.{task}", line[:300]
        assert conf["parentRunId"] in runs.get(f"{dag_id}.{task}", ()), (conf, runs.get(f"{dag_id}.{task}"))
        found[task] = found.get(task, 0) + 1
    assert found.get("start_runner") and found.get("stream"), found

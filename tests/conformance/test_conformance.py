"""Conformance: every column type, every character set of the server and every key shape, through the
snapshot's SELECT and the binlog (value identity, cell by cell), through Arrow, and through the whole pipeline
(chunked snapshot + stream under concurrent writes: the mirror equals the source row by row).

The pipeline runs in both chunk-read modes: ``mirror`` is the server's consistent snapshot (what MariaDB
uses by default; LW == HW), ``mirror-wm`` the watermark-table mode (DBLog: markers, then the chunk's rows are
corrected with the binlog events between its watermarks, so binlog decoding and key matching run inside the
snapshot too). Without a primary key the watermark mode is at-least-once (docs/design.md): there only missing
rows count.

Cases come from ``catalogue.py``; the charset list is checked against the server's own SHOW CHARACTER SET.
Seeds are fixed per case (``specs.seed_of``). The matrix of verdicts is printed at the end of the session and
written to ``matrix.MATRIX_FILE``. Run: ``pytest -q tests/conformance -p no:cacheprovider``.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.snapshot.chunk_reader import ChunkReadOptions
from airflow_provider_mysqlcdc.engine.snapshot.read_view import WATERMARK_DDL
from tests.conformance.catalogue import (
    CHARSETS,
    KEY_CASES,
    NULL,
    REPORTED_TYPE_CASES,
    WIDE_TABLES,
    charset_maxlen,
    representable,
    server_charsets,
    unicode_pool,
)
from tests.conformance.matrix import record, verdict
from tests.conformance.runner import (
    GroupRun,
    TableRun,
    TableSpec,
    ValueColumn,
    arrow_mismatches,
    compiled_decoder_problems,
    digest_mismatches,
    identity_mismatches,
    mirror_mismatches,
    native_mismatches,
    run_group,
)
from tests.conformance.specs import (
    SURROGATE_CHARSETS,
    charset_specs,
    key_spec,
    probe_key_case,
    probe_types,
    seed_of,
    type_specs,
    unorderable_collations,
)

pytestmark = pytest.mark.both_flavors  # every case on MariaDB and on Oracle MySQL

CHUNK_SIZE = 6  # rows per chunk: every table of ~30 rows gets several chunks
DATABASE = "conformance"
WM_SUFFIX = "_wm"
WM_SERVER_ID = 5460  # the backfill reader's replica id (the stream and the identity reads use slots 0 and 1)


def _fail(case: str, problems: dict[str, list[str]]) -> None:
    bad = {phase: p for phase, p in problems.items() if p}
    if bad:
        text = "\n".join(f"  [{phase}] " + f"\n  [{phase}] ".join(p) for phase, p in bad.items())
        pytest.fail(f"{case}:\n{text}", pytrace=False)


def _native_verdict(run: TableRun, problems: list[str]) -> str:
    """The native phase's cell: "python" where the native reader leaves the table to the pure-Python one."""
    return "python" if run.native_skipped and not problems else verdict(problems)


def _per_column(run: TableRun, names: list[str], check) -> list[str]:
    if run.identity_error:
        return [f"table read failed: {run.identity_error}"]
    return [f"{n}: {m}" for n in names for m in check(run, n)]


def _exercised(run: TableRun, min_changes: int = 10) -> list[str]:
    """A run that planned under 3 chunks or streamed almost nothing proves little."""
    out = []
    if run.pipeline_error is None and run.chunks < 3:
        out.append(f"only {run.chunks} chunks planned")
    if run.pipeline_error is None and run.changes < min_changes:
        out.append(f"only {run.changes} changelog records")
    return out


@pytest.fixture(scope="module")
def conformance_db(mysql_server):
    with mysql_server.admin() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{DATABASE}`")
        cur.execute(f"CREATE DATABASE `{DATABASE}`")
        wm = TableId(DATABASE, "mysqlcdc_watermark")
        cur.execute(WATERMARK_DDL.format(table=wm.quoted))
        cur.execute(f"GRANT INSERT, UPDATE ON {wm.quoted} TO 'cdc'@'%'")
    yield DATABASE
    with mysql_server.admin() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{DATABASE}`")


@pytest.fixture(scope="module")
def watermark_mode(conformance_db) -> ChunkReadOptions:
    return ChunkReadOptions(mode="watermark_table",
                            watermark_table=TableId(conformance_db, "mysqlcdc_watermark"),
                            server_id=WM_SERVER_ID)


# --- types --------------------------------------------------------------------------------------------------

TYPE_PHASES = ("identity", "compiled", "native", "arrow", "mirror", "mirror-wm", "digest")


def _one_read_mode(flavor: str) -> bool:
    """Oracle MySQL's default read view is the watermark table's: its plain run is its watermark run, so the
    suite runs it once and gives both verdicts from it."""
    return flavor == "mysql"


def _suffixed(group: GroupRun) -> GroupRun:
    """``group`` under the watermark run's table names."""
    return GroupRun({name + WM_SUFFIX: run for name, run in group.tables.items()}, group.writer_transactions,
                    group.seconds)


CASES_PER_RUN = 8  # cases whose tables share one pipeline run (per read mode): its fixed cost is shared
ROUNDS_PER_CASE = 11  # stream rounds per case in a shared run (a run of its own has 8)


def _batched_runs(server, database: str, cases: dict[str, list[TableSpec]], work: Path, options,
                  one_mode: bool, label: str) -> dict[str, TableRun]:
    """Every case's tables, ``CASES_PER_RUN`` cases to a pipeline run (``run_group``) in ``options``' read
    mode (None: the server's consistent snapshot), with more stream rounds per case than a run of its own
    has (its closing writes and its background writer's are shared by more tables), so each table still gets
    its share of changes. ``one_mode``: the run also stands for the watermark run."""
    runs: dict[str, TableRun] = {}
    ids = list(cases)
    for i in range(0, len(ids), CASES_PER_RUN):
        batch = ids[i:i + CASES_PER_RUN]
        specs = [spec for case in batch for spec in cases[case]]
        group = run_group(server, database, specs, work / f"{label}-{i}.db",
                          seed=seed_of(f"{label}:{batch[0]}"), chunk_size=CHUNK_SIZE,
                          stream_rounds=ROUNDS_PER_CASE * len(batch), read_options=options)
        runs.update(group.tables)
        if one_mode:
            runs.update(_suffixed(group).tables)
    return runs


@pytest.fixture(scope="module")
def type_runs(mysql_server, server_flavor, conformance_db, watermark_mode, tmp_path_factory):
    """The wide tables (one column per type case), run once per read mode for all type tests."""
    with mysql_server.admin(conformance_db) as conn:
        skipped = probe_types(conn)
    # six tables share one writer: more rounds, so each gets its share of changes
    plain = run_group(mysql_server, conformance_db, type_specs(skipped),
                      tmp_path_factory.mktemp("types") / "chunks.db", seed=seed_of("types"),
                      chunk_size=CHUNK_SIZE, stream_rounds=20)
    if _one_read_mode(server_flavor):
        return plain, _suffixed(plain), skipped
    wm = run_group(mysql_server, conformance_db, type_specs(skipped, WM_SUFFIX),
                   tmp_path_factory.mktemp("types-wm") / "chunks.db", seed=seed_of("types-wm"),
                   chunk_size=CHUNK_SIZE, read_options=watermark_mode, stream_rounds=20)
    return plain, wm, skipped


@pytest.mark.parametrize("case", REPORTED_TYPE_CASES, ids=lambda c: c.id)
def test_type(case, type_runs):
    plain, wm, skipped = type_runs
    if case.id in skipped:
        for phase in TYPE_PHASES:
            record("types", case.id, phase, "skip")
        pytest.skip(f"type[{case.id}] not on this server: {skipped[case.id]}")
    name = WIDE_TABLES[case.table].name
    run, run_wm = plain.tables[name], wm.tables[name + WM_SUFFIX]
    problems = {
        "identity": identity_mismatches(run, case.column),
        "compiled": compiled_decoder_problems(run) + compiled_decoder_problems(run_wm),
        "native": native_mismatches(run, case.column),
        "arrow": arrow_mismatches(run, case.column),
        "mirror": mirror_mismatches(run, case.column),
        "mirror-wm": mirror_mismatches(run_wm, case.column),
        "digest": digest_mismatches(run, case.column) + digest_mismatches(run_wm, case.column),
    }
    for phase, p in problems.items():
        record("types", case.id, phase, _native_verdict(run, p) if phase == "native" else verdict(p))
    _fail(f"type[{case.id}] (column {case.column} of {run.table})", problems)


@pytest.mark.parametrize("table", list(WIDE_TABLES), ids=lambda t: WIDE_TABLES[t].name)
def test_type_table(table, type_runs):
    """Whole rows of each wide table in both modes, and that the runs exercised what they should."""
    plain, wm, _ = type_runs
    run = plain.tables[WIDE_TABLES[table].name]
    run_wm = wm.tables[WIDE_TABLES[table].name + WM_SUFFIX]
    problems = {
        "exercised": _exercised(run) + _exercised(run_wm),
        "mirror": mirror_mismatches(run),
        "mirror-wm": mirror_mismatches(run_wm),
    }
    name = run.spec.name
    record("type-tables", name, "chunks", str(run.chunks))
    record("type-tables", name, "changes", str(run.changes))
    record("type-tables", name, "mirror", verdict(problems["mirror"]))
    record("type-tables", name, "backfilled", str(run_wm.backfill_events))
    record("type-tables", name, "mirror-wm", verdict(problems["mirror-wm"]))
    _fail(f"type-table[{name}]", problems)


# --- character sets -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server_charset_names(mysql_server) -> list[str]:
    with mysql_server.admin() as conn:
        return server_charsets(conn)


def test_every_server_charset_is_catalogued(server_charset_names):
    """The catalogue covers every row of SHOW CHARACTER SET (but binary)."""
    missing = sorted(set(server_charset_names) - set(CHARSETS))
    assert not missing, f"charsets of this server with no conformance case: {missing}: add them to CHARSETS"


CHARSET_PHASES = ("chars", "identity", "compiled", "native", "raw-bytes", "arrow", "mirror", "mirror-wm",
                  "key", "key-wm", "digest")


@pytest.fixture(scope="module")
def charset_inputs(mysql_server, server_charset_names) -> dict[str, tuple[list[str], int]]:
    """Per charset of the server: the characters of the pool it represents, and its longest character."""
    with mysql_server.admin() as conn:
        return {c: (representable(conn, c, unicode_pool()), charset_maxlen(conn, c))
                for c in CHARSETS if c in server_charset_names}


@pytest.fixture(scope="module")
def charset_runs(mysql_server, server_flavor, conformance_db, charset_inputs, watermark_mode,
                 tmp_path_factory) -> dict[str, TableRun]:
    """The values, raw-bytes and key tables of every charset whose key collation orders, side by side in
    pipeline runs of ``CASES_PER_RUN`` charsets per read mode (a charset whose key the engine refuses runs on
    its own in ``test_charset``: a refusal must not hide the verdict on other tables)."""
    unorderable = unorderable_collations(server_flavor)
    inputs = {c: v for c, v in charset_inputs.items() if c not in unorderable}
    work, one_mode = tmp_path_factory.mktemp("charsets"), _one_read_mode(server_flavor)
    plain = {c: [charset_specs(c, *v)[k] for k in ("values", "raw", "key")] for c, v in inputs.items()}
    runs = _batched_runs(mysql_server, conformance_db, plain, work, None, one_mode, "charsets")
    if not one_mode:
        wm = {c: [charset_specs(c, *v, WM_SUFFIX)[k] for k in ("values", "key")] for c, v in inputs.items()}
        runs.update(_batched_runs(mysql_server, conformance_db, wm, work, watermark_mode, False,
                                  "charsets-wm"))
    return runs


@pytest.mark.parametrize("charset", CHARSETS)
def test_charset(charset, mysql_server, server_flavor, conformance_db, charset_inputs, charset_runs,
                 watermark_mode, tmp_path):
    if charset not in charset_inputs:
        for phase in CHARSET_PHASES:
            record("charsets", charset, phase, "skip")
        pytest.skip(f"charset[{charset}]: not in this server's SHOW CHARACTER SET")
    chars, maxlen = charset_inputs[charset]
    non_ascii = [c for c in chars if ord(c) > 0x7F]
    record("charsets", charset, "chars", str(len(non_ascii)))
    plain, wm = charset_specs(charset, chars, maxlen), charset_specs(charset, chars, maxlen, WM_SUFFIX)
    runs = {name: charset_runs[name] for name in (*[s.name for s in plain.values()],
                                                  *[s.name for s in wm.values()]) if name in charset_runs}
    unorderable = unorderable_collations(server_flavor)
    groups = []
    if charset in unorderable:
        # the key table on its own: a key the engine refuses to chunk must not hide the verdict on the values
        groups = [([plain["values"], plain["raw"]], None), ([plain["key"]], None),
                  ([wm["values"]], watermark_mode), ([wm["key"]], watermark_mode)]
    one_mode = _one_read_mode(server_flavor)
    for specs, options in groups:
        if one_mode and options is not None:
            continue
        group = run_group(mysql_server, conformance_db, specs, tmp_path / f"{specs[0].name}.db",
                          seed=seed_of(specs[0].name), chunk_size=CHUNK_SIZE, read_options=options)
        runs.update(group.tables)
        if one_mode:
            runs.update(_suffixed(group).tables)
    refused = {}
    if charset in unorderable:  # refused at plan time; the way out (a _bin collation) must work
        refused = {phase: _refusal(runs[specs["key"].name])
                   for phase, specs in (("key", plain), ("key-wm", wm))}
        bin_plain = charset_specs(charset, chars, maxlen, key_collation=f"{charset}_bin")
        bin_wm = charset_specs(charset, chars, maxlen, WM_SUFFIX, key_collation=f"{charset}_bin")
        for specs, options in ((bin_plain, None), (bin_wm, watermark_mode)):
            if one_mode and options is not None:
                continue
            group = run_group(mysql_server, conformance_db, [specs["key"]],
                              tmp_path / f"{specs['key'].name}.db", seed=seed_of(specs["key"].name),
                              chunk_size=CHUNK_SIZE, read_options=options)
            runs.update(group.tables)
            if one_mode:
                runs.update(_suffixed(group).tables)
        plain, wm = dict(plain, key=bin_plain["key"]), dict(wm, key=bin_wm["key"])
    values_run, key_run = runs[plain["values"].name], runs[plain["key"].name]
    value_columns = [c.name for c in plain["values"].value_columns]
    problems = {
        "chars": [] if non_ascii or charset in ("ascii", "swe7") else ["no non-ASCII character round-trips"],
        "identity": _per_column(values_run, value_columns, identity_mismatches)
        + _per_column(key_run, ["k", "v"], identity_mismatches),
        "compiled": [p for name in (plain["values"].name, plain["key"].name, plain["raw"].name,
                                    wm["values"].name)
                     for p in compiled_decoder_problems(runs[name])],
        "native": _per_column(values_run, value_columns, native_mismatches)
        + _per_column(key_run, ["k", "v"], native_mismatches)
        + _per_column(runs[plain["raw"].name], ["b"], native_mismatches),
        "raw-bytes": identity_mismatches(runs[plain["raw"].name], "b", limit=8),
        "arrow": _per_column(values_run, value_columns, arrow_mismatches)
        + _per_column(key_run, ["k", "v"], arrow_mismatches),
        "mirror": mirror_mismatches(values_run) + _exercised(values_run),
        "mirror-wm": mirror_mismatches(runs[wm["values"].name]) + _exercised(runs[wm["values"].name]),
        "key": mirror_mismatches(key_run) + _exercised(key_run),
        "key-wm": mirror_mismatches(runs[wm["key"].name]) + _exercised(runs[wm["key"].name]),
        "digest": [p for name in (plain["values"].name, plain["key"].name, plain["raw"].name,
                                  wm["values"].name, wm["key"].name)
                   for p in digest_mismatches(runs[name])],
    }
    for phase, problem in refused.items():
        problems[phase] = problem + problems[phase]
    for phase in CHARSET_PHASES[1:]:
        status = (_native_verdict(values_run, problems[phase]) if phase == "native"
                  else verdict(problems[phase]))
        record("charsets", charset, phase, "refused" if phase in refused and status == "ok" else status)
    _fail(f"charset[{charset}] ({len(non_ascii)} non-ASCII characters round-trip)", problems)


@pytest.mark.parametrize("charset", sorted(SURROGATE_CHARSETS))
def test_no_unicode_form(charset, mysql_server, server_flavor, conformance_db, server_charset_names,
                         tmp_path):
    """ucs2 and utf32 take a lone UTF-16 surrogate under a non-strict sql_mode; no string type of Arrow,
    Parquet or Spark can hold one. Both paths refuse it alike, naming the table and column and the way out
    (never a crash deep in a driver, never a replaced character)."""
    if charset not in server_charset_names:
        record("charsets", charset, "no-unicode", "skip")
        pytest.skip(f"{charset}: not in this server's SHOW CHARACTER SET")
    spec = TableSpec(
        name=f"csu_{charset}", key_columns=[("id", "INT NOT NULL")],
        key_pool=[(str(i),) for i in range(1, 4)],
        value_columns=[ValueColumn("s", f"VARCHAR(8) CHARACTER SET {charset} NULL", lambda r: NULL,
                                   ("'ok'", f"_binary X'{SURROGATE_CHARSETS[charset]}'", NULL))],
        sql_mode="", initial_rows=3, pipeline=False)
    run = run_group(mysql_server, conformance_db, [spec], tmp_path / "chunks.db", seed=seed_of(spec.name),
                    chunk_size=CHUNK_SIZE).tables[spec.name]
    paths = (("SELECT", run.select_error), ("binlog", run.binlog_error))
    problems = []
    if (server_flavor, charset) in SURROGATE_REFUSED_BY_SERVER:  # nothing unrepresentable was stored
        problems = [f"{path}: {error}" for path, error in paths if error]
        problems += _per_column(run, ["s"], identity_mismatches)
    else:
        wanted = ("UndecodableText", f"column 's' ({charset})", "lone UTF-16 surrogate", "HEX(`s`) REGEXP")
        for path, error in paths:
            if error is None or not all(w in error for w in wanted):
                problems.append(f"{path}: expected a clear UndecodableText naming the column, got {error}")
    record("charsets", charset, "no-unicode", verdict(problems))
    _fail(f"no-unicode-form[{charset}]", {"refused": problems})


# Oracle MySQL's utf32 refuses a lone surrogate on insert (ucs2 keeps it, as MariaDB's both do)
SURROGATE_REFUSED_BY_SERVER = {("mysql", "utf32")}


def _refusal(run: TableRun) -> list[str]:
    """Problems unless ``run`` was refused at plan time with an error naming the column and the way out."""
    error = run.pipeline_error or ""
    wanted = ("ConfigurationError", "column 'k'", "chunk_key", "collation")
    if all(w in error for w in wanted):
        return []
    return [("expected a plan-time ConfigurationError naming column 'k' and the option chunk_key, "
             f"got {error!r}")]


# --- key shapes ---------------------------------------------------------------------------------------------

KEY_PHASES = ("chunks", "changes", "identity", "compiled", "mirror", "backfilled", "mirror-wm", "digest")


@pytest.fixture(scope="module")
def key_runs(mysql_server, server_flavor, conformance_db, watermark_mode,
             tmp_path_factory) -> tuple[dict[str, str], dict[str, TableRun]]:
    """Why each key case this server cannot hold is skipped, and the runs of the others: their tables side by
    side in pipeline runs of ``CASES_PER_RUN`` cases per read mode."""
    with mysql_server.admin(conformance_db) as conn:
        skipped = {case.id: reason for case in KEY_CASES if (reason := probe_key_case(conn, case))}
    cases = [case for case in KEY_CASES if case.id not in skipped]
    work, one_mode = tmp_path_factory.mktemp("keys"), _one_read_mode(server_flavor)
    runs = _batched_runs(mysql_server, conformance_db, {c.id: [key_spec(c)] for c in cases}, work, None,
                         one_mode, "keys")
    if not one_mode:
        wm = {c.id: [key_spec(c, WM_SUFFIX)] for c in cases}
        runs.update(_batched_runs(mysql_server, conformance_db, wm, work, watermark_mode, False, "keys-wm"))
    return skipped, runs


@pytest.mark.parametrize("case", KEY_CASES, ids=lambda c: c.id)
def test_key(case, server_flavor, key_runs):
    skipped, runs = key_runs
    if case.id in skipped:
        for phase in KEY_PHASES:
            record("keys", case.id, phase, "skip")
        pytest.skip(f"key[{case.id}] not on this server: {skipped[case.id]}")
    run, run_wm = runs[key_spec(case).name], runs[key_spec(case, WM_SUFFIX).name]
    names = run.schema.column_names if run.schema else ["seq"]
    problems = {
        "exercised": _exercised(run) + _exercised(run_wm),
        "identity": _per_column(run, names, identity_mismatches),
        "compiled": compiled_decoder_problems(run) + compiled_decoder_problems(run_wm),
        # the default read view is exact on both: MariaDB's consistent snapshot, Oracle MySQL's executed GTIDs
        "mirror": mirror_mismatches(run),
        "mirror-wm": mirror_mismatches(run_wm, at_least_once=not case.primary_key),
        "digest": digest_mismatches(run) + digest_mismatches(run_wm),
    }
    record("keys", case.id, "chunks", str(run.chunks))
    record("keys", case.id, "changes", str(run.changes))
    record("keys", case.id, "backfilled", str(run_wm.backfill_events))
    for phase in ("identity", "compiled", "mirror", "mirror-wm", "digest"):
        record("keys", case.id, phase, verdict(problems[phase]))
    _fail(f"key[{case.id}] (table {run.table}; {run.writer_transactions} and "
          f"{run_wm.writer_transactions} background transactions in its pipeline runs)", problems)

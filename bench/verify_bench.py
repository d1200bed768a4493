"""``verify`` throughput (issue 39, point 6): rows verified per second and the source's CPU per row, against
one full-scan checksum of the same table on the same server in the same run.

Input: a throwaway MariaDB with the binlog on; one table ``bench.orders`` of ``rows`` rows in a realistic
shape: ``id BIGINT`` primary key and 11 columns of mixed types (INT, SMALLINT, TINYINT UNSIGNED, two DECIMALs
one of them nullable, DOUBLE, DATETIME(3), a nullable DATETIME, VARCHARs in utf8mb4 with non-ASCII text, one
of them nullable); planned into chunks of ``chunk_size`` rows and snapshotted through the engine into a lake
in the documented layout without Spark (``tests/support/layout_pipeline.py``, as ``tests/engine/
test_verify.py`` builds one); then ``batches`` stream batches of a light write load (updates, inserts,
deletes spread over the table: ~1% of the rows in all), each written as a changelog batch with the stream's
progress record and followed by the stream's mirror refresh, so verify finds what a running deployment has:
snapshot + changelog + mirror files.

Measured (``bench/cpu.py``'s ``measure``: wall, this process's CPU, the mariadbd process's CPU):

- **verify** of the whole table: ``VerifyRun(...).verify_table(table)`` as ``mysqlcdc verify`` runs it, every
  chunk must match. Its parts are timed by wrapping the engine's pieces for the run (nothing in the engine is
  changed): the source digests (``SourceDigester.digest``: one ``SELECT COUNT(*), SUM(<SHA-256 of the row's
  canonical text>)`` per chunk in a fresh consistent-snapshot read view), the wait for the stream
  (``StreamReach.wait``), reading the lake (``LakeTable.load``, ``rule_state``, ``mirror_state``) and the lake
  digests (``canonical_arrow.row_hashes``: per-row canonical text in Arrow, Python-printed columns,
  ``hashlib`` per row).
- **baselines**, on the same server and table, each the better of two runs (one before verify, one after):
  ``CHECKSUM TABLE t EXTENDED`` (the server's own full-table checksum), and as the closer equivalent of a
  digest one ``SELECT COUNT(*), SUM(CRC32(CONCAT_WS(...)))`` over the whole table (every column, a NULL mark
  per nullable column). Also verify's own digest statement over the whole table in one statement (no chunks):
  what the SHA-256 of the canonical text costs the server next to CRC32, and what chunking adds.
- **the lake side, taken apart**: the lake digest of the whole table (the mirror's rows), timed per step:
  each column's canonical text (Arrow-printed vs Python-printed columns), joining the row texts, the texts to
  Python bytes, ``hashlib.sha256`` per row.

Ratios: verify's rows/s over each baseline's (higher is better); the source's CPU nanoseconds per row over
each baseline's (lower is better). Oracle MySQL: not run here (no section of the suite runs on it yet).

Through the suite (``python bench/suite.py --only verify [--quick] [--verify-rows N]``), or by hand:
``python bench/verify_bench.py [--rows N] [--chunk-size C] [--batches B]`` prints the section's table.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: tests.support drives the engine
from cpu import Measure, measure, settle
from report import Figure
from spark_runs import say

DATABASE, TABLE_NAME = "bench", "orders"
TABLE = f"{DATABASE}.{TABLE_NAME}"
SECTION, CPU_SECTION = "verify", "verify-cpu"

COLUMNS_SQL = """
    id BIGINT NOT NULL PRIMARY KEY,
    customer_id INT NOT NULL,
    status VARCHAR(16) NOT NULL,
    amount DECIMAL(12,2) NOT NULL,
    discount DECIMAL(5,4) NULL,
    weight DOUBLE NOT NULL,
    quantity SMALLINT NOT NULL,
    created DATETIME(3) NOT NULL,
    shipped DATETIME NULL,
    email VARCHAR(64) NOT NULL,
    note VARCHAR(200) COLLATE utf8mb4_unicode_ci NULL,
    flags TINYINT UNSIGNED NOT NULL
"""
NULLABLE = ("discount", "shipped", "note")
NAMES = ("id", "customer_id", "status", "amount", "discount", "weight", "quantity", "created", "shipped",
         "email", "note", "flags")


def load_table(server: Any, rows: int) -> None:
    step = 250_000
    with server.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
        cur.execute(f"CREATE TABLE {TABLE} ({COLUMNS_SQL}) DEFAULT CHARSET=utf8mb4 "
                    "COLLATE=utf8mb4_general_ci")
        for low in range(1, rows + 1, step):
            high = min(rows, low + step - 1)
            cur.execute(
                f"INSERT INTO {TABLE} SELECT seq, seq % 50000, "
                "ELT(1 + seq % 5, 'new', 'paid', 'shipped', 'delivered', 'annulé'), "
                "(seq % 1000000) / 100, IF(seq % 3 = 0, NULL, (seq % 10000) / 10000), "
                "(seq % 9973) / 7.0e0, seq % 100, "
                "TIMESTAMP'2025-01-01 00:00:00' + INTERVAL seq * 37 SECOND "
                "+ INTERVAL (seq % 1000) * 1000 MICROSECOND, "
                "IF(seq % 4 = 0, NULL, TIMESTAMP'2025-01-02 00:00:00' + INTERVAL seq * 37 SECOND), "
                "CONCAT('user', seq % 50000, '@example.com'), "
                "IF(seq % 2 = 0, NULL, "
                "CONCAT('Bestellung nº ', seq, ' — Straße ✓ ', REPEAT('x', seq % 40))), "
                f"seq % 256 FROM {DATABASE}.seq_{low}_to_{high}")
            conn.commit()
        cur.execute(f"ANALYZE TABLE {TABLE}")
        cur.fetchall()


def write_batch(server: Any, rng: random.Random, next_id: int, live: int, changes: int, batch: int) -> int:
    """One batch of the write load: 80% updates, 10% inserts above the largest key, 10% deletes, keys drawn
    from the whole table. Returns the next key to insert."""
    n_ins = n_del = changes // 10
    keys = rng.sample(range(1, live + 1), changes - n_ins)
    updates, deletes = keys[n_del:], keys[:n_del]
    with server.admin() as conn, conn.cursor() as cur:
        cur.execute(f"UPDATE {TABLE} SET quantity = quantity + 1, amount = amount + 0.01, "
                    f"note = CONCAT('geändert ', {batch}, ' ✓'), shipped = NOW() "
                    f"WHERE id IN ({','.join(map(str, updates))})")
        cur.executemany(f"INSERT INTO {TABLE} VALUES "
                        "(%s, %s, 'new', %s, NULL, %s, 1, NOW(3), NULL, %s, %s, 0)",
                        [(k, k % 50000, f"{(k % 100000) / 100:.2f}", k / 7.0, f"user{k}@example.com",
                          f"neu {batch} — ✓") for k in range(next_id, next_id + n_ins)])
        cur.execute(f"DELETE FROM {TABLE} WHERE id IN ({','.join(map(str, deletes))})")
        conn.commit()
    return next_id + n_ins


def crc32_select() -> str:
    """``SELECT COUNT(*), SUM(CRC32(row))`` over the whole table: every column, a NULL mark per nullable
    column (CONCAT_WS skips NULLs)."""
    marks = ", ".join(f"ISNULL({c})" for c in NULLABLE)
    return (f"SELECT COUNT(*), SUM(CRC32(CONCAT_WS(0x1e, {', '.join(NAMES)}, CONCAT({marks})))) "
            f"FROM {TABLE}")


# --- timing the parts of a verify run -----------------------------------------------------------------------


@dataclass
class Part:
    calls: int = 0
    wall: float = 0.0
    cpu: float = 0.0  # this process's CPU (every thread: Arrow's too)
    rows: int = 0

    @contextmanager
    def timed(self) -> Iterator[None]:
        w0, c0 = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.calls += 1
            self.wall += time.perf_counter() - w0
            self.cpu += time.process_time() - c0


@dataclass
class Parts:
    source: Part = field(default_factory=Part)  # SourceDigester.digest
    wait: Part = field(default_factory=Part)  # StreamReach.wait
    lake_load: Part = field(default_factory=Part)  # LakeTable.load: the changelog, read once
    lake_read: Part = field(default_factory=Part)  # LakeTable.rule_state / mirror_state: snapshot + records
    lake_digest: Part = field(default_factory=Part)  # lake digests (row_hashes): canonical text + hashlib

    def lake_wall(self) -> float:
        return self.lake_load.wall + self.lake_read.wall + self.lake_digest.wall

    def lake_cpu(self) -> float:
        return self.lake_load.cpu + self.lake_read.cpu + self.lake_digest.cpu


@contextmanager
def timed_verify(parts: Parts) -> Iterator[None]:
    """Wrap the engine's pieces a verify run calls so each part's time is counted, restored afterwards:
    methods of the classes (``SourceDigester.digest``, ``StreamReach.wait``, ``LakeTable.load`` /
    ``rule_state`` / ``mirror_state``) and ``canonical_arrow.row_hashes``, which every lake digest calls
    (whichever module imported ``lake_digest``)."""
    from airflow_provider_mysqlcdc.engine.verify import canonical_arrow, lake_chunks, source_digest

    try:
        from airflow_provider_mysqlcdc.engine.verify.stream_reach import StreamReach
    except ImportError as exc:
        raise RuntimeError("engine/verify/stream_reach.py is gone: adapt bench/verify_bench.py") from exc
    targets: list[tuple[Any, str, Part]] = [
        (source_digest.SourceDigester, "digest", parts.source),
        (StreamReach, "wait", parts.wait),
        (lake_chunks.LakeTable, "load", parts.lake_load),
        (lake_chunks.LakeTable, "rule_state", parts.lake_read),
        (lake_chunks.LakeTable, "mirror_state", parts.lake_read),
        (canonical_arrow, "row_hashes", parts.lake_digest),
    ]
    saved = []
    for owner, name, part in targets:
        original = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
        if original is None:
            raise RuntimeError(f"{getattr(owner, '__name__', owner)}.{name} is gone: adapt "
                               "bench/verify_bench.py")
        saved.append((owner, name, original))
        setattr(owner, name, _timed(original, part, name))
    try:
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


def _timed(original: Any, part: Part, name: str) -> Any:
    """``original`` (a function or a classmethod) counting its calls, time and rows into ``part``."""
    func = original.__func__ if isinstance(original, classmethod) else original

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with part.timed():
            out = func(*args, **kwargs)
        if name == "digest":
            part.rows += out.digest.rows
        elif name == "row_hashes":
            part.rows += len(out)
        return out

    return classmethod(wrapper) if isinstance(original, classmethod) else wrapper


# --- the lake digest taken apart ----------------------------------------------------------------------------


def lake_breakdown(data: Any, columns: list[Any], kept: list[bool]) -> tuple[dict[str, float], list[str]]:
    """The lake digest of ``data`` step by step (seconds), as ``canonical_arrow`` computes it; checks that the
    steps give its digest."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from airflow_provider_mysqlcdc.engine.model import values
    from airflow_provider_mysqlcdc.engine.verify import canonical_arrow
    from airflow_provider_mysqlcdc.engine.verify.canonical_sql import NULL_TEXT, SEPARATOR, VALUE_MARK

    python_kinds = {"float", "double", "time", "json"}
    t: dict[str, float] = {"arrow columns": 0.0, "python columns": 0.0}
    per_column: list[str] = []
    parts = []
    for column, zero_dates in zip(columns, kept):
        t0 = time.perf_counter()
        text = canonical_arrow.column_text(data, column, "mariadb", zero_dates)
        seconds = time.perf_counter() - t0
        kind = values.value_kind(column)
        t["python columns" if kind in python_kinds else "arrow columns"] += seconds
        per_column.append(f"{column.name} ({kind}) {seconds * 1000:,.0f} ms")
        t0 = time.perf_counter()
        binary = pc.cast(text, pa.binary())
        marked = pc.binary_join_element_wise(pa.scalar(VALUE_MARK), binary, pa.scalar(b""))
        parts.append(pc.fill_null(marked, pa.scalar(NULL_TEXT)))
        t["join"] = t.get("join", 0.0) + time.perf_counter() - t0
    t0 = time.perf_counter()
    texts = pc.binary_join_element_wise(*parts, pa.scalar(SEPARATOR))
    t["join"] += time.perf_counter() - t0
    t0 = time.perf_counter()
    pylist = texts.to_pylist()
    t["to Python bytes"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    total = sum(int.from_bytes(hashlib.sha256(b).digest()[:8], "big") for b in pylist)
    t["sha256 per row"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    whole = canonical_arrow.lake_digest(data, columns, "mariadb", kept)
    t["lake_digest (whole, for comparison)"] = time.perf_counter() - t0
    if whole.hash_sum != total or whole.rows != data.num_rows:
        raise AssertionError("the lake digest taken apart differs from canonical_arrow.lake_digest: adapt "
                             "bench/verify_bench.py's lake_breakdown")
    return t, per_column


# --- the section --------------------------------------------------------------------------------------------


def run_section(work: Path, *, rows: int, chunk_size: int = 32768, batches: int = 5,
                seed: int = 1) -> tuple[list[Figure], list[str]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
    from airflow_provider_mysqlcdc.engine.lake.mirror_refresh import MirrorRefresher
    from airflow_provider_mysqlcdc.engine.model.tables import TableId
    from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
    from airflow_provider_mysqlcdc.engine.verify import verify_run
    from airflow_provider_mysqlcdc.engine.verify.canonical_sql import digest_select
    from airflow_provider_mysqlcdc.testing.mariadb import MariaDBServer
    from tests.support.layout_pipeline import LayoutPipeline

    table = TableId.parse(TABLE)
    rng = random.Random(seed)
    root = work / "out"
    changes = max(100, rows // 100 // max(1, batches))  # ~1% of the rows changed in all
    notes: list[str] = []
    with MariaDBServer(options={"innodb-buffer-pool-size": "1G"}) as server:
        assert server.process is not None
        pid = server.process.pid
        settings = MySQLSettings.from_url(server.cdc_url)
        say(f"verify: loading {rows:,} rows ...")
        load_table(server, rows)
        settle(pid)
        store = ChunkStore(str(work / "chunks.db"))
        pipe = LayoutPipeline(settings, store, DATABASE, root=str(root), chunk_size=chunk_size, progress=True,
                              keep_rows=False)  # no in-memory copy of every snapshot row
        (plan,) = pipe.plan([TABLE])
        pipe.tables = [table]
        say(f"verify: snapshot, {len(plan.chunks)} chunks of {chunk_size:,} ...")
        with measure(pid) as snap:
            for chunk in plan.chunks:
                pipe.snapshot(plan, chunk.chunk_id)
        pipe.open_stream([table])
        refresher = MirrorRefresher(str(root), store, settings=settings)
        refresher.refresh(table, None)  # the mirror's first build, as the stream's start does
        say(f"verify: write load, {batches} batches of {changes:,} row changes, streamed and refreshed ...")
        next_id, live = rows + 1, rows
        for b in range(batches):
            next_id = write_batch(server, rng, next_id, live, changes, b)
            batch_id, changed = pipe.stream_batch()
            refresher.on_batch_committed(batch_id, sorted(changed, key=str))
            pipe.changelog.clear()
        for batch_id, changed in pipe.drain(max_rows=100_000):  # the stream at the binlog's end
            refresher.on_batch_committed(batch_id, sorted(changed, key=str))
        pipe.changelog.clear()
        with server.admin() as conn, conn.cursor() as cur:
            cur.execute(f"SELECT COUNT(*) FROM {TABLE}")
            (n,) = cur.fetchone()
        n = int(n)
        settle(pid)

        with server.admin() as conn:
            from airflow_provider_mysqlcdc.engine.source.catalog import load_schema

            schema = load_schema(conn, table)
        build = refresher.build_of(table)
        columns, kept = verify_run.digest_columns(schema, build.data_schema.names)
        if [c.name for c in columns] != list(NAMES):
            raise AssertionError(f"verify digests columns {[c.name for c in columns]}, the table has {NAMES}")
        full_digest_sql = digest_select(table.quoted, columns, "TRUE", kept)

        def scan(sql: str) -> tuple[Measure, Any]:
            with server.admin() as conn, conn.cursor() as cur, measure(pid) as m:
                cur.execute(sql)
                out = cur.fetchall()
            return m, out

        scans = {"checksum": f"CHECKSUM TABLE {TABLE} EXTENDED", "crc32": crc32_select(),
                 "digest": full_digest_sql}
        runs: dict[str, list[Measure]] = {k: [] for k in scans}
        full_hash: Any = None
        say("verify: baselines (before) ...")
        for name, sql in scans.items():
            m, out = scan(sql)
            runs[name].append(m)
            if name == "digest":
                full_hash = out[0]
            elif name == "crc32" and int(out[0][0]) != n:
                raise AssertionError(f"the CRC32 scan counted {out[0][0]} rows, the table has {n}")
        settle(pid)

        say("verify: verify_table ...")
        parts = Parts()
        run = verify_run.VerifyRun(settings, store, str(root), verify_run.VerifyOptions(wait_s=60))
        with timed_verify(parts), measure(pid) as vm:
            verdicts = run.verify_table(table)
        bad = [v.describe() for v in verdicts if v.result != "match"]
        if bad or len(verdicts) != len(plan.chunks):
            raise AssertionError(f"verify did not match every chunk ({len(verdicts)} verdicts, "
                                 f"{len(plan.chunks)} chunks): {bad[:3]}")
        verified = sum(v.source.rows for v in verdicts if v.source is not None)
        source_sum = sum(v.source.hash_sum for v in verdicts if v.source is not None)
        if verified != n or (int(full_hash[0]), int(full_hash[1])) != (n, source_sum):
            raise AssertionError(f"verify's chunk digests ({verified} rows) do not add up to the whole-table "
                                 f"digest ({full_hash}) of {n} rows")
        settle(pid)
        say("verify: baselines (after) ...")
        for name, sql in scans.items():
            runs[name].append(scan(sql)[0])

        say("verify: the lake digest taken apart ...")
        mirror = pa.concat_tables([pq.read_table(p) for p in _mirror_files(str(root), table)],
                                  promote_options="default")
        if mirror.num_rows != n:
            raise AssertionError(f"the mirror has {mirror.num_rows} rows, the source {n}")
        steps, per_column = lake_breakdown(mirror, columns, kept)

    best = {k: min(v, key=lambda m: m.wall) for k, v in runs.items()}
    figures = _figures(n, len(plan.chunks), chunk_size, vm, parts, best)
    lake_steps = "; ".join(f"{k} {v:,.2f} s" for k, v in steps.items())
    python_share = steps["python columns"] + steps["to Python bytes"] + steps["sha256 per row"]
    digest_sum = sum(v for k, v in steps.items() if not k.startswith(("lake_digest", "datetime by cast")))
    digested = parts.lake_digest
    notes += [
        (f"Verify: the input: {n:,} rows ({rows:,} loaded, then {batches} stream batches of {changes:,} "
         f"row changes, each refreshing the mirror), {len(plan.chunks)} chunks of {chunk_size:,}; snapshot "
         f"through the engine {snap.wall:,.1f} s."),
        (f"Verify: where the time goes ({vm.wall:,.2f} s wall, {vm.client:,.2f} s CPU of this process, "
         f"{vm.server:,.2f} s of mariadbd): source digests {parts.source.wall:,.2f} s wall in "
         f"{parts.source.calls} statements ({parts.source.cpu:,.2f} s CPU here: the client waits); "
         f"waiting for the stream {parts.wait.wall:,.2f} s; the lake side {parts.lake_wall():,.2f} s wall / "
         f"{parts.lake_cpu():,.2f} s CPU = changelog load {parts.lake_load.wall:,.2f} s + snapshot/mirror "
         f"reads and the rule {parts.lake_read.wall:,.2f} s ({parts.lake_read.calls} reads) + lake "
         f"digests {digested.wall:,.2f} s ({digested.calls} digests of {digested.rows:,} rows: each "
         "chunk's rule state and its mirror files, and the rule's state through the mirror's batch "
         "where it holds other records, "
         f"{digested.rows / max(n, 1):.1f} rows digested per row verified)."),
        (f"Verify: the lake digest taken apart, once over the mirror's {n:,} rows: {lake_steps}. Python's "
         "share (Python-printed columns: the DOUBLE; bytes to Python; hashlib per row) "
         f"{python_share:,.2f} s of {digest_sum:,.2f} s ({python_share / max(digest_sum, 1e-9):.0%}); "
         f"per column: {', '.join(per_column)}."),
        ("Verify: baselines are the better of two runs (before and after verify): "
         + "; ".join(f"{k} " + " / ".join(f"{m.wall:,.2f} s" for m in v) for k, v in runs.items()) + "."),
    ]
    return figures, notes


def _mirror_files(root: str, table: Any) -> list[str]:
    from airflow_provider_mysqlcdc.engine.lake.layout import table_dir
    from airflow_provider_mysqlcdc.engine.lake.mirror_manifest import read_manifest

    manifest = read_manifest(root, table)
    if manifest is None:
        raise AssertionError("no mirror manifest")
    base = table_dir(root, table)
    return [os.path.join(base, f) for entry in manifest.chunks for f in entry.files]


def _figures(n: int, chunks: int, chunk_size: int, vm: Measure, parts: Parts,
             best: dict[str, Measure]) -> list[Figure]:
    checksum, crc, digest = best["checksum"], best["crc32"], best["digest"]
    size = f"{n:,} rows, 12 columns; {chunks} chunks of {chunk_size:,}"
    src = Measure(parts.source.wall, parts.source.cpu, vm.server)  # the server is idle outside the digests
    lake = Measure(parts.lake_wall(), parts.lake_cpu(), 0.0)
    whole = "verify of the whole table (source digests + lake side), every chunk matched"
    figures = [
        Figure(SECTION, f"**{whole}**", n / vm.wall, "rows/s", f"{vm.wall:,.2f} s", vm,
               baseline_what="`CHECKSUM TABLE t EXTENDED`", baseline=n / checksum.wall,
               baseline_detail=f"{checksum.wall:,.2f} s", baseline_cpu=checksum, note=size,
               short="verify vs CHECKSUM TABLE"),
        Figure(SECTION, f"same, {whole}", n / vm.wall, "rows/s", f"{vm.wall:,.2f} s", None,
               cpu_text="(row above)",
               baseline_what="`SELECT COUNT(*), SUM(CRC32(CONCAT_WS(...)))` over the whole table",
               baseline=n / crc.wall, baseline_detail=f"{crc.wall:,.2f} s", baseline_cpu=crc,
               short="verify vs SUM(CRC32) scan"),
        Figure(SECTION, "of which the source digests (one SHA-256 digest statement per chunk, each in a "
               "fresh read view)", n / parts.source.wall, "rows/s", f"{parts.source.wall:,.2f} s", src,
               baseline_what="the same digest statement, one full scan (no chunks)",
               baseline=n / digest.wall, baseline_detail=f"{digest.wall:,.2f} s", baseline_cpu=digest,
               note="ratio: what chunking and the read views cost", short="source digests vs one scan"),
        Figure(SECTION, "of which the lake side (changelog, snapshot and mirror reads, lake digests)",
               n / lake.wall, "rows/s", f"{lake.wall:,.2f} s", lake,
               baseline_what="the source digests of the same run", baseline=n / parts.source.wall,
               baseline_detail=f"{parts.source.wall:,.2f} s", baseline_cpu=src,
               note="ratio < 1: the lake side is the slower half", short="lake side vs source side"),
    ]
    per_row = 1e9 / n
    for what, m, short in (("`CHECKSUM TABLE t EXTENDED`", checksum, "vs CHECKSUM TABLE"),
                           ("`SUM(CRC32(CONCAT_WS(...)))` full scan", crc, "vs SUM(CRC32) scan"),
                           ("verify's digest statement, one full scan", digest, "vs one digest scan")):
        figures.append(Figure(
            CPU_SECTION, "source CPU per row verified (mariadbd), whole verify", vm.server * per_row,
            "ns/row", f"{vm.server:,.2f} s", None, cpu_text="(row 1 above)", baseline_what=what,
            baseline=m.server * per_row, baseline_detail=f"{m.server:,.2f} s", baseline_cpu=m,
            higher_is_better=False, note="lower is better", short=f"source CPU {short}"))
    return figures


def main() -> int:
    import tempfile

    from report import Report, markdown

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--chunk-size", type=int, default=32768)
    parser.add_argument("--batches", type=int, default=5, help="stream batches of writes before verify")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mysqlcdc-verify-"))
    try:
        figures, notes = run_section(work, rows=args.rows, chunk_size=args.chunk_size, batches=args.batches,
                                     seed=args.seed)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(markdown(Report(header=["### Verify throughput"], figures=figures, notes=notes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

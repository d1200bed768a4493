"""An independent audit of a changelog against the server's binlog, decoded by the server's own tool.

Our binlog reader and mysql-replication could share a mistake with the mirror check (a row decoded from the
wrong event, a rows event read twice, an event skipped). So the truth here comes from ``mariadb-binlog``
(``mysqlbinlog`` for Oracle MySQL) with ``--base64-output=DECODE-ROWS --verbose``: its event headers give each
rows event's end position (``end_log_pos``, the engine's position), its pseudo-SQL row blocks (``### UPDATE``,
``###   @1=...``) the row images. The files are downloaded raw (``--raw``) and every rows event is marked as
the end of its statement first (``end_every_statement``: the tool otherwise prints the rows of a large,
multi-event statement all together under its last event). We parse the text strictly and fail on anything we
do not understand rather than skip it.

``audit_changelog`` then checks, per table, the changelog (as ``(table, op, position key)`` entries, from
``Pipeline.changelog``'s Records or ``engine.lake.changelog_reader.changelog_records``):

* no duplicate: no two records with the same position key (file number, end position, row index, half);
* nothing invented: every record is a row image of a binlog row change of its table at that position, with
  an op that fits it (insert: +I; delete: -D; update: -U/+U, or -D/+I when the key changed);
* nothing missing: every row change after the table's "emit everything after" position (its largest chunk
  HW) up to the stream's end has all its records. Given the chunks (integer chunk keys only), every row image
  is also located in its chunk and checked exactly: emitted iff its event ends after that chunk's HW;
* values: integer, DECIMAL, DATETIME and TIMESTAMP columns of each record equal the printed image.

The server's row images are kept as the printed strings (``@1`` .. ``@n``), parsed only for the comparisons.
"""
from __future__ import annotations

import bisect
import os
import re
import shutil
import subprocess
import tempfile
import threading
import zlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Literal

from airflow_provider_mysqlcdc.engine.model.positions import (
    AFTER,
    BEFORE,
    BinlogPosition,
    RowKey,
    file_number,
)
from airflow_provider_mysqlcdc.engine.model.tables import Column, TableSchema
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings

Kind = Literal["insert", "update", "delete"]
Position = tuple[int, int]  # (binlog file number, end position)
EXAMPLES = 5


class BinlogAuditError(RuntimeError):
    """The binlog tool failed, or printed something this parser does not understand."""


# --- the binlog, as the server's tool prints it -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BinlogRowChange:
    """One row of a rows event: before/after images as printed (``{1: "-2 (4294967294)", 2: "'x'"}``)."""

    table: str  # "db.table"
    file: str
    end_pos: int  # end_log_pos of the rows event
    row_index: int  # 0-based, in the order the event holds the rows
    kind: Kind
    before: dict[int, str] | None
    after: dict[int, str] | None

    @property
    def position(self) -> Position:
        return file_number(self.file), self.end_pos

    def images(self) -> list[tuple[int, dict[int, str]]]:
        """(half, image) of each row image: a delete and an update's before image are BEFORE."""
        out = []
        if self.before is not None:
            out.append((BEFORE, self.before))
        if self.after is not None:
            out.append((AFTER, self.after))
        return out


@dataclass
class BinlogText:
    """Everything the tool printed that the audit needs."""

    changes: list[BinlogRowChange] = field(default_factory=list)
    last_position: Position | None = None  # the largest event end seen: how far the binlog was read
    files: list[str] = field(default_factory=list)


_HEADER = re.compile(
    r"^#\d{6} +\d{1,2}:\d\d:\d\d +server id +\d+ +end_log_pos +(\d+)(?: +CRC32 +0x[0-9a-fA-F]+)?\s+(.*)$"
)
_ROWS = re.compile(r"^(Write|Update|Delete)_(?:compressed_)?rows(?:_v1)?: table id (\d+)(.*)$")
_NAME = r"`((?:[^`]|``)*)`\.`((?:[^`]|``)*)`"
_TABLE_MAP = re.compile(rf"^Table_map: ({_NAME}) mapped to number (\d+)$")
_ROTATE = re.compile(r"^Rotate to (\S+) +pos: (\d+)")
_ROW_START = re.compile(r"^### (INSERT INTO|UPDATE|DELETE FROM) (.+)$")
_VALUE = re.compile(r"^###   @(\d+)=(.*)$")
_ROW_COUNT = re.compile(r"^# Number of rows: (\d+)$")
_VERB_KIND: dict[str, Kind] = {"INSERT INTO": "insert", "UPDATE": "update", "DELETE FROM": "delete"}
_EVENT_KIND: dict[str, Kind] = {"Write": "insert", "Update": "update", "Delete": "delete"}
_REFUSED = ("Transaction_payload", "Incident", "Partial_update", "Update_rows_partial")


@dataclass
class _Event:
    kind: Kind
    table: str
    printed_name: str
    file: str
    end_pos: int
    rows: list[dict[str, Any]] = field(default_factory=list)
    printed_count: int | None = None


class BinlogParser:
    """Feed it the tool's output line by line (bytes); ``finish()`` returns the row changes."""

    def __init__(self, first_file: str | None = None) -> None:
        self.file = first_file
        self.text = BinlogText(files=[first_file] if first_file else [])
        self._maps: dict[int, tuple[str, str]] = {}  # table id -> ("db.table", printed name)
        self._event: _Event | None = None
        self._line_no = 0

    def feed(self, raw: bytes) -> None:
        self._line_no += 1
        line = raw.rstrip(b"\n").decode("utf-8", "surrogateescape")
        if line.startswith("###"):
            self._row_line(line)
        elif line.startswith("#") and line[1:2].isdigit():
            self._header(line)
        elif m := _ROW_COUNT.match(line):
            if self._event is None:
                raise self._error("'# Number of rows' outside a rows event", line)
            self._event.printed_count = int(m.group(1))
        # anything else ("# at N" (wrong after a rotation when reading remotely: we use end_log_pos), "#Q>"
        # annotated queries, SQL text, "# End of log file") carries nothing the audit needs

    def finish(self) -> BinlogText:
        self._close_event()
        return self.text

    # -- headers ---------------------------------------------------------------------------------------------

    def _header(self, line: str) -> None:
        m = _HEADER.match(line)
        if not m:
            raise self._error("unrecognized event header", line)
        self._close_event()
        end, what = int(m.group(1)), m.group(2).strip()
        if end > 0 and self.file is not None:
            pos = (file_number(self.file), end)
            if self.text.last_position is None or pos > self.text.last_position:
                self.text.last_position = pos
        if rows := _ROWS.match(what):
            table_id = int(rows.group(2))
            if self.file is None:
                raise self._error("rows event before any file name (pass the first file)", line)
            if table_id not in self._maps:
                raise self._error(f"rows event of table id {table_id} without its Table_map", line)
            flags = rows.group(3).split()  # Oracle MySQL 9 adds USE_SQL_FOREIGN_KEY_F after STMT_END_F
            if flags[:1] != ["flags:"] or "STMT_END_F" not in flags[1:]:
                # its rows would be printed under a later event: read files marked by end_every_statement
                raise self._error("rows event not marked as the end of its statement", line)
            table, printed = self._maps[table_id]
            self._event = _Event(_EVENT_KIND[rows.group(1)], table, printed, self.file, end)
        elif tm := _TABLE_MAP.match(what):
            db, name = tm.group(2).replace("``", "`"), tm.group(3).replace("``", "`")
            self._maps[int(tm.group(4))] = (f"{db}.{name}", tm.group(1))
        elif rot := _ROTATE.match(what):
            if rot.group(1) != self.file:
                self.file = rot.group(1)
                self.text.files.append(self.file)
        elif what.startswith(_REFUSED) or (
            "_rows" in what.split(":")[0] and not what.startswith("Annotate_rows")
        ):
            raise self._error("event type the audit cannot read exactly", line)

    # -- pseudo-SQL row blocks -------------------------------------------------------------------------------

    def _row_line(self, line: str) -> None:
        event = self._event
        if event is None:
            raise self._error("row line outside a rows event", line)
        if m := _VALUE.match(line):
            row = event.rows[-1] if event.rows else None
            section = row.get("section") if row else None
            if row is None or section is None:
                raise self._error("value before ### WHERE / ### SET", line)
            image = row[section]
            index = int(m.group(1))
            if index in image:
                raise self._error(f"@{index} twice in one row image", line)
            image[index] = m.group(2)
        elif line == "### SET":
            row = event.rows[-1] if event.rows else None
            expected = {"insert": None, "update": "before"}
            if row is None or row["kind"] not in expected or row.get("section") != expected[row["kind"]]:
                raise self._error("unexpected ### SET", line)
            row["section"], row["after"] = "after", {}
        elif line == "### WHERE":
            row = event.rows[-1] if event.rows else None
            if row is None or row["kind"] not in ("update", "delete") or row.get("section") is not None:
                raise self._error("unexpected ### WHERE", line)
            row["section"], row["before"] = "before", {}
        elif m := _ROW_START.match(line):
            kind = _VERB_KIND[m.group(1)]
            if kind != event.kind or m.group(2) != event.printed_name:
                raise self._error(
                    f"row of {m.group(2)} ({kind}) in a {event.kind} event of {event.printed_name}", line
                )
            if event.rows:
                self._check_row(event.rows[-1], line)
            event.rows.append({"kind": kind, "section": None, "before": None, "after": None})
        else:
            raise self._error("unrecognized row line", line)

    def _check_row(self, row: dict[str, Any], line: str) -> None:
        need = {"insert": ("after",), "delete": ("before",), "update": ("before", "after")}[row["kind"]]
        if any(not row[part] for part in need):
            raise self._error(f"incomplete {row['kind']} row image", line)

    def _close_event(self) -> None:
        event, self._event = self._event, None
        if event is None:
            return
        if event.rows:
            self._check_row(event.rows[-1], f"(end of the rows event ending at {event.file}:{event.end_pos})")
        if event.printed_count is not None and event.printed_count != len(event.rows):
            raise self._error(
                f"the rows event ending at {event.file}:{event.end_pos} says {event.printed_count} rows, "
                f"parsed {len(event.rows)}", ""
            )
        for i, row in enumerate(event.rows):
            self.text.changes.append(BinlogRowChange(
                event.table, event.file, event.end_pos, i, row["kind"], row["before"], row["after"]
            ))

    def _error(self, what: str, line: str) -> BinlogAuditError:
        return BinlogAuditError(f"binlog text line {self._line_no}: {what}: {line[:200]!r}")


def binlog_program(flavor: str = "mariadb") -> list[str]:
    """The decoder of the flavor's binlog: MariaDB's ``mariadb-binlog`` cannot read Oracle MySQL 9.x files, so
    Oracle MySQL's come from its own ``mysqlbinlog`` (``testing/mysql.py``).
    MYSQLCDC_BINLOG_TOOL overrides both."""
    if tool := os.environ.get("MYSQLCDC_BINLOG_TOOL"):
        return [tool]
    if flavor == "mysql":
        from airflow_provider_mysqlcdc.testing.mysql import find_mysql

        return find_mysql().command("/usr/bin/mysqlbinlog")
    for name in ("mariadb-binlog", "mysqlbinlog"):
        if path := shutil.which(name):
            return [path]
    raise BinlogAuditError(
        "neither mariadb-binlog nor mysqlbinlog is on PATH (Debian: apt-get install mariadb-client)"
    )


def _flavor(settings: MySQLSettings) -> str:
    from airflow_provider_mysqlcdc.engine.source.connection import connect
    from airflow_provider_mysqlcdc.engine.source.server import server_info

    with connect(settings.with_database(None)) as conn:
        return server_info(conn).flavor


def read_binlog(settings: MySQLSettings, first_file: str, *, program: list[str] | None = None,
                timeout: float = 600.0) -> BinlogText:
    """Download the server's binlog files from ``first_file`` to the newest (``--raw`` over the replication
    protocol: the user needs REPLICATION SLAVE; the password travels in MYSQL_PWD, never in argv), then read
    them like ``read_binlog_files``."""
    if settings.ssl:
        raise BinlogAuditError("the binlog audit does not pass TLS options to the binlog tool")
    program = program or binlog_program(_flavor(settings))
    with tempfile.TemporaryDirectory(prefix="mysqlcdc-binlog-audit-") as tmp:
        args = [
            *program, "--no-defaults", "--read-from-remote-server",
            f"--host={settings.host}", f"--port={settings.port}", f"--user={settings.user}", "--raw",
            "--to-last-log", f"--result-file={tmp}/", first_file,
        ]
        _run(args, {**os.environ, "MYSQL_PWD": settings.password}, None, timeout)
        files = sorted(Path(tmp).iterdir(), key=lambda f: file_number(f.name))
        if not files or files[0].name != first_file:
            raise BinlogAuditError(f"downloading the binlog from {first_file} gave {[f.name for f in files]}")
        return _read_files(files, program, timeout)


def read_binlog_files(paths: Sequence[str | Path], *, program: list[str] | None = None,
                      timeout: float = 600.0) -> BinlogText:
    """Read local binlog files, in the given order (each file's name is its base name). The files are
    copied first: ``end_every_statement`` marks the copies."""
    with tempfile.TemporaryDirectory(prefix="mysqlcdc-binlog-audit-") as tmp:
        copies = [Path(shutil.copyfile(path, Path(tmp) / Path(path).name)) for path in paths]
        return _read_files(copies, program, timeout)


def _read_files(files: Sequence[Path], program: list[str] | None, timeout: float) -> BinlogText:
    text = BinlogText()
    for path in files:
        end_every_statement(path)
        args = [*(program or binlog_program()), "--no-defaults", "--base64-output=DECODE-ROWS", "--verbose"]
        part = _run([*args, str(path)], dict(os.environ), BinlogParser(path.name), timeout)
        assert part is not None
        text.changes.extend(part.changes)
        text.files.append(path.name)
        if part.last_position and (text.last_position is None or part.last_position > text.last_position):
            text.last_position = part.last_position
    return text


_FORMAT_DESCRIPTION_EVENT = 15
_ROWS_EVENT_TYPES = frozenset({23, 24, 25, 30, 31, 32, *range(0xA6, 0xAC)})  # v1, v2, MariaDB compressed
_STMT_END_F = 0x0001
_HEADER_LEN = 19


def end_every_statement(path: Path) -> int:
    """Set STMT_END_F on every rows event of a binlog file (and renew its CRC32); returns how many changed.

    Why: mariadb-binlog prints the rows of a statement only at the statement's last rows event (the one with
    STMT_END_F): the headers of all its events first, then all their rows together, so which rows belong to
    the earlier events (large statements are split into events of ``binlog_row_event_max_size``) cannot be
    told. With the flag on every rows event it prints each event's rows under that event's header. This
    touches only the event framing (19-byte headers) and the 2-byte flags after the 6-byte table id; the
    rows are still decoded by the tool. Refuses binlogs it cannot frame exactly.
    """
    data = bytearray(path.read_bytes())
    if data[:4] != b"\xfebin":
        raise BinlogAuditError(f"{path.name} is not a binlog file")
    post_header: bytes = b""
    checksum = False
    changed = 0
    offset = 4
    while offset < len(data):
        if offset + _HEADER_LEN > len(data):
            raise BinlogAuditError(f"{path.name}: truncated event header at {offset}")
        kind = data[offset + 4]
        size = int.from_bytes(data[offset + 9:offset + 13], "little")
        end = int.from_bytes(data[offset + 13:offset + 17], "little")
        if size < _HEADER_LEN or offset + size > len(data) or end != offset + size:
            raise BinlogAuditError(f"{path.name}: event at {offset} has size {size} and end {end}")
        event = data[offset:offset + size]
        if kind == _FORMAT_DESCRIPTION_EVENT:
            body = event[_HEADER_LEN:]
            if body[56] != _HEADER_LEN:  # binlog version (2), server version (50), created (4), header length
                raise BinlogAuditError(f"{path.name}: event header length {body[56]}, expected {_HEADER_LEN}")
            post_header = bytes(body[57:-5])  # post-header length of event types 1..n; checksum alg; CRC
            if body[-5] not in (0, 1):
                raise BinlogAuditError(f"{path.name}: checksum algorithm {body[-5]} is neither CRC32 nor off")
            checksum = body[-5] == 1
        elif kind in _ROWS_EVENT_TYPES:
            if kind > len(post_header) or post_header[kind - 1] < 8:
                raise BinlogAuditError(f"{path.name}: rows event type {kind} at {offset}: no 6-byte table id")
            if checksum and zlib.crc32(event[:-4]) != int.from_bytes(event[-4:], "little"):
                raise BinlogAuditError(f"{path.name}: CRC32 mismatch in the rows event at {offset}")
            flags_at = offset + _HEADER_LEN + 6
            flags = int.from_bytes(data[flags_at:flags_at + 2], "little")
            if not flags & _STMT_END_F:
                data[flags_at:flags_at + 2] = (flags | _STMT_END_F).to_bytes(2, "little")
                if checksum:
                    crc = zlib.crc32(data[offset:offset + size - 4])
                    data[offset + size - 4:offset + size] = crc.to_bytes(4, "little")
                changed += 1
        offset += size
    path.write_bytes(bytes(data))
    return changed


def _tool_name(args: list[str]) -> str:
    return next((Path(a).name for a in args if "binlog" in Path(a).name), Path(args[0]).name)


def _run(args: list[str], env: dict[str, str], parser: BinlogParser | None,
         timeout: float) -> BinlogText | None:
    """Stream the tool's stdout through the parser (the text can be large); stderr goes to a file, so a
    chatty tool cannot block on a full pipe; a timer kills a tool that hangs."""
    with tempfile.TemporaryFile() as err, subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=err, env=env
    ) as proc:
        assert proc.stdout is not None
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            for line in proc.stdout:
                if parser is not None:
                    parser.feed(line)
            proc.wait()
        except BinlogAuditError:
            proc.kill()
            raise
        finally:
            timed_out = not timer.is_alive()
            timer.cancel()
        if timed_out:
            raise BinlogAuditError(f"{_tool_name(args)} did not finish within {timeout:.0f}s")
        if proc.returncode != 0:
            err.seek(0)
            message = err.read().decode("utf-8", "replace").strip()[:500]
            raise BinlogAuditError(f"{_tool_name(args)} failed ({proc.returncode}): {message}")
    return parser.finish() if parser is not None else None


# --- what to expect of the changelog ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChangelogEntry:
    """One changelog record as the audit needs it; ``values`` (column name -> canonical value) is optional."""

    table: str
    op: str
    key: RowKey  # (file number, event end position, row index, half)
    values: Mapping[str, Any] = field(default_factory=dict)


def entries_from_records(records: Iterable[Any]) -> list[ChangelogEntry]:
    """From engine Records (``Pipeline.changelog``, ``engine.lake.changelog_reader.changelog_records``)."""
    return [ChangelogEntry(r.table, r.op, tuple(r.key), r.values) for r in records if r.phase == "stream"]


@dataclass(frozen=True, slots=True)
class ChunkWindow:
    """A chunk of a plan: its start (a tuple of integer chunk-key values; None for the first chunk, which
    also holds NULL keys; each chunk ends where the next starts) and its HW (None: -inf, all emitted)."""

    start: tuple[int, ...] | None
    hw: Position | None


@dataclass(frozen=True)
class TableExpectation:
    """What the stream filter promised for one table.

    ``emit_all_after``: every row change whose event ends after this (the table's largest chunk HW) must be in
    the changelog; None: every change must (the table was never snapshotted). ``chunk_key`` (1-based column
    numbers) and ``chunks`` (in key order, from one stable set of HWs) turn on the exact check of every row
    image; only for chunk keys of integer columns, whose order Python reproduces.
    """

    table: str
    columns: tuple[Column, ...]
    identity: tuple[int, ...]  # column numbers whose change splits an update into -D/+I (PK + chunk key)
    emit_all_after: Position | None
    chunk_key: tuple[int, ...] = ()
    chunks: tuple[ChunkWindow, ...] = ()

    @classmethod
    def from_plan(cls, schema: TableSchema, key_columns: Sequence[str],
                  hws: Mapping[int, BinlogPosition | None],
                  chunk_starts: Sequence[tuple[int, Any]]) -> TableExpectation:
        """``hws`` by chunk id; ``chunk_starts`` (chunk id, start key or None) in key order, as in
        ``plan.chunks``."""
        number = {name: i + 1 for i, name in enumerate(schema.column_names)}
        identity = tuple(number[c] for c in dict.fromkeys((*schema.primary_key, *key_columns)))
        committed = [hw.key for hw in hws.values() if hw is not None]
        exact = all(schema.column(c).is_integer for c in key_columns)
        chunks = tuple(
            ChunkWindow(tuple(start) if start is not None else None, hws[cid].key if hws.get(cid) else None)
            for cid, start in chunk_starts
        ) if exact else ()
        return cls(str(schema.table), schema.columns, identity, max(committed) if committed else None,
                   tuple(number[c] for c in key_columns) if exact else (), chunks)

    def chunk_hw(self, image: Mapping[int, str]) -> tuple[bool, Position | None]:
        """(located, HW of the chunk holding this image's key); a NULL in the key means the first chunk."""
        if not self.chunks or any(i not in image for i in self.chunk_key):
            return False, None
        key = [_printed_int(self.columns[i - 1], image[i]) for i in self.chunk_key]
        if any(k is None for k in key):
            return True, self.chunks[0].hw
        starts = [c.start for c in self.chunks[1:]]
        return True, self.chunks[bisect.bisect_right(starts, tuple(key))].hw  # type: ignore[arg-type]


# --- the audit ---------------------------------------------------------------------------------------------

_CATEGORIES = ("missing", "duplicates", "invented", "covered", "wrong_values")


@dataclass
class AuditReport:
    """Counts over the audited tables; up to five examples per problem."""

    binlog_changes: int = 0  # row changes of the audited tables in (start, end]
    records: int = 0
    checked: int = 0  # row changes whose records were checked for completeness
    checked_after_max_hw: int = 0  # ... of them, past their table's largest HW (the filter emits all)
    missing: int = 0
    duplicates: int = 0
    invented: int = 0
    covered: int = 0  # emitted though a committed snapshot covers them (exact check only)
    wrong_values: int = 0
    examples: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    by_table: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))

    @property
    def clean(self) -> bool:
        return not any(getattr(self, c) for c in _CATEGORIES)

    def add(self, category: str, table: str, example: str) -> None:
        setattr(self, category, getattr(self, category) + 1)
        self.by_table[table][category] += 1
        if len(self.examples[category]) < EXAMPLES:
            self.examples[category].append(f"{table}: {example}")

    def summary(self) -> str:
        counts = ", ".join(
            f"{name}={getattr(self, name)}"
            for name in ("binlog_changes", "records", "checked", "checked_after_max_hw", *_CATEGORIES)
        )
        lines = [counts]
        for category in _CATEGORIES:
            lines.extend(f"  {category}: {e}" for e in self.examples.get(category, []))
        return "\n".join(lines)


def assert_clean(report: AuditReport, min_checked_after_max_hw: int = 0) -> None:
    """Raise with the examples unless nothing is missing, duplicated, invented, covered or wrong, and enough
    changes past the largest HWs were checked for the audit to mean something."""
    if not report.clean:
        raise AssertionError(f"changelog does not match the binlog: {report.summary()}")
    if report.checked_after_max_hw < min_checked_after_max_hw:
        raise AssertionError(
            f"the audit checked only {report.checked_after_max_hw} row changes past the largest HWs "
            f"(wanted >= {min_checked_after_max_hw}): {report.summary()}"
        )


def audit_changelog(binlog: BinlogText, changelog: Iterable[ChangelogEntry],
                    tables: Iterable[TableExpectation], *, start: BinlogPosition,
                    end: BinlogPosition) -> AuditReport:
    """Check the changelog of a stream that read the binlog from ``start`` to ``end`` (its resume offset's
    transaction start: every event ending at or before it was read whole)."""
    expect = {t.table: t for t in tables}
    lo, hi = start.key, end.key
    if binlog.last_position is None or binlog.last_position < hi:
        raise BinlogAuditError(
            f"the binlog text ends at {binlog.last_position}, before the stream's end {end}"
        )
    truth: dict[tuple[str, int, int, int], BinlogRowChange] = {}
    for change in binlog.changes:
        if change.table in expect:
            truth[(change.table, *change.position, change.row_index)] = change
    report = AuditReport()
    seen: Counter = Counter()
    present: set[tuple[str, RowKey]] = set()
    for entry in changelog:
        report.records += 1
        report.by_table[entry.table]["records"] += 1
        ident = (entry.table, tuple(entry.key))
        seen[ident] += 1
        if seen[ident] > 1:
            report.add("duplicates", entry.table, f"{entry.op} at {_where(entry.key)} (copy {seen[ident]})")
            continue
        present.add(ident)
        _check_entry(report, expect.get(entry.table), truth, entry)
    for change in truth.values():
        pos = change.position
        if not lo < pos <= hi:
            continue
        report.binlog_changes += 1
        report.by_table[change.table]["binlog_changes"] += 1
        _check_complete(report, expect[change.table], change, present)
    return report


def _check_entry(report: AuditReport, table: TableExpectation | None, truth: Mapping,
                 entry: ChangelogEntry) -> None:
    number, pos, index, half = entry.key
    where = f"{entry.op} at {_where(entry.key)}"
    if table is None:
        report.add("invented", entry.table, f"{where}: table not audited")
        return
    change = truth.get((entry.table, number, pos, index))
    if change is None:
        report.add("invented", entry.table, f"{where}: no binlog row change of this table there")
        return
    allowed = _ops(table, change).get(half)
    if allowed is None or entry.op not in allowed:
        report.add("invented", entry.table, f"{where}: op does not fit the binlog's {change.kind} "
                                            f"(expected {sorted(allowed or ())})")
        return
    image = change.before if half == BEFORE else change.after
    assert image is not None
    if table.chunks:
        located, hw = table.chunk_hw(image)
        if located and hw is not None and (number, pos) <= hw:
            report.add("covered", entry.table, f"{where}: its chunk's snapshot (HW {hw}) covers it")
    for i, column in enumerate(table.columns, start=1):
        if column.name not in entry.values or i not in image:
            continue
        want = _printed_value(column, image[i])
        got = entry.values[column.name]
        if want is not _UNCHECKED and not _same(want, got):
            report.add("wrong_values", entry.table, f"{where}: {column.name}={got!r}, binlog @{i}={image[i]}")
            return


def _check_complete(report: AuditReport, table: TableExpectation, change: BinlogRowChange,
                    present: set[tuple[str, RowKey]]) -> None:
    pos = change.position
    past_max = table.emit_all_after is None or pos > table.emit_all_after
    wanted: list[int] = []
    for half, image in change.images():
        if past_max:
            wanted.append(half)
            continue
        located, hw = table.chunk_hw(image)
        if not located:
            return  # between the smallest and largest HW without chunk bounds: not checked for completeness
        if hw is None or pos > hw:
            wanted.append(half)
    report.checked += 1
    report.by_table[change.table]["checked"] += 1
    if past_max:
        report.checked_after_max_hw += 1
        report.by_table[change.table]["checked_after_max_hw"] += 1
    for half in wanted:
        key = (*pos, change.row_index, half)
        if (change.table, key) not in present:
            side = "before" if half == BEFORE else "after"
            report.add("missing", change.table, f"{change.kind} ({side} image) at {change.file}:"
                                                f"{change.end_pos} row {change.row_index}: {_short(change)}")


def _ops(table: TableExpectation, change: BinlogRowChange) -> dict[int, set[str]]:
    if change.kind == "insert":
        return {AFTER: {"+I"}}
    if change.kind == "delete":
        return {BEFORE: {"-D"}}
    before, after = change.before or {}, change.after or {}
    if all(i in before and i in after for i in table.identity) and table.identity:
        if any(before[i] != after[i] for i in table.identity):
            return {BEFORE: {"-D"}, AFTER: {"+I"}}
        return {BEFORE: {"-U"}, AFTER: {"+U"}}
    return {BEFORE: {"-U", "-D"}, AFTER: {"+U", "+I"}}  # key columns not all printed: either split fits


def _where(key: RowKey) -> str:
    number, pos, index, half = key
    return f"file #{number} pos {pos} row {index} {'before' if half == BEFORE else 'after'}"


def _short(change: BinlogRowChange) -> str:
    image = change.before if change.before is not None else change.after
    return ", ".join(f"@{i}={v}" for i, v in sorted((image or {}).items())[:3])


# --- printed values -----------------------------------------------------------------------------------------

_UNCHECKED = object()
_INT = re.compile(r"^(-?\d+)(?: \((\d+)\))?$")


def _printed_int(column: Column, raw: str) -> int | None:
    """``-2 (4294967294)``: the signed reading, then the unsigned one; pick by the column's signedness."""
    if raw == "NULL":
        return None
    m = _INT.match(raw)
    if not m:
        raise BinlogAuditError(f"integer column {column.name} printed as {raw!r}")
    if column.unsigned and m.group(2) is not None:
        return int(m.group(2))
    return int(m.group(1))


def _printed_value(column: Column, raw: str) -> Any:
    if raw == "NULL":
        return None
    if column.is_integer:
        return _printed_int(column, raw)
    if column.is_decimal:
        try:
            return Decimal(raw)
        except InvalidOperation:
            raise BinlogAuditError(f"DECIMAL column {column.name} printed as {raw!r}") from None
    if column.data_type == "datetime" and raw.startswith("'") and not raw.startswith("'0000"):
        return datetime.fromisoformat(raw.strip("'"))
    if column.data_type == "timestamp" and raw not in ("0", "0.000000"):
        return datetime.fromtimestamp(0, UTC) + _seconds(Decimal(raw))
    return _UNCHECKED


def _seconds(value: Decimal) -> timedelta:
    whole = int(value)
    return timedelta(seconds=whole, microseconds=int((value - whole) * 1_000_000))


def _same(want: Any, got: Any) -> bool:
    if want is None or got is None:
        return want is None and got is None
    return bool(want == got)


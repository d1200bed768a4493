"""The values users give a pipeline (CLI options, operator arguments, DAG params), checked before any work.

Every entry point takes the same kinds of values: numbers with a range, table names and patterns, column
names, chunk ids, a chunk store location, an output root, a trigger interval, a startup mode, free text.
Each check here returns the value in its working form or raises :class:`BadValue`, which names the argument
(``--chunk-size`` on the command line, ``chunk_size`` for an operator) and says how to fix it, in one line
that never holds a password. The CLI turns them into argparse types (``cli/validation.py``), the operators
call them at construction and at the start of ``execute`` (``operators/arguments.py``).

Nothing here writes anything: a check of a chunk store location looks at the directory, it creates no file.
"""
from __future__ import annotations

import math
import os
import re
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.model.table_names import TablePattern, split_table_list
from airflow_provider_mysqlcdc.engine.stream.startup import StartupMode

# Upper bounds: what the engine and the chunk store can hold, or what cannot be meant (a few digits too many).
MAX_CHUNK_SIZE = 1_000_000_000  # rows per chunk
MAX_CHUNKS_PER_GROUP = 1_000_000
MAX_GENERATION = 2**31 - 1
MAX_BATCH_ROWS = 10_000_000  # rows per Arrow batch of a chunk read
MAX_ROWS_PER_FILE = 1_000_000_000
MAX_READER_SLOT = 2**31 - 1  # a watermark row id
MAX_CONCURRENT_READS = 10_000
MAX_ROWS_PER_SECOND = 1e12
MAX_QUERY_TIMEOUT_S = 4_294_967  # MySQL's max_execution_time holds 2^32 - 1 milliseconds
MAX_BATCH_BYTES = 2**62  # binlog bytes
MAX_CATCHUP_PARTITIONS = 10_000
MAX_ROWS_PER_READ = 100_000_000
MAX_SERVER_ID_SLOT = 2**32 - 2
MAX_WAIT_S = 7 * 24 * 3600.0  # a wait (reconnect, lock lease) longer than a week is a typo
MAX_IDENTIFIER_CHARS = 64  # MySQL: database, table and column names
MAX_PATTERN_CHARS = 255  # a pattern part may spell character classes out
MAX_RUN_ID_CHARS = 250  # the chunk store's run id columns (Airflow's limit)
MAX_TEXT_CHARS = 4096  # paths, URLs, reasons
SQL_BIGINT_MAX = 2**63 - 1  # what every chunk store backend keeps exactly
# The URI schemes pyarrow has a filesystem for (the output is written with pyarrow).
FILESYSTEM_SCHEMES = frozenset({"file", "local", "hdfs", "viewfs", "s3", "gs", "gcs", "abfs", "abfss"})
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_WHOLE = re.compile(r"^[+-]?[0-9]+(?:_[0-9]+)*$")  # ASCII digits only: int() also takes other scripts' digits
_NUMBER = re.compile(r"^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$")
_INTERVAL_PART = (r"(?:(?P<n>[0-9]+)\s+(?P<unit>week|day|hour|minute|second|millisecond|microsecond)s?"
                  r"|(?P<f>[0-9]+\.[0-9]+)\s+seconds?)")  # Spark takes a fraction of seconds only
_INTERVAL = re.compile(rf"(?:interval\s+)?(?:{_INTERVAL_PART}\s*)+", re.IGNORECASE)
_INTERVAL_UNIT_S = {"week": 604800.0, "day": 86400.0, "hour": 3600.0, "minute": 60.0, "second": 1.0,
                    "millisecond": 1e-3, "microsecond": 1e-6}
_SECRET_IN_URL = re.compile(r"(//[^/@:\s]*:)[^@/\s]*@")


class BadValue(ConfigurationError):
    """A value that cannot work: ``problem`` says what is wrong and the fix, ``name`` the argument."""

    def __init__(self, problem: str, name: str | None = None) -> None:
        self.problem = redacted(problem)  # whatever was echoed: a URL's password never reaches the line
        self.name = name
        super().__init__(f"{name}: {self.problem}" if name else self.problem)

    def named(self, name: str) -> BadValue:
        return BadValue(self.problem, name)


def redacted(message: str) -> str:
    """``message`` with the password of any ``scheme://user:password@`` in it replaced by ``***``."""
    return _SECRET_IN_URL.sub(r"\1***@", message)


def shown(value: Any, limit: int = 80) -> str:
    """``value`` for an error line: quoted with escapes (a newline stays on the line), cut at ``limit``
    characters, a password in a URL replaced by ``***``."""
    try:
        text = redacted(str(value))
    except ValueError:  # an int too long to print
        return "a number too long to show"
    if len(text) > limit:
        return repr(text[:limit]) + f" (cut; {len(text)} characters)"
    return repr(text)


def text(value: Any, *, what: str = "a value", max_chars: int = MAX_TEXT_CHARS,
         allow_control: bool = False) -> str:
    """Non-empty text without NUL (and, unless ``allow_control``, other control characters), stripped."""
    if value is None or not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise BadValue(f"give {what} as text, got {shown(value)}")
    try:
        raw = str(value)
    except ValueError:  # an int too long to print
        raise BadValue(f"give {what} as text, got {shown(value)}") from None
    if "\x00" in raw or (not allow_control and _CONTROL.search(raw)):
        raise BadValue(f"{shown(raw)} holds a control character (NUL, newline, ...): give {what} without one")
    stripped = raw.strip()
    if not stripped:
        raise BadValue(f"is empty: give {what}, or leave the option out")
    if len(stripped) > max_chars:
        raise BadValue(f"{shown(stripped)} is longer than {max_chars} characters: give {what}")
    return stripped


def whole_number(value: Any, *, minimum: int, maximum: int = SQL_BIGINT_MAX, zero: str = "") -> int:
    """A whole number in ``[minimum, maximum]``; ``zero`` says what 0 means, for the message."""
    bounds = f"a whole number from {minimum} to {maximum}"
    bounds += f" ({zero})" if zero else ""
    if isinstance(value, bool):
        raise BadValue(f"give {bounds}, got {shown(value)}")
    if isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, int):
        number = value
    elif isinstance(value, str) and _WHOLE.match(value.strip()) and len(value.strip()) <= 40:
        number = int(value.strip())
    else:
        raise BadValue(f"give {bounds}, got {shown(value)}")
    if not minimum <= number <= maximum:
        raise BadValue(f"{shown(value, 45)} is out of range: give {bounds}")
    return number


def number(value: Any, *, minimum: float, maximum: float, unit: str = "", zero: str = "",
           minimum_exclusive: bool = False) -> float:
    """A finite number in ``[minimum, maximum]`` (``(minimum, maximum]`` with ``minimum_exclusive``)."""
    low = f"more than {_plain(minimum)}" if minimum_exclusive else f"from {_plain(minimum)}"
    bounds = f"a number {low} to {_plain(maximum)}{' ' + unit if unit else ''}"
    bounds += f" ({zero})" if zero else ""
    if isinstance(value, bool):
        raise BadValue(f"give {bounds}, got {shown(value)}")
    if isinstance(value, (int, float)):
        result = float(value) if not isinstance(value, int) or abs(value) < 2**1023 else math.inf
    elif isinstance(value, str) and _NUMBER.match(value.strip()):
        result = float(value.strip())
    else:
        raise BadValue(f"give {bounds}, got {shown(value)}")
    too_low = result <= minimum if minimum_exclusive else result < minimum
    if not math.isfinite(result) or too_low or result > maximum:
        raise BadValue(f"{shown(value)} is out of range: give {bounds}")
    return result


def _plain(x: float) -> str:
    """``600`` rather than ``600.0``, ``4294967`` rather than ``4.29497e+06``."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def identifier(value: Any, *, what: str = "a column name") -> str:
    """A MySQL identifier as written (not stripped: it may hold spaces inside): 1-64 characters, no NUL, no
    character beyond the Basic Multilingual Plane, not ending in a space (MySQL allows none of these)."""
    if not isinstance(value, str) or not value.strip():
        raise BadValue(f"give {what}, got {shown(value)}")
    if "\x00" in value or any(ord(ch) > 0xFFFF for ch in value):
        raise BadValue(f"{shown(value)} holds a character MySQL names cannot hold (NUL, or beyond U+FFFF): "
                       f"give {what}")
    if len(value) > MAX_IDENTIFIER_CHARS:
        raise BadValue(f"{shown(value)} is longer than MySQL's {MAX_IDENTIFIER_CHARS} characters: "
                       f"give {what}")
    if value != value.rstrip():
        raise BadValue(f"{shown(value)} ends in a space, which no MySQL name does: give {what}")
    return value


def _parts(pattern: TablePattern) -> tuple[tuple[str, bool], tuple[str, bool]]:
    """The database and table part of ``pattern``, each with whether it was backtick-quoted."""
    return (pattern.database, pattern.database_literal), (pattern.table, pattern.table_literal)


def _check_pattern(pattern: TablePattern, written: str) -> None:
    for part, literal in _parts(pattern):
        if "\x00" in part or any(ord(ch) > 0xFFFF for ch in part):
            raise BadValue(f"table {shown(written)} holds a character MySQL names cannot hold (NUL, or "
                           "beyond U+FFFF): give database.table")
        globbed = not literal and any(ch in part for ch in "*?[")
        limit = MAX_PATTERN_CHARS if globbed else MAX_IDENTIFIER_CHARS
        if len(part) > limit:
            raise BadValue(f"table {shown(written)}: {shown(part, 30)} is longer than {limit} characters "
                           "(MySQL names have at most 64)")


def table_patterns(value: str | Iterable[str] | None) -> list[str]:
    """Names or patterns of tables (``db.table``, ``db.orders_*``, `` `db`.`a,b` ``), comma-separated or a
    list; at least one, each a well-formed ``database.table``."""
    if value is not None and not isinstance(value, (str, list, tuple)):
        raise BadValue(f"give table names as text (db.table or db.pattern_*) or a list, got {shown(value)}")
    items = [value] if isinstance(value, str) or value is None else list(value)
    for item in items:
        if item is not None and (not isinstance(item, str) or "\x00" in item):
            raise BadValue(f"give table names as text (db.table or db.pattern_*), got {shown(item)}")
    names = split_table_list([i for i in items if i is not None])
    if not names:
        raise BadValue("names no table: give db.table names or patterns (db.orders_*), comma-separated")
    for name in names:
        try:
            pattern = TablePattern.parse(name)
        except ConfigurationError as exc:
            raise BadValue(f"{exc} (for example shop.orders or shop.orders_*)") from None
        _check_pattern(pattern, name)
    return names


def table_name(value: Any) -> str:
    """One table named exactly (``db.table`` or `` `db`.`any name` ``), not a pattern, as written (stripped);
    :func:`table_key` gives its ``db.table`` form.

    An unquoted ``*`` or ``?`` is refused: where one table is meant, a pattern would be read as a name and
    silently match nothing (quote such a name in backticks)."""
    if not isinstance(value, str):
        raise BadValue(f"give one table as database.table, got {shown(value)}")
    names = table_patterns(value)
    if len(names) != 1:
        raise BadValue(f"{shown(value)} names {len(names)} tables: give exactly one database.table")
    pattern = TablePattern.parse(names[0])
    for part, literal in _parts(pattern):
        if not literal and any(ch in part for ch in "*?"):
            raise BadValue(f"{shown(value)} is a pattern: give one table by its exact name (quote a name "
                           "with glob characters in backticks: `db`.`t*`)")
    return names[0]


def table_key(value: Any) -> str:
    """One table named exactly, in the ``db.table`` form the engine keys settings by (chunk keys,
    exclusions)."""
    return str(TablePattern.parse(table_name(value)).exact)


def _split_assignment(value: str) -> tuple[str, str]:
    """``left=right`` split at the first ``=`` outside backticks (a quoted table name may hold one)."""
    quoted = False
    for i, ch in enumerate(value):
        if ch == "`":
            quoted = not quoted
        elif ch == "=" and not quoted:
            return value[:i].strip(), value[i + 1:].strip()
    return value.strip(), ""


def chunk_key(value: Any) -> tuple[str, str]:
    """``db.table=column``: the table (its ``db.table`` form) and the column to chunk it by."""
    table, column = _split_assignment(value) if isinstance(value, str) else ("", "")
    if not table or not column:
        raise BadValue(f"give DB.TABLE=COLUMN (e.g. shop.events=id), got {shown(value)}")
    return table_key(table), identifier(column)


def column_list(value: Any) -> tuple[str, ...]:
    """``"a, b"`` or ``["a", "b"]``: column names, at least one."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(i, str) for i in items):
        raise BadValue(f"give column names (\"secret,blob\" or a list of names), got {shown(value)}")
    names = [part.strip() for item in items for part in item.split(",") if part.strip()]
    if not names:
        raise BadValue(f"names no column: give column names, got {shown(value)}")
    return tuple(identifier(n) for n in names)


def exclude_columns_item(value: Any) -> tuple[str, tuple[str, ...]]:
    """``db.table=col1,col2``: a table and the columns never written for it."""
    table, columns = _split_assignment(value) if isinstance(value, str) else ("", "")
    if not table or not columns:
        raise BadValue(f"give DB.TABLE=COL[,COL] (e.g. shop.users=password_hash), got {shown(value)}")
    return table_key(table), column_list(columns)


def chunk_ids(value: Any) -> tuple[int, ...]:
    """``"3,7"`` or ``"0-15"`` (or a list of ids): sorted unique chunk ids."""
    from airflow_provider_mysqlcdc.engine.chunks.groups import parse_chunk_ids

    if isinstance(value, (list, tuple)) and value and all(type(i) is int for i in value):
        value = ",".join(str(whole_number(i, minimum=0)) for i in value)
    elif type(value) is int:
        value = str(whole_number(value, minimum=0))
    if not isinstance(value, str):
        raise BadValue(f"give chunk ids like 3,7 or 0-15, got {shown(value)}")
    written = text(value, what="chunk ids like 3,7 or 0-15", max_chars=1000)
    try:
        return parse_chunk_ids(written)
    except ConfigurationError as exc:
        hint = "" if "3,7 or 0-15" in str(exc) else ": give chunk ids like 3,7 or 0-15"
        raise BadValue(f"{exc}{hint}") from None


def sample_share(value: Any) -> float:
    """``"5%"`` or ``0.05``: a share of each table's chunks to verify (above 0, at most 1)."""
    if isinstance(value, str) and value.strip().endswith("%"):
        share = number(value.strip()[:-1].strip(), minimum=0, maximum=100, unit="%") / 100
    else:
        share = number(value, minimum=0, maximum=1)
    if share <= 0:
        raise BadValue(f"{shown(value)}: give a share above 0, like 5% or 0.05")
    return share


_VERIFY_ID = re.compile(r"^[\w.:-]{1,64}$")


def verify_id(value: Any) -> str:
    """A verify run's id (``mysqlcdc verify`` prints it): letters, digits and ``_ . : -``, at most 64."""
    written = text(value, what="a verify id", max_chars=64)
    if not _VERIFY_ID.match(written):
        raise BadValue(f"{shown(written)} is no verify id: use letters, digits and _ . : - (at most 64)")
    return written


def interval(value: Any) -> str:
    """A Spark processing-time interval (``10 seconds``, ``1 minute 30 seconds``, ``500 milliseconds``), at
    most a week: what Spark would refuse only once the stream starts is refused here."""
    written = text(value, what="an interval such as '10 seconds'")
    if not _INTERVAL.fullmatch(written):
        raise BadValue(f"{shown(written)} is no interval: give a number and a unit, e.g. '10 seconds', "
                       "'1 minute 30 seconds' or '500 milliseconds'")
    seconds = sum(float(m["n"]) * _INTERVAL_UNIT_S[m["unit"].lower()] if m["n"] else float(m["f"])
                  for m in re.finditer(_INTERVAL_PART, written, re.IGNORECASE))
    if seconds > MAX_WAIT_S:
        raise BadValue(f"{shown(written)} is longer than a week: give a shorter interval, e.g. '10 seconds'")
    return written


def startup_mode(value: Any) -> StartupMode:
    """A startup mode (``initial``, ``latest-offset``, ``timestamp:2026-11-21T08:00:00Z``, ...)."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return StartupMode()
    written = text(value, what="a startup mode")
    try:
        mode = StartupMode.parse(written)
    except ConfigurationError as exc:
        raise BadValue(str(exc)) from None
    except (ValueError, OverflowError, OSError):  # an epoch beyond what the platform's clock can hold
        raise BadValue(f"{shown(written)}: the time is out of range; use ISO 8601 (2026-11-21T08:00:00Z) or "
                       "epoch seconds") from None
    if mode.position is not None and mode.position.pos > SQL_BIGINT_MAX:
        raise BadValue(f"{shown(written)}: the position is out of range; give <file>:<pos> as SHOW "
                       "BINARY LOGS lists it")
    return mode


def chunk_store_location(value: Any, *, must_exist: bool | None, makes_directories: bool = False) -> str:
    """A chunk store URL or SQLite path. A SQLite file must exist when ``must_exist`` (reading a pipeline);
    when False, its directory must exist and take a new file (the command creates the store), or with
    ``makes_directories`` its nearest existing directory must (the operators' stores, created with their
    directories); None checks the form only (the path may be on another host). Server URLs are checked for
    their form only: reaching them is the store's job (it waits out an outage)."""
    from airflow_provider_mysqlcdc.engine.chunk_store import normalize_url

    written = text(value, what="a chunk store URL or SQLite path")
    try:
        url = normalize_url(written)
    except ConfigurationError as exc:
        message = redacted(str(exc))
        raise BadValue(message.replace(written, shown(written).strip("'"))) from None
    except RuntimeError:  # ~user of a user that does not exist
        raise BadValue(f"{shown(written)}: no home directory for that ~user; give the full path") from None
    except Exception:  # noqa: BLE001 - a URL SQLAlchemy cannot read at all (bad port, ...)
        raise BadValue(f"{shown(written)} is no chunk store URL: give a SQLite path, sqlite:///path/c.db, "
                       "mysql://user@host/db or postgresql://user@host/db") from None
    if url.get_backend_name() != "sqlite":
        return written
    database = url.database or ""
    if not database or database == ":memory:":
        raise BadValue("an in-memory SQLite chunk store keeps nothing: give a file path, e.g. "
                       "/var/lib/mysqlcdc/chunks.db")
    if database.startswith("file:") or must_exist is None:
        return written
    path = Path(database)
    if _kind(path):
        if _kind(path) != "file":
            raise BadValue(f"{shown(database)} is not a file: give the path of a SQLite file")
        if not os.access(path, os.R_OK | os.W_OK):
            raise BadValue(f"{shown(database)} is not readable and writable by this user: fix its "
                           "permissions")
        return written
    if must_exist:
        raise BadValue(f"no chunk store at {shown(database)}: check the path, or plan the tables first "
                       "(mysqlcdc plan)")
    directory = _nearest_existing(path.parent) if makes_directories else path.parent
    if _kind(directory) != "dir" and makes_directories:
        raise BadValue(f"{shown(database)} is under the file {shown(str(directory))}: give a path in a "
                       "directory")
    if _kind(directory) != "dir":
        raise BadValue(f"the directory {shown(str(directory))} does not exist: create it first, or give a "
                       "path in an existing directory")
    if not _takes_files(directory):
        raise BadValue(f"the directory {shown(str(directory))} is not writable: give a path in a directory "
                       "this user can write")
    return written


def _nearest_existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists (the root at the latest)."""
    return next(p for p in (path, *path.parents) if _kind(p) or p == p.parent)


def _kind(path: Path) -> str | None:
    """``"file"``, ``"dir"``, ``"other"``, or None where nothing is; a path the system refuses to look at
    (a name too long, a loop of links) is a bad value, not a traceback."""
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        problem = f"{shown(str(path))}: {exc.strerror or exc} (give a shorter or another path)"
        raise BadValue(problem) from None
    return "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"


def _takes_files(directory: Path) -> bool:
    """Whether a file can be created in ``directory`` (``os.access`` says yes to root on a read-only mount or
    a proc directory, so try one, and remove it at once)."""
    if not os.access(directory, os.W_OK | os.X_OK):
        return False
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".mysqlcdc-probe-"):
            return True
    except OSError:
        return False


def storage_root(value: Any, *, what: str = "an output root", writable: bool = True,
                 look: bool = True) -> str:
    """A local directory path or a filesystem URI (``s3://``, ``hdfs://``, ``file://``). For a local path
    (unless ``look`` is False: the form only, e.g. while a DAG is parsed on another host): not a file, and
    (``writable``) its nearest existing directory takes files. Nothing is created."""
    written = text(value, what=f"{what} (a local path or a URI such as s3://bucket/prefix)")
    scheme, sep, rest = written.partition("://")
    if not sep and re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", written):
        raise BadValue(f"{shown(written)} reads as a URI without '//': give scheme://location, or a local "
                       "path (./name for one holding a colon)")
    if sep and (not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", scheme) or not rest.strip("/")):
        raise BadValue(f"{shown(written)} is no URI: give a local path or scheme://location "
                       "(s3://bucket/prefix)")
    if sep and scheme.lower() not in FILESYSTEM_SCHEMES:
        schemes = ", ".join(s + "://" for s in sorted(FILESYSTEM_SCHEMES))
        raise BadValue(f"{shown(written)}: pyarrow has no filesystem for {scheme}://; use a local path or "
                       f"one of {schemes}")
    if sep and scheme.lower() != "file":
        return written  # an object store or HDFS: the job checks it can write there before reading anything
    if not look:
        return written
    path = Path(rest if sep else written).absolute()  # as the writers read it: "~" is no home here
    existing = _nearest_existing(path)
    if _kind(existing) != "dir":
        where = "is a file" if existing == path else f"is under the file {shown(str(existing))}"
        raise BadValue(f"{shown(written)} {where}, not a directory: give a directory path")
    if writable and not _takes_files(existing):
        raise BadValue(f"{shown(written)} is not writable by this user (in {shown(str(existing))}): give a "
                       "directory it can write")
    return written


def local_file_target(value: Any, *, what: str) -> str:
    """A file to write (a local path whose directory exists, or a URI)."""
    written = text(value, what=what)
    if "://" in written:
        return written
    path = Path(written)
    if _kind(path) == "dir":
        raise BadValue(f"{shown(written)} is a directory: give a file path")
    if _kind(path.parent) != "dir":
        raise BadValue(f"the directory {shown(str(path.parent))} does not exist: create it first")
    return written


def readable_file(value: Any, *, what: str) -> str:
    """A local file this user can read (a password file)."""
    written = text(value, what=what)
    path = Path(written)
    if _kind(path) != "file":
        raise BadValue(f"no file at {shown(written)}: give the path of {what}")
    if not os.access(path, os.R_OK):
        raise BadValue(f"{shown(written)} is not readable by this user: fix its permissions")
    return written


def flag(value: Any, *, default: bool) -> bool:
    """A boolean, also as text (``"true"``, ``"False"``, ``"0"``, ``"yes"``); nothing means ``default``."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if value is not None and not isinstance(value, str):
        raise BadValue(f"give true or false, got {shown(value)}")
    lowered = "" if value is None else value.strip().lower()
    if lowered in ("", "none"):
        return default
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise BadValue(f"give true or false, got {shown(value)}")


def retention(value: Any) -> str:
    """A garbage collection retention (``72h``, ``3d``, ``30m``), in its canonical spelling."""
    from airflow_provider_mysqlcdc.engine.lake.gc.retention import duration_text, parse_duration

    try:
        return duration_text(parse_duration(text(value, what="a duration such as 3d"), "the retention"))
    except BadValue:
        raise
    except ConfigurationError as exc:
        raise BadValue(str(exc)) from None


def gc_interval_minutes(value: Any) -> float:
    """Minutes between the stream's garbage collection runs (0: off)."""
    from airflow_provider_mysqlcdc.engine.lake.gc.retention import MAX_INTERVAL_MINUTES

    return number(value, minimum=0, maximum=MAX_INTERVAL_MINUTES, unit="minutes", zero="0: off")


def mirror_updates(value: Any) -> str:
    """How a batch updates the mirror: ``rewrite`` (the default) or ``deletion_vectors``."""
    from airflow_provider_mysqlcdc.engine.lake.mirror_refresh import (
        MIRROR_UPDATES,
        REWRITE,
        check_mirror_updates,
    )

    if value is None or (isinstance(value, str) and not value.strip()):
        return REWRITE
    written = text(value, what=f"one of {', '.join(MIRROR_UPDATES)}").strip().lower()
    try:
        return check_mirror_updates(written)
    except ConfigurationError as exc:
        raise BadValue(str(exc)) from None

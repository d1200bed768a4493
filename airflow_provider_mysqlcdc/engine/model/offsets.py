"""Resume offsets: where a binlog reader continues so that no row change is lost or emitted twice.

A rows event cannot be decoded without the TABLE_MAP event that precedes it in its transaction (and
mysql-replication silently drops rows whose table id it has not seen), so an offset never points into a
transaction. It names the *start* of a transaction (the position of its first event: the GTID event on
MariaDB and on MySQL, or the BEGIN query event) and how much of it was already emitted:

* ``skip_events``: rows events of that transaction already fully emitted (rows events of tables we do not
  capture count too: the count is over the binlog, not over our output);
* ``skip_rows``: row *images* of the next rows event already emitted. Insert and delete rows have one image
  each, update rows two (``-U`` then ``+U``), so an offset can fall between the two halves of an update.

``gtid`` is informational: the GTID of the last transaction before ``pos`` that the reader saw (MariaDB
``domain-server-seq``, MySQL ``uuid:gno``), or None. Reading always resumes by file and position.

Positions are only comparable within one server's binlog, so the stream's offsets also say where they belong
(``engine/stream/failover.py``):

* ``server``: the identity of the server whose binlog ``file``/``pos`` name (``ServerIdentity.token``);
* ``gtid_position``: the GTID state at ``pos`` (MariaDB: the GTID position, the last GTID of every domain;
  Oracle MySQL: the executed GTID set), which names the same point on every server of the replication
  topology: a stream resumes on another server from it;
* ``file_number_base``: added to the binlog file *number* of every position the stream reports (changelog
  ``_position``, filter and mirror comparisons). 0 on the server the snapshot read; after a failover it makes
  every position of the new server order after every position of the old one (and after every chunk HW).

Offsets are stored as versioned JSON. Every later release reads versions 1, 2 and 3; a release rejects
versions newer than it knows, with a message saying so. An offset is written in the oldest version that holds
it: version 1, unless it has a ``file_number_base`` (version 2: a release that does not know the base would
report positions that order before the old server's, so it must refuse such an offset instead) or an Oracle
MySQL GTID set as its ``gtid_position`` (version 3: a release that knows MariaDB GTID positions only would
take the set for a binlog that does not match, and refuse to resume with a misleading message).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition, file_number

OFFSET_VERSION = 3
SUPPORTED_VERSIONS = frozenset({1, 2, 3})


class OffsetFormatError(CdcError):
    """A stored offset cannot be read: malformed, or written by a newer release."""


@dataclass(frozen=True)
class BinlogOffset:
    """A transaction start plus what of that transaction was already emitted (see the module docstring)."""

    file: str
    pos: int
    skip_events: int = 0
    skip_rows: int = 0
    gtid: str | None = None
    version: int = field(default=OFFSET_VERSION, compare=False)  # as read; written: ``format_version``
    server: str | None = None  # the server whose binlog file/pos name (None: the one the stream talks to)
    gtid_position: str | None = None  # the GTID state at ``pos``: this point on every topology member
    file_number_base: int = 0  # added to the file number of every position the stream reports

    def __post_init__(self) -> None:
        if self.version not in SUPPORTED_VERSIONS:
            raise OffsetFormatError(_version_message(self.version))
        if self.file_number_base < 0:
            raise OffsetFormatError(f"binlog offset {self} has a negative file_number_base")
        try:
            file_number(self.file)
        except CdcError as exc:
            raise OffsetFormatError(f"binlog offset has an invalid file name: {exc}") from None
        if self.pos < 0 or self.skip_events < 0 or self.skip_rows < 0:
            raise OffsetFormatError(f"binlog offset {self} has a negative field")
        if self.skip_events == 0 and self.skip_rows == 0:
            return
        if self.pos < 4:
            raise OffsetFormatError(f"binlog offset {self} skips rows but does not point at a transaction")

    @classmethod
    def at(cls, position: BinlogPosition, gtid: str | None = None) -> BinlogOffset:
        """The offset of a transaction boundary (a watermark, the end of a commit event)."""
        return cls(position.file, position.pos, gtid=gtid)

    @property
    def position(self) -> BinlogPosition:
        """The transaction start this offset resumes in."""
        return BinlogPosition(self.file, self.pos)

    @property
    def ordered_position(self) -> BinlogPosition:
        """``position`` with the file number raised by ``file_number_base``: where this offset lies in the
        stream's order, the order of changelog ``_position`` values and chunk HWs (the same as ``position``
        until a failover). Compare with HWs through this; read the binlog through ``position``."""
        if not self.file_number_base:
            return self.position
        stem, _, digits = self.file.rpartition(".")
        number = self.file_number_base + file_number(self.file)
        return BinlogPosition(f"{stem}.{number:0{len(digits)}d}", self.pos)

    @property
    def at_boundary(self) -> bool:
        return self.skip_events == 0 and self.skip_rows == 0

    @property
    def key(self) -> tuple[int, int, int, int]:
        """Orders the offsets of one stream: later offsets have emitted more (across failovers too, by the
        file number base)."""
        return self.file_number_base + file_number(self.file), self.pos, self.skip_events, self.skip_rows

    @property
    def format_version(self) -> int:
        """The oldest version that holds this offset (older releases keep reading what they can)."""
        if self.gtid_position and ":" in self.gtid_position:  # an Oracle MySQL GTID set (uuid:1-57)
            return 3
        return 2 if self.file_number_base else 1

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "version": self.format_version,
            "file": self.file,
            "pos": self.pos,
            "skip_events": self.skip_events,
            "skip_rows": self.skip_rows,
            "gtid": self.gtid,
        }
        if self.server is not None:
            data["server"] = self.server
        if self.gtid_position is not None:
            data["gtid_position"] = self.gtid_position
        if self.file_number_base:
            data["file_number_base"] = self.file_number_base
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BinlogOffset:
        if not isinstance(data, dict):
            raise OffsetFormatError(f"binlog offset must be a JSON object, got {type(data).__name__}")
        version = data.get("version")
        if not isinstance(version, int) or isinstance(version, bool):
            raise OffsetFormatError(f"binlog offset {data!r} has no integer 'version'")
        if version not in SUPPORTED_VERSIONS:
            raise OffsetFormatError(_version_message(version))
        try:
            file, pos = data["file"], data["pos"]
            skip_events, skip_rows = data.get("skip_events", 0), data.get("skip_rows", 0)
            gtid = data.get("gtid")
        except KeyError as exc:
            raise OffsetFormatError(f"binlog offset {data!r} lacks {exc.args[0]!r}") from None
        server, gtid_position = data.get("server"), data.get("gtid_position")
        base = data.get("file_number_base", 0) if version >= 2 else 0
        if not isinstance(file, str) or not all(_is_int(v) for v in (pos, skip_events, skip_rows, base)):
            raise OffsetFormatError(f"binlog offset {data!r} has fields of the wrong type")
        if any(v is not None and not isinstance(v, str) for v in (gtid, server, gtid_position)):
            raise OffsetFormatError(f"binlog offset {data!r} has a non-string gtid, server or gtid_position")
        return cls(
            file, pos, skip_events, skip_rows, gtid, version=version, server=server,
            gtid_position=gtid_position, file_number_base=base,
        )

    @classmethod
    def from_json(cls, text: str) -> BinlogOffset:
        try:
            data = json.loads(text)
        except (TypeError, ValueError) as exc:
            raise OffsetFormatError(f"binlog offset is not valid JSON ({exc}): {text!r:.200}") from None
        return cls.from_dict(data)

    def __str__(self) -> str:
        text = f"{self.file}:{self.pos}"
        if not self.at_boundary:
            text += f"+{self.skip_events}ev+{self.skip_rows}rows"
        return text


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _version_message(version: Any) -> str:
    if isinstance(version, int) and version > OFFSET_VERSION:
        return (
            f"binlog offset version {version} was written by a newer mysqlcdc release; this release reads "
            f"versions {sorted(SUPPORTED_VERSIONS)}: upgrade mysqlcdc to resume from it"
        )
    return f"binlog offset version {version!r} is not a known version (known: {sorted(SUPPORTED_VERSIONS)})"

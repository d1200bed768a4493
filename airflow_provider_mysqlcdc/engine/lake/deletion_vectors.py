"""Delta deletion vectors: which rows of an immutable Parquet file are deleted, stored beside it.

The Delta protocol's format (``PROTOCOL.md``, "Deletion Vector Format"), which delta-rs, Polars and
delta-spark read: a file ``deletion_vector_<uuid>.bin`` in the table directory holds a version byte (1), then
per vector its size (big-endian int32), the vector (little-endian magic 1681511377, an int64 count of 32-bit
buckets, per bucket its uint32 high key and the portable serialization of a 32-bit Roaring bitmap) and the
CRC-32 of the vector (big-endian). An ``add`` action names its vector with ``storageType`` ``u`` (the file's
UUID in Z85), the ``offset`` of the size field, ``sizeInBytes`` and ``cardinality``.

One refresh writes one such file holding the new vector of every data file it deleted rows from (a vector is
written whole, never patched: a file's vector after a refresh is its previous one plus the rows deleted
since). Rows are numbered from 0 in file order; a file's rows fit bucket 0 (fewer than 2**32).
"""

from __future__ import annotations

import os
import posixpath
import struct
import uuid
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from pyroaring import BitMap

from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.lake.layout import filesystem

MAGIC = 1681511377
FILE_VERSION = 1
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_INDEX = {c: i for i, c in enumerate(_Z85)}


@dataclass(frozen=True)
class DeletionVector:
    """Where a data file's deleted rows are stored, as the Delta ``deletionVector`` descriptor names it."""

    file: str  # the vector file, relative to the Delta table directory
    offset: int
    size: int  # of the serialized vector, without its size field and checksum
    cardinality: int  # rows deleted

    @property
    def unique_id(self) -> str:
        return f"u{z85_of_file(self.file)}@{self.offset}"

    def to_delta(self) -> dict[str, Any]:
        """The descriptor in a Delta ``add``/``remove`` action."""
        return {"storageType": "u", "pathOrInlineDv": z85_of_file(self.file), "offset": self.offset,
                "sizeInBytes": self.size, "cardinality": self.cardinality}

    @classmethod
    def from_delta(cls, data: dict[str, Any]) -> DeletionVector:
        if data.get("storageType") != "u":
            raise CdcError(f"deletion vector storage type {data.get('storageType')!r} is not written by "
                           "mysqlcdc (only 'u', a vector file beside the data)")
        return cls(file_of_z85(str(data["pathOrInlineDv"])), int(data.get("offset") or 0),
                   int(data["sizeInBytes"]), int(data["cardinality"]))

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "offset": self.offset, "size": self.size, "cardinality": self.cardinality}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DeletionVector:
        return cls(str(data["file"]), int(data["offset"]), int(data["size"]), int(data["cardinality"]))


def encode(rows: BitMap) -> bytes:
    """A set of row numbers in the Delta vector format (one bucket: every row number is below 2**32)."""
    return struct.pack("<IqI", MAGIC, 1, 0) + rows.serialize()


def decode(body: bytes, where: str) -> BitMap:
    magic, buckets = struct.unpack_from("<Iq", body)
    if magic != MAGIC:
        raise CdcError(f"{where}: not a Delta deletion vector (magic {magic})")
    out = BitMap()
    at = 12
    for _ in range(buckets):
        (key,) = struct.unpack_from("<I", body, at)
        if key != 0:
            raise CdcError(f"{where}: a deletion vector with row numbers past 2**32 (bucket {key})")
        part = BitMap.deserialize(body[at + 4:])
        out |= part
        at += 4 + len(part.serialize())
    return out


def write_vectors(table_uri: str, vectors: Iterable[tuple[str, BitMap]]) -> dict[str, DeletionVector]:
    """One vector file holding each data file's (relative path) vector; their descriptors by data file."""
    name = f"deletion_vector_{uuid.uuid4()}.bin"
    blob = bytearray([FILE_VERSION])
    out: dict[str, DeletionVector] = {}
    for path, rows in vectors:
        body = encode(rows)
        offset = len(blob)
        blob += struct.pack(">i", len(body)) + body + struct.pack(">I", zlib.crc32(body))
        out[path] = DeletionVector(name, offset, len(body), len(rows))
    if out:
        fs, inner = filesystem(posixpath.join(table_uri, name))
        with fs.open_output_stream(inner) as sink:
            sink.write(bytes(blob))
    return out


def read_vector(table_uri: str, vector: DeletionVector) -> BitMap:
    """The deleted row numbers a descriptor names (the checksum checked)."""
    path = posixpath.join(table_uri, vector.file)
    fs, inner = filesystem(path)
    try:
        with fs.open_input_file(inner) as src:
            src.seek(vector.offset)
            head = src.read(4)
            (size,) = struct.unpack(">i", head)
            body = src.read(size)
            (crc,) = struct.unpack(">I", src.read(4))
    except FileNotFoundError:
        raise CdcError(f"the deletion vector file {path} is missing (deleted by hand, or by a GC with a "
                       "retention shorter than the mirror's use)") from None
    if size != vector.size or zlib.crc32(body) != crc:
        raise CdcError(f"{path} at offset {vector.offset}: the deletion vector is damaged (size or checksum)")
    rows = decode(body, path)
    if len(rows) != vector.cardinality:
        raise CdcError(f"{path} at offset {vector.offset}: {len(rows)} rows, the log says "
                       f"{vector.cardinality}")
    return rows


def z85_encode(data: bytes) -> str:
    out = []
    for i in range(0, len(data), 4):
        n = int.from_bytes(data[i:i + 4], "big")
        out.append("".join(_Z85[(n // 85 ** k) % 85] for k in range(4, -1, -1)))
    return "".join(out)


def z85_decode(text: str) -> bytes:
    out = bytearray()
    for i in range(0, len(text), 5):
        n = 0
        for c in text[i:i + 5]:
            n = n * 85 + _Z85_INDEX[c]
        out += n.to_bytes(4, "big")
    return bytes(out)


@lru_cache(maxsize=4096)  # every vector of a refresh names the same file: one encoding per file
def z85_of_file(name: str) -> str:
    """A vector file's name (``deletion_vector_<uuid>.bin``, no prefix directory) as its Z85 id."""
    base = os.path.basename(name)
    return z85_encode(uuid.UUID(base.removeprefix("deletion_vector_").removesuffix(".bin")).bytes)


@lru_cache(maxsize=4096)
def file_of_z85(text: str) -> str:
    """The vector file an id names (a random-prefix directory before the last 20 characters, if any)."""
    prefix, code = text[:-20], text[-20:]
    name = f"deletion_vector_{uuid.UUID(bytes=z85_decode(code))}.bin"
    return posixpath.join(prefix, name) if prefix else name

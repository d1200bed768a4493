"""A chunk's rows in deletion-vector mode: the row ranges of its files (``FilePart``), minus the rows the
deletion vectors name; and where each key's live row sits (file, row number), to delete it by vector.

Locating keys must not read every touched file whole per batch: mirror files never change once written, so
their key columns are kept in a process-wide cache bounded by bytes (``KEY_CACHE_BYTES``; least recently
used first out). A batch then reads only the key columns of files it meets for the first time.
"""

from __future__ import annotations

import posixpath
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyroaring import BitMap

from airflow_provider_mysqlcdc.engine.lake.file_types import engine_types
from airflow_provider_mysqlcdc.engine.lake.layout import filesystem
from airflow_provider_mysqlcdc.engine.lake.mirror_apply import _join_keys
from airflow_provider_mysqlcdc.engine.lake.mirror_manifest import FilePart

KEY_CACHE_BYTES = 256 * 1024 * 1024  # the key columns of mirror files kept in memory, per process
_ROW = "__mysqlcdc_row"
_PART = "__mysqlcdc_part"


@dataclass
class KeyCache:
    """Key columns of immutable mirror files, least recently used out past ``budget`` bytes."""

    budget: int = KEY_CACHE_BYTES
    reads: int = 0  # files whose key columns were read (misses), for tests and the bench

    def __post_init__(self) -> None:
        self._entries: OrderedDict[tuple[str, tuple[str, ...]], pa.Table] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()  # tables refresh in a thread pool

    def keys(self, path: str, names: Sequence[str]) -> pa.Table:
        key = (path, tuple(names))
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                return found
        fs, inner = filesystem(path)
        table = engine_types(pq.read_table(inner, filesystem=fs, columns=list(names)))
        with self._lock:
            self.reads += 1
            if table.nbytes <= self.budget:
                self._entries[key] = table
                self._bytes += table.nbytes
                while self._bytes > self.budget:
                    _, old = self._entries.popitem(last=False)
                    self._bytes -= old.nbytes
        return table


KEYS = KeyCache()


def live_rows(base: str, parts: Sequence[FilePart], deleted: dict[str, BitMap], schema: pa.Schema,
              read: Callable[[list[str], pa.Schema], pa.Table]) -> pa.Table:
    """The chunk's live rows in ``schema``: each part's range minus its file's deleted rows. ``read(paths,
    schema)`` reads whole files (``mirror_files.read_files``); overlay files are small, base files the
    chunk's own."""
    tables = []
    for part in parts:
        data = read([posixpath.join(base, part.file)], schema).slice(part.start, part.end - part.start)
        gone = deleted.get(part.file)
        if gone:
            keep = _keep_mask(part, gone)
            if keep is not None:
                data = data.filter(pa.array(keep))
        tables.append(data)
    return pa.concat_tables(tables) if tables else schema.empty_table()


def locate(base: str, parts: Sequence[FilePart], deleted: dict[str, BitMap], keys: pa.Table,
           primary_key: Sequence[str]) -> dict[str, list[int]]:
    """The live rows of the chunk whose primary key is one of ``keys``', as row numbers per file."""
    pk = list(primary_key)
    pieces = []
    for i, part in enumerate(parts):
        data = KEYS.keys(posixpath.join(base, part.file), pk).slice(part.start, part.end - part.start)
        rows = np.arange(part.start, part.end, dtype=np.int64)
        gone = deleted.get(part.file)
        if gone:
            keep = _keep_mask(part, gone)
            if keep is not None:
                data, rows = data.filter(pa.array(keep)), rows[keep]
        pieces.append(_join_keys(data, pk).append_column(_ROW, pa.array(rows))
                      .append_column(_PART, pa.array(np.full(len(rows), i, dtype=np.int32))))
    if not pieces or keys.num_rows == 0:
        return {}
    live = pa.concat_tables(pieces, promote_options="permissive")
    wanted = _join_keys(keys, pk)
    live = live.cast(pa.schema([*(wanted.schema.field(n) for n in pk),
                                live.schema.field(_ROW), live.schema.field(_PART)]))
    hit = live.join(wanted, keys=pk, join_type="left semi", use_threads=False)
    out: dict[str, list[int]] = {}
    part_ids = hit.column(_PART).to_numpy()
    row_ids = hit.column(_ROW).to_numpy()
    for i in np.unique(part_ids):
        out.setdefault(parts[int(i)].file, []).extend(row_ids[part_ids == i].tolist())
    return out


def _keep_mask(part: FilePart, gone: BitMap) -> np.ndarray | None:
    inside = gone & BitMap(range(part.start, part.end))
    if not inside:
        return None
    keep = np.ones(part.end - part.start, dtype=bool)
    keep[np.fromiter(inside, dtype=np.int64, count=len(inside)) - part.start] = False
    return keep


def deleted_in(part: FilePart, gone: BitMap | None) -> int:
    """How many of the part's rows are deleted."""
    if not gone:
        return 0
    return gone.intersection_cardinality(BitMap(range(part.start, part.end)))

"""The mirror manifest's stored form across releases: a deletion-vector manifest names its files by position
(``format_version`` 3), which a release that reads version 2 (files by path) must refuse rather than read a
position as a path; this release reads both, and a plain manifest stays version 1. No server."""

from __future__ import annotations

import json

import pytest

from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.lake.deletion_vectors import DeletionVector
from airflow_provider_mysqlcdc.engine.lake.mirror_manifest import FilePart, MirrorChunkEntry, MirrorManifest
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition


def _manifest(parts: bool) -> MirrorManifest:
    base, overlay = "mirror/chunk=0/base.parquet", "mirror/overlay=1/part.parquet"
    hw0, hw1 = BinlogPosition("binlog.000001", 4), BinlogPosition("binlog.000001", 8)
    first = (FilePart(base, 0, 4), FilePart(overlay, 0, 1)) if parts else ()
    second = (FilePart(overlay, 1, 2),) if parts else ()
    chunks = (
        MirrorChunkEntry(0, "v1", (base, overlay) if parts else (base,), 5, hw0, "s1", 1, first),
        MirrorChunkEntry(1, "v1", (overlay,) if parts else ("mirror/chunk=1/base.parquet",), 1, hw1, "s1", 1,
                         second),
    )
    vectors = {base: DeletionVector("mirror/deletion_vector_1.bin", 1, 34, 1)} if parts else {}
    return MirrorManifest("shop.items", 1, ("id",), ("id",), ("id", "v"), chunks, 1,
                          BinlogPosition("binlog.000001", 100), True, "2026-11-28T00:00:00+00:00",
                          deletion_vectors=vectors)


def _paths_form(data: dict) -> dict:
    """The same manifest as the release before wrote it: version 2, files and parts by path."""
    files = data["files"]
    old = json.loads(json.dumps(data))
    old["format_version"] = 2
    for chunk in old["chunks"]:
        chunk["files"] = [files[i] for i in chunk["files"]]
        chunk["parts"] = [[files[p[0]], p[1], p[2]] for p in chunk.get("parts", [])]
    return old


def test_a_vector_manifest_names_files_by_position_as_version_3_and_reads_back():
    manifest = _manifest(parts=True)
    data = manifest.to_dict()
    assert data["format_version"] == 3
    assert all(isinstance(f, int) for c in data["chunks"] for f in c["files"])
    assert MirrorManifest.from_dict(json.loads(json.dumps(data))).chunks == manifest.chunks


def test_the_previous_releases_paths_still_read():
    manifest = _manifest(parts=True)
    old = MirrorManifest.from_dict(_paths_form(manifest.to_dict()))
    assert old.chunks == manifest.chunks and old.files == manifest.files


def test_a_plain_manifest_stays_version_1_and_a_newer_one_is_refused():
    assert _manifest(parts=False).to_dict()["format_version"] == 1
    newer = {**_manifest(parts=True).to_dict(), "format_version": 4}
    with pytest.raises(CdcError, match="format version 4 is not supported.*upgrade the provider"):
        MirrorManifest.from_dict(newer)

"""Where output lives, and how it is committed so readers never see a torn or duplicated write.

Plain Parquet has no transactions, so data goes into fresh, versioned directories first and becomes visible
only when a small manifest names it (written last, atomically: temp file + rename):

    <root>/<database>/<table>/
      snapshot/generation=<g>/chunk=<id>/version=<v>/part-*.parquet   one directory per committed chunk read
      changelog/batch=<batch id>/part-*.parquet                        one directory per stream micro-batch
      changelog/_committed/batch=<batch id>.json                       marker: that batch is complete
      changelog/_delta_log/                                            the changelog as a Delta table
                                                                       (``delta_changelog``)
      changelog-json/batch=<batch id>/part-*.json                      optional Flink changelog-json
      mirror/chunk=<id>/version=<v>/part-*.parquet                     materialized current state, per chunk
      mirror/_manifest.json                                            the mirror files readers should read
      mirror/_delta_log/                                               the mirror as a Delta table
                                                                       (``delta_mirror``)
      _snapshot_manifest.json                                          committed chunk versions (export of the
                                                                       chunk store, for readers without it)

The chunk store is the source of truth for snapshot versions (its row and the manifest are written in one
step); a rerun writes a new version directory and switches the manifest, so a killed rerun leaves only an
unreferenced directory behind. Stream batches are written per batch id: a replayed batch overwrites the same
directory with the same records, and its marker, so nothing is duplicated.

Paths are strings understood by ``pyarrow.fs.FileSystem.from_uri`` (local paths, file://, s3://, gs://,
hdfs://, abfs:// ...). Identifiers are hex-escaped into path segments with ``@`` (not ``%``: delta-rs decodes
a ``%xx`` in a table's own path, so a percent-encoded directory could not hold a Delta table).
"""
from __future__ import annotations

import json
import posixpath
import uuid
from typing import Any
from urllib.parse import quote

import pyarrow.fs as pafs

from airflow_provider_mysqlcdc.engine.model.tables import TableId

LAYOUT_VERSION = 1
SNAPSHOT, CHANGELOG, CHANGELOG_JSON, MIRROR = "snapshot", "changelog", "changelog-json", "mirror"
SNAPSHOT_MANIFEST = "_snapshot_manifest.json"
MIRROR_MANIFEST = "_manifest.json"
COMMITTED = "_committed"
STREAM_PROGRESS = "_mysqlcdc_stream_progress.json"  # in the output root: the latest committed batch
STREAM_OWNER = "_mysqlcdc_stream.json"  # in the output root: the stream whose changelog it holds, its startup


def segment(name: str) -> str:
    """An identifier as one safe path segment: ``shop`` stays ``shop``, ``a b/c`` becomes ``a@20b@2Fc`` (each
    UTF-8 byte outside ``A-Z a-z 0-9 _ . - ~`` as ``@`` and two hex digits; ``@`` itself is ``@40``)."""
    encoded = quote(name, safe="").replace("%", "@")
    return encoded.replace(".", "@2E") if encoded in (".", "..") else encoded


def table_dir(root: str, table: TableId) -> str:
    return posixpath.join(root.rstrip("/"), segment(table.database), segment(table.table))


def new_version() -> str:
    """A version id that sorts by creation and never repeats (a retry never reuses a directory)."""
    import time

    return f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"


def snapshot_dir(root: str, table: TableId, generation: int, chunk_id: int, version: str) -> str:
    return posixpath.join(
        table_dir(root, table), SNAPSHOT, f"generation={generation}", f"chunk={chunk_id}",
        f"version={version}",
    )


def changelog_dir(root: str, table: TableId, batch_id: int, kind: str = CHANGELOG) -> str:
    return posixpath.join(table_dir(root, table), kind, f"batch={batch_id:012d}")


def changelog_marker(root: str, table: TableId, batch_id: int) -> str:
    return posixpath.join(table_dir(root, table), CHANGELOG, COMMITTED, f"batch={batch_id:012d}.json")


def stream_progress_path(root: str) -> str:
    return posixpath.join(root.rstrip("/"), STREAM_PROGRESS)


def stream_owner_path(root: str) -> str:
    return posixpath.join(root.rstrip("/"), STREAM_OWNER)


def mirror_dir(root: str, table: TableId, chunk_id: int, version: str) -> str:
    return posixpath.join(table_dir(root, table), MIRROR, f"chunk={chunk_id}", f"version={version}")


def filesystem(path: str, storage_options: dict[str, str] | None = None) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem for a path or URI, and the path inside it. ``storage_options``: delta-rs's
    settings of a reader that does not use the environment (for ``s3://``: the ``AWS_*`` keys); without them,
    or for other schemes, pyarrow takes its settings from the environment."""
    if "://" not in path:
        return pafs.LocalFileSystem(), path
    if storage_options and path.startswith(("s3://", "s3a://")):
        return _s3(storage_options), path.split("://", 1)[1]
    return pafs.FileSystem.from_uri(path)


def _s3(options: dict[str, str]) -> pafs.S3FileSystem:
    """An S3 filesystem from delta-rs-style storage options (keys as delta-rs spells them, any case)."""
    o = {k.upper(): v for k, v in options.items()}
    endpoint = o.get("AWS_ENDPOINT_URL") or o.get("AWS_ENDPOINT")
    scheme = "https"
    if endpoint and "://" in endpoint:
        scheme, endpoint = endpoint.split("://", 1)
    return pafs.S3FileSystem(
        access_key=o.get("AWS_ACCESS_KEY_ID"), secret_key=o.get("AWS_SECRET_ACCESS_KEY"),
        session_token=o.get("AWS_SESSION_TOKEN"), region=o.get("AWS_REGION") or o.get("AWS_DEFAULT_REGION"),
        endpoint_override=endpoint, scheme=scheme,
    )


def write_json_atomic(path: str, data: dict[str, Any], *, item_lines: bool = False) -> bytes:
    """Write then rename, so a reader sees the old or the new file, never half of one.

    ``item_lines``: one line per top-level key and per item of a top-level list or dict, each encoded by
    json's C encoder (``indent`` makes json use its pure-Python encoder: ~150 ms for a mirror manifest of
    300 chunks with deletion vectors, every batch); still one chunk a line for people reading it."""
    fs, inner = filesystem(path)
    fs.create_dir(posixpath.dirname(inner), recursive=True)
    tmp = f"{inner}.tmp-{uuid.uuid4().hex[:8]}"
    full = {"layout_version": LAYOUT_VERSION, **data}
    text = _item_lines(full) if item_lines else json.dumps(full, indent=1, default=str)
    raw = text.encode()
    with fs.open_output_stream(tmp) as out:
        out.write(raw)
    fs.move(tmp, inner)
    return raw


def _item_lines(data: dict[str, Any]) -> str:
    # one encoder (json.dumps with an argument makes one a call), no spaces: a manifest line holds a chunk
    dump = json.JSONEncoder(default=str, separators=(",", ":")).encode

    out = []
    for key, value in data.items():
        if isinstance(value, list) and value:
            items = ",\n  ".join(dump(v) for v in value)
            out.append(f" {dump(key)}: [\n  {items}\n ]")
        elif isinstance(value, dict) and value:
            items = ",\n  ".join(f"{dump(k)}: {dump(v)}" for k, v in value.items())
            out.append(f" {dump(key)}: {{\n  {items}\n }}")
        else:
            out.append(f" {dump(key)}: {dump(value)}")
    return "{\n" + ",\n".join(out) + "\n}"


def ensure_writable(root: str, what: str = "output") -> None:
    """Fail before any work when ``root`` cannot take files (a path under a file, a read-only mount, missing
    object store credentials), instead of failing every task after it has read its chunk."""
    from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError

    fs, inner = filesystem(root)
    probe = posixpath.join(inner.rstrip("/"), f"_mysqlcdc_write_probe_{uuid.uuid4().hex}")
    try:
        fs.create_dir(inner, recursive=True)
        with fs.open_output_stream(probe) as out:
            out.write(b"")
        fs.delete_file(probe)
    except (OSError, ValueError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigurationError(
            f"the {what} {root} is not writable ({reason}): give a path or URI this job (and every Spark "
            "executor) can create files under"
        ) from None


def read_json(path: str, storage_options: dict[str, str] | None = None) -> dict[str, Any] | None:
    raw = read_bytes(path, storage_options)
    return None if raw is None else parse_json(path, raw)


def read_bytes(path: str, storage_options: dict[str, str] | None = None) -> bytes | None:
    """A file's bytes; None when it does not exist."""
    fs, inner = filesystem(path, storage_options)
    try:
        with fs.open_input_stream(inner) as src:
            return bytes(src.read())
    except FileNotFoundError:
        return None


def parse_json(path: str, raw: bytes) -> dict[str, Any]:
    """A JSON file of the layout (``raw``: its bytes, read from ``path``), its layout version checked."""
    data = json.loads(raw.decode())
    version = data.get("layout_version")
    if version != LAYOUT_VERSION:
        from airflow_provider_mysqlcdc.engine.common.errors import CdcError

        raise CdcError(
            f"{path} was written with output layout version {version}, this release reads {LAYOUT_VERSION}: "
            "upgrade the provider"
        )
    return data


def delete_dir(path: str) -> None:
    fs, inner = filesystem(path)
    try:
        fs.delete_dir(inner)
    except FileNotFoundError:
        pass

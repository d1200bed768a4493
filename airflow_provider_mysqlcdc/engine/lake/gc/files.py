"""The files garbage collection looks at: listings with sizes and ages, the garbage found, and its deletion.

Directories are removed only where no writer can be creating something inside them at that moment: a version
or batch directory that is garbage as a whole (writers only ever write into fresh directories), never a parent
that a writer might be creating a new version under.
"""

from __future__ import annotations

import logging
import os
import posixpath
from dataclasses import dataclass

import pyarrow.fs as pafs

from airflow_provider_mysqlcdc.engine.lake.layout import filesystem

log = logging.getLogger(__name__)

# kinds of garbage, as the report names them
SNAPSHOT = "snapshot"  # superseded chunk versions, old plan generations, attempts that never committed
CHANGELOG = "changelog"  # part files of killed attempts that no marker and no Delta commit names
CHANGELOG_JSON = "changelog-json"  # the same, of the Flink changelog-json form
MIRROR = "mirror"  # mirror files the Delta table removed longer ago than the retention (VACUUM)
DELTA_LOG = "delta-log"  # expired Delta log entries (delta-rs ``cleanup_metadata``)
KINDS = (SNAPSHOT, CHANGELOG, CHANGELOG_JSON, MIRROR, DELTA_LOG)


@dataclass(frozen=True)
class Listed:
    """One file under a directory: its full path (or URI), size and modification time (epoch seconds)."""

    path: str
    size: int
    mtime: float


@dataclass(frozen=True)
class Garbage:
    """Something to delete: one file, or a directory as a whole (``is_dir``), with the bytes it holds."""

    table: str
    kind: str
    path: str
    files: int
    bytes: int
    is_dir: bool = False
    prune_parents: bool = False  # its chunk and generation directories go too once empty (old generations)


def list_files(directory: str) -> list[Listed]:
    """Every file under ``directory`` (recursively); [] when it does not exist."""
    fs, inner = filesystem(directory)
    prefix = directory[: len(directory) - len(inner)] if directory.endswith(inner) else ""
    out = []
    for info in fs.get_file_info(pafs.FileSelector(inner, recursive=True, allow_not_found=True)):
        if info.type == pafs.FileType.File:
            mtime = info.mtime.timestamp() if info.mtime is not None else 0.0
            out.append(Listed(prefix + info.path, int(info.size or 0), mtime))
    return out


def subdirs(directory: str) -> list[tuple[str, str]]:
    """The directories right under ``directory``: (name, full path); [] when it does not exist."""
    fs, inner = filesystem(directory)
    prefix = directory[: len(directory) - len(inner)] if directory.endswith(inner) else ""
    return sorted(
        (info.base_name, prefix + info.path)
        for info in fs.get_file_info(pafs.FileSelector(inner, allow_not_found=True))
        if info.type == pafs.FileType.Directory
    )


def newest_mtime(directory: str) -> tuple[float, list[Listed]]:
    """The latest modification time of a directory and everything in it (its age as an attempt), and its
    files. An empty directory counts from its own time."""
    files = list_files(directory)
    fs, inner = filesystem(directory)
    own = fs.get_file_info(inner).mtime
    times = [f.mtime for f in files] + ([own.timestamp()] if own is not None else [])
    return (max(times) if times else 0.0), files


def delete(item: Garbage) -> None:
    """Delete one piece of garbage; something already gone is no error (another GC, a replay got there)."""
    fs, inner = filesystem(item.path)
    try:
        if item.is_dir:
            fs.delete_dir(inner)
        else:
            fs.delete_file(inner)
    except FileNotFoundError:
        pass
    if not item.is_dir:
        remove_if_empty(posixpath.dirname(item.path))


def remove_if_empty(directory: str) -> None:
    """Remove a directory that is empty now (local file systems only: elsewhere directories are prefixes and
    vanish with their last file). ``rmdir`` refuses a directory that is not empty, so a writer that just put
    a file into it keeps it."""
    local = directory.removeprefix("file://")
    if "://" in local:
        return
    try:
        os.rmdir(local)
    except OSError:
        pass

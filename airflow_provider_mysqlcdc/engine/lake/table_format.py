"""The table format behind one seam: what the lake's commit protocols need of it (Delta Lake today).

Changelog: the batch commit (``changelog_commit``), ``status`` and garbage collection
(``gc/changelog_garbage``) see a table's changelog only as a ``ChangelogTable``: which batch it holds last,
which files it references, adopting the batches an earlier output root committed before the table existed,
and appending one batch's files idempotently per batch id (a replayed batch id commits nothing).
``changelog_table`` is the one place that picks the implementation: ``delta_changelog.DeltaChangelog`` (the
Delta application transaction ``("mysqlcdc-changelog", batch id)`` makes the append idempotent).

Mirror: the refresh (``mirror_refresh``) sees a table's mirror only as a ``MirrorTable``, made to hold exactly
the files of the mirror manifest after each refresh (``mirror_table``: ``delta_mirror.DeltaMirror``).

The seam covers the commits so far. Reading the mirror with time travel (``mirror_reader``), the mirror's
garbage collection (``gc/delta_garbage``) and the Spark reader (``spark/lake_frames``) still name Delta
directly; docs/development.md says what moving them behind this seam takes.
"""

from __future__ import annotations

from typing import Protocol

import pyarrow as pa

from airflow_provider_mysqlcdc.engine.lake.delta_changelog import DeltaChangelog
from airflow_provider_mysqlcdc.engine.lake.delta_mirror import DeltaMirror
from airflow_provider_mysqlcdc.engine.lake.mirror_manifest import MirrorManifest
from airflow_provider_mysqlcdc.engine.model.tables import TableId


class ChangelogTable(Protocol):
    """One table's changelog as a table of the lake's table format."""

    def last_batch(self) -> int | None:
        """The id of the last batch the table holds (None: no table, or no batch yet)."""
        ...

    def holds(self, batch_id: int) -> bool:
        """Whether the table holds batch ``batch_id`` already (an earlier attempt committed it)."""
        ...

    def adopt(self, before: int) -> bool:
        """Create the table from the batches before ``before`` the markers name, when there is none yet (an
        output root written before the changelog was such a table). False when there is nothing to do."""
        ...

    def files(self) -> set[str]:
        """The files the table's current version references, relative to the changelog directory
        (``batch=<id>/<name>``; empty: no table yet). Garbage collection never deletes them."""
        ...

    def commit_batch(self, batch_id: int, names: list[str], end_offset: dict | None = None) -> bool:
        """Append a batch's files (base names in its batch directory) in one commit tagged with the batch id
        and its end offset, unless the table holds the batch already. Returns whether a commit was made."""
        ...


def changelog_table(root: str, table: TableId,
                    storage_options: dict[str, str] | None = None) -> ChangelogTable:
    """The changelog of ``table`` in the output root's table format (Delta Lake)."""
    return DeltaChangelog(root, table, storage_options)


class MirrorTable(Protocol):
    """One table's mirror as a table of the lake's table format, kept equal to the mirror manifest."""

    def sync(self, manifest: MirrorManifest, data_schema: pa.Schema | None = None) -> bool:
        """Make the table hold exactly ``manifest``'s files in ``data_schema``'s columns (the mirror's, in
        engine types; None: the new files'), tagged with the manifest's position. False when it already
        does."""
        ...


def mirror_table(root: str, table: TableId, storage_options: dict[str, str] | None = None) -> MirrorTable:
    """The mirror of ``table`` in the output root's table format (Delta Lake)."""
    return DeltaMirror(root, table, storage_options)

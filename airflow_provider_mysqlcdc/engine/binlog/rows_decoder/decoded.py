"""The decoded rows of one event, column by column, so a later step can build Arrow arrays without dicts."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DecodedRows:
    """Every row image of one rows event, normalised: ``images[k][c]`` is the list of column ``c``'s values
    in image half ``halves[k]`` ("values" for WRITE/DELETE; "before_values" and "after_values" for UPDATE,
    mysql-replication's row keys), one value per row, ``row_count`` rows."""

    column_names: tuple[str, ...]
    row_count: int
    halves: tuple[str, ...]
    images: tuple[list[list[Any]], ...]

    def image(self, half: str) -> list[list[Any]]:
        """The columns of one half by mysql-replication's key."""
        return self.images[self.halves.index(half)]

    def as_dicts(self) -> dict[str, list[dict[str, Any]]]:
        """Per half, the row dicts the Python path makes: ``normalize(row[half], row[half's none_sources])``
        for each row (for differential tests and callers that still want dicts)."""
        names = self.column_names
        return {
            half: ([dict(zip(names, row)) for row in zip(*columns)] if columns
                   else [{} for _ in range(self.row_count)])
            for half, columns in zip(self.halves, self.images)
        }

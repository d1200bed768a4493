"""Small text helpers for settings given as text (command lines, Spark options, operator arguments)."""
from __future__ import annotations

from collections.abc import Iterable


def split_commas(value: str | Iterable[str] | None) -> list[str]:
    """``"a, b"``, ``["a", "b,c"]`` or nothing -> ``["a", "b", "c"]``: every item split at its commas, each
    part stripped, empty parts dropped (a trailing comma or an empty repeated option is fine). Lists of table
    names split with ``engine/model/table_names.split_table_list``, which keeps commas inside backticks."""
    if not value:
        return []
    items = [value] if isinstance(value, str) else value
    return [part.strip() for item in items for part in str(item).split(",") if part.strip()]

"""How status values read in text: a missing value, the lag, byte amounts, the mirror's consistency."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_provider_mysqlcdc.engine.status.table_status import TableStatus


def value_text(value: Any) -> str:
    return "-" if value is None else str(value)


def lag_text(t: TableStatus) -> str:
    """Bytes/files behind the server; in parentheses when counted from the smallest HW (no stream yet)."""
    if t.lag_files is None:
        return "-"
    amount = "?" if t.lag_bytes is None else bytes_text(t.lag_bytes)
    text = f"{amount}/{t.lag_files} file{'s' if t.lag_files > 1 else ''}" if t.lag_files else amount
    return text if t.lag_from == "stream" else f"({text})"


def bytes_text(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def consistency_text(t: TableStatus) -> str:
    if t.consistent_from is None:
        return "no"
    if t.consistent:
        return f"yes, as of {t.consistent_as_of}"
    return f"from {t.consistent_from}"

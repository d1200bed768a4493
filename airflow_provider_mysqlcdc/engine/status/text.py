"""How status values read in text: a missing value, the lag, byte amounts, the mirror's consistency."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_provider_mysqlcdc.engine.status.progress import SnapshotProgress
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


def duration_text(seconds: float) -> str:
    """``45 s``, ``12 min``, ``3 h 05 min``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    hours, minutes = divmod(int(seconds // 60), 60)
    return f"{hours} h {minutes:02d} min"


def progress_text(p: SnapshotProgress) -> str:
    """``12/16 chunks (75%), 96,310 of ~128,000 rows, 4,120 rows/s, ~1 min left; 1 running, 2 failed``."""
    share = f" ({100 * p.committed / p.chunks:.0f}%)" if p.chunks else ""
    text = f"{p.committed}/{p.chunks} chunks{share}, {p.rows:,} of ~{p.rows_estimated:,} rows"
    if p.rows_per_second is not None:
        text += f", {p.rows_per_second:,.0f} rows/s"
    if p.eta_s is not None:
        text += f", ~{duration_text(p.eta_s)} left"
    extra = [f"{n} {what}" for n, what in ((p.running, "running"), (p.failed, "failed")) if n]
    return text + ("; " + ", ".join(extra) if extra else "")

"""How status values read in text: a missing value, the lag, byte amounts, the mirror's consistency."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_provider_mysqlcdc.engine.status.progress import SnapshotProgress
    from airflow_provider_mysqlcdc.engine.status.stream_health import BinlogHeadroom, StreamHealth
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


def lag_seconds_text(seconds: float | None) -> str:
    """The lag in seconds as it reads (``0 s``, ``12 min``), or ``unknown``."""
    return "unknown" if seconds is None else duration_text(seconds)


def headroom_text(h: BinlogHeadroom | None) -> str:
    """``29 d 23 h (mysql-bin.000012, purged at ...)``, ``at least 30 d (...)``, ``unlimited (...)``."""
    if h is None:
        return "unknown"
    if h.seconds is None:
        return f"{'unlimited' if h.note and 'no binlog by age' in h.note else 'unknown'} ({h.file}: {h.note})"
    when = f", purged at {h.purge_at:%Y-%m-%d %H:%M:%S} UTC" if h.purge_at is not None else ""
    return f"{'at least ' if h.at_least else ''}{duration_text(h.seconds)} ({h.file}{when})"


def health_text(h: StreamHealth) -> str:
    """One line: the stream's lag in seconds (or where a new stream starts) and the binlog headroom."""
    if h.needed_by == "stream":
        lag = f"stream lag {lag_seconds_text(h.lag_seconds)}"
        if h.last_event_at is not None:
            lag += f" (last change read committed {h.last_event_at:%Y-%m-%d %H:%M:%S} UTC)"
    else:
        lag = f"stream not started: it starts at the smallest HW {h.needed}"
    return f"{lag}; binlog headroom {headroom_text(h.headroom)}" + "".join(f"; {n}" for n in h.notes)


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
    """``45 s``, ``12 min``, ``3 h 05 min``, ``2 d 04 h``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    hours, minutes = divmod(int(seconds // 60), 60)
    if hours >= 48:
        return f"{hours // 24} d {hours % 24:02d} h"
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

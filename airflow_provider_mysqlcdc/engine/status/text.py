"""How status values read in text: a missing value, the lag, byte amounts, the mirror's consistency, what
verify found."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_provider_mysqlcdc.engine.status.verification import OPEN, verify_command

if TYPE_CHECKING:
    from airflow_provider_mysqlcdc.engine.status.progress import SnapshotProgress
    from airflow_provider_mysqlcdc.engine.status.stream_health import BinlogHeadroom, StreamHealth
    from airflow_provider_mysqlcdc.engine.status.table_status import TableStatus
    from airflow_provider_mysqlcdc.engine.status.verification import ChunkMismatch, VerificationStatus


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


def verification_text(v: VerificationStatus | None) -> str:
    """``verified 2026-11-28 10:40 UTC at mysql-bin.000012:4567 (verify 3f2a...): 31 chunks match, 1 differs
    (chunk 7)``; ``never verified``."""
    if v is None:
        return "never verified"
    when = "?" if v.verified_at is None else f"{v.verified_at:%Y-%m-%d %H:%M} UTC"
    parts = [f"{v.matched} chunk{'s' if v.matched != 1 else ''} match"]
    if v.differing:
        ids = ", ".join(str(m.chunk_id) for m in v.open_mismatches)
        parts.append(f"{v.differing} differ{'s' if v.differing == 1 else ''} "
                     f"(chunk{'s' if v.differing > 1 else ''} {ids})")
    if v.superseded:
        ids = ", ".join(str(m.chunk_id) for m in v.superseded_mismatches)
        were = "was" if v.superseded == 1 else "were"
        parts.append(f"{v.superseded} differed but {were} snapshotted again since "
                     f"(chunk{'s' if v.superseded > 1 else ''} {ids}): verify again")
    parts.extend(f"{n} {what}" for n, what in ((v.repaired, "repaired"), (v.unverified, "unverified"),
                                               (v.never, "not verified yet")) if n)
    return f"verified {when} at {v.position or '?'} (verify {v.verify_id}, generation {v.generation}): " + (
        ", ".join(parts))


def mismatch_text(m: ChunkMismatch) -> str:
    """``chunk 7 (id in [100, 200)): source 100 rows, lake 99 rows at mysql-bin.000012:4567: why``."""
    key = f" ({m.key_range})" if m.key_range else ""
    counts = f"source {value_text(m.source_rows)} rows, lake {value_text(m.lake_rows)} rows"
    state = "" if m.state == OPEN else "; snapshotted again since: verify again"
    rerun = "; a rerun of it is running" if m.rerun_pending else ""
    return f"chunk {m.chunk_id}{key}: {counts} at {m.position or '?'}{state}{rerun}" + (
        f": {m.why}" if m.why else "")


def verification_lines(t: TableStatus) -> list[str]:
    """What verify found for one table (nothing if it was never verified): a line, then each mismatch and
    the command that repairs the open ones (or verifies the superseded ones again)."""
    v = t.verification
    if v is None:
        return []
    lines = [f"{t.table}: {verification_text(v)}"]
    lines.extend(f"  {mismatch_text(m)}" for m in v.mismatches)
    if v.open_mismatches:
        lines.append(f"  repair: {verify_command(t.table, [m.chunk_id for m in v.open_mismatches])}")
    if v.superseded_mismatches:
        ids = [m.chunk_id for m in v.superseded_mismatches]
        lines.append(f"  verify again: {verify_command(t.table, ids, repair=False)}")
    return lines

"""How long garbage is kept: the retention setting, and the grace no setting can go below.

A file stops being needed at one moment (a newer chunk version committed, a Delta ``remove``, an attempt that
never committed stopped writing); it is deleted once that moment lies longer ago than the retention. Readers
that opened an older state (a Delta version, a manifest they loaded) have that long to finish. The minimum
grace protects them from a retention set too low: nothing younger than it is ever deleted.

Superseded mirror files are most of the garbage a continuous stream leaves (every batch supersedes the chunk
files it rewrites, or a compaction's base and overlays), and only two kinds of reader need them: Delta time
travel, which reaches back ``delta.logRetentionDuration`` (10 minutes), and a query that opened an older
version before a batch superseded it. So they have a retention of their own (``mirror``, the stream's and
``mysqlcdc gc``'s default ``1h`` while the retention itself is left at its default; a retention that is set
applies to them too, as before), never below the table's log retention plus the grace: a version time travel
can still open keeps its files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError

DEFAULT_RETENTION = "3d"
MIN_GRACE = timedelta(minutes=15)  # a reader that loaded a state just before it was superseded has this long
MAX_RETENTION = timedelta(days=3650)
DEFAULT_MIRROR_RETENTION = "1h"  # superseded mirror files, with the retention at its default (module doc)
DEFAULT_INTERVAL_MINUTES = 60.0  # the stream runs GC after a batch at most this often (0: never)
MAX_INTERVAL_MINUTES = 7 * 24 * 60.0

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$", re.IGNORECASE)


def parse_duration(value: str | timedelta, setting: str = "retention") -> timedelta:
    """``72h``, ``3d``, ``30m``, ``90s``, ``1w`` as a duration; anything else (no unit, negative, zero, over
    ten years) is refused with an error naming ``setting``."""
    if isinstance(value, timedelta):
        duration = value
    else:
        match = _DURATION.match(str(value))
        if not match:
            raise ConfigurationError(
                f"{setting} {str(value)!r} is no duration: give a number and a unit (s, m, h, d or w), e.g. "
                f"{DEFAULT_RETENTION}, 72h or 30m"
            )
        duration = timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2).lower()])
    if duration <= timedelta(0) or duration > MAX_RETENTION:
        raise ConfigurationError(
            f"{setting} {value}: give a duration above zero and at most {MAX_RETENTION.days} days, e.g. "
            f"{DEFAULT_RETENTION}"
        )
    return duration


def duration_text(duration: timedelta) -> str:
    """The shortest exact spelling: ``3d``, ``72h`` stays ``3d``, ``90m``, ``45s``."""
    seconds = duration.total_seconds()
    for unit in ("w", "d", "h", "m"):
        if seconds >= _UNITS[unit] and seconds % _UNITS[unit] == 0:
            return f"{int(seconds // _UNITS[unit])}{unit}"
    return f"{seconds:g}s"


@dataclass(frozen=True)
class Retention:
    """The retention, and the grace below which it never goes (``min_grace``: lowered by tests only);
    ``mirror``: superseded mirror files' own retention (None: the retention's, with no log floor)."""

    retention: timedelta = timedelta(days=3)
    min_grace: timedelta = MIN_GRACE
    mirror: timedelta | None = None

    @classmethod
    def parse(cls, value: str | timedelta | None, min_grace: timedelta = MIN_GRACE) -> Retention:
        return cls(parse_duration(value if value is not None else DEFAULT_RETENTION), min_grace)

    @classmethod
    def settings(cls, retention: str | None, mirror: str | None = None,
                 min_grace: timedelta = MIN_GRACE) -> Retention:
        """From the user's settings (``--gc-retention``, ``--gc-mirror-retention``; None: not given): mirror
        files keep ``mirror`` if given, else ``1h`` while the retention is the default, else the retention."""
        general = parse_duration(retention if retention is not None else DEFAULT_RETENTION)
        if mirror is not None:
            mirror_keep = parse_duration(mirror, "mirror retention")
        elif general == parse_duration(DEFAULT_RETENTION):
            mirror_keep = parse_duration(DEFAULT_MIRROR_RETENTION)
        else:
            mirror_keep = general
        return cls(general, min_grace, mirror_keep)

    @property
    def keep(self) -> timedelta:
        """How long anything is kept after it stopped being needed: max(retention, grace)."""
        return max(self.retention, self.min_grace)

    def cutoff(self, now: datetime) -> float:
        """Seconds since the epoch: what stopped being needed before this moment is garbage."""
        return (now - self.keep).timestamp()

    def mirror_cutoff(self, now: datetime, log_retention: timedelta | None) -> float:
        """The cutoff for superseded mirror files: ``mirror`` (at least the grace), and never inside the
        table's time-travel horizon (its Delta ``log_retention``) plus the grace; without ``mirror``, the
        retention's cutoff."""
        if self.mirror is None:
            return self.cutoff(now)
        keep = max(self.mirror, self.min_grace)
        if log_retention is not None:
            keep = max(keep, log_retention + self.min_grace)
        return (now - keep).timestamp()

    def describe(self) -> str:
        text = duration_text(self.retention)
        if self.retention < self.min_grace:
            text = f"{text} (raised to the {duration_text(self.min_grace)} grace)"
        return text

    def describe_mirror(self) -> str | None:
        """The superseded mirror files' retention when it differs from the retention (``1h``), else None."""
        if self.mirror is None or self.mirror == self.retention:
            return None
        return duration_text(max(self.mirror, self.min_grace))


def utc_now() -> datetime:
    return datetime.now(UTC)


def parse_interval_minutes(value: float | str, setting: str = "gc interval") -> float:
    """Minutes between the stream's GC runs: 0 (off) up to a week; anything else is refused, naming it."""
    try:
        minutes = float(value)
    except (TypeError, ValueError):
        minutes = float("nan")
    if not 0 <= minutes <= MAX_INTERVAL_MINUTES:
        raise ConfigurationError(
            f"{setting} {value!r}: give minutes from 0 (off) to {MAX_INTERVAL_MINUTES:.0f}, e.g. "
            f"{DEFAULT_INTERVAL_MINUTES:.0f}"
        )
    return minutes

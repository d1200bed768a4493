"""What garbage collection reclaimed: one run's counts, and the totals since the first run.

Each run that deletes (not a dry run) rewrites ``<output>/_mysqlcdc_gc.json``: the last run (when, the
retention, files and bytes per kind and per table, errors) and the totals over every run since the first.
``mysqlcdc status`` shows it; ``mysqlcdc gc`` prints the same.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_mysqlcdc.engine.lake.gc.files import KINDS, Garbage
from airflow_provider_mysqlcdc.engine.lake.layout import read_json, write_json_atomic

GC_REPORT = "_mysqlcdc_gc.json"  # in the output root


@dataclass
class Amount:
    """Files and bytes."""

    files: int = 0
    bytes: int = 0

    def add(self, files: int, size: int) -> None:
        self.files += files
        self.bytes += size

    def as_dict(self) -> dict[str, int]:
        return {"files": self.files, "bytes": self.bytes}

    @classmethod
    def of(cls, data: Any) -> Amount:
        data = data if isinstance(data, dict) else {}
        return cls(int(data.get("files") or 0), int(data.get("bytes") or 0))


@dataclass
class GcRun:
    """One run: what it found (and deleted, unless ``dry_run``), per kind and per table."""

    started_at: str
    retention: str
    keep_seconds: float  # max(retention, grace): what it actually kept
    dry_run: bool
    trigger: str  # "cli", "stream"
    finished_at: str | None = None
    seconds: float = 0.0
    total: Amount = field(default_factory=Amount)
    by_kind: dict[str, Amount] = field(default_factory=dict)
    by_table: dict[str, dict[str, Amount]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    mirror_retention: str | None = None  # superseded mirror files' own retention, when it differs
    # per table, the last changelog batch known to hold no killed attempt's file (the next run starts after)
    changelog_clean_through: dict[str, int] = field(default_factory=dict)

    def count(self, item: Garbage) -> None:
        self.total.add(item.files, item.bytes)
        self.by_kind.setdefault(item.kind, Amount()).add(item.files, item.bytes)
        self.by_table.setdefault(item.table, {}).setdefault(item.kind, Amount()).add(item.files, item.bytes)

    def as_dict(self) -> dict[str, Any]:
        return {
            "started_at": self.started_at, "finished_at": self.finished_at, "seconds": round(self.seconds, 3),
            "trigger": self.trigger, "dry_run": self.dry_run, "retention": self.retention,
            "keep_seconds": self.keep_seconds,
            **({"mirror_retention": self.mirror_retention} if self.mirror_retention else {}),
            **self.total.as_dict(),
            "by_kind": {k: self.by_kind[k].as_dict() for k in KINDS if k in self.by_kind},
            "by_table": {t: {k: a.as_dict() for k, a in sorted(kinds.items())}
                         for t, kinds in sorted(self.by_table.items())},
            "errors": list(self.errors),
        }

    def describe(self) -> str:
        """``deleted 12 files, 3.4 MiB (snapshot 3 files 2.1 MiB, mirror 9 files 1.3 MiB); retention 3d``."""
        verb = "would delete" if self.dry_run else "deleted"
        kinds = ", ".join(f"{k} {a.files} files {bytes_text(a.bytes)}" for k, a in self.by_kind.items())
        text = f"{verb} {self.total.files} files, {bytes_text(self.total.bytes)}"
        text += f" ({kinds})" if kinds else ""
        text += f"; retention {self.retention}"
        if self.mirror_retention:
            text += f", superseded mirror files {self.mirror_retention}"
        if self.errors:
            text += f"; {len(self.errors)} error(s): " + "; ".join(self.errors)
        return text


@dataclass(frozen=True)
class GcReport:
    """The report file: the last run and the totals since ``since``."""

    last_run: dict[str, Any]
    since: str
    runs: int
    total: Amount
    by_kind: dict[str, Amount]
    changelog_clean_through: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"last_run": self.last_run, "totals": {
            "since": self.since, "runs": self.runs, **self.total.as_dict(),
            "by_kind": {k: a.as_dict() for k, a in self.by_kind.items()}},
            "changelog_clean_through": dict(sorted(self.changelog_clean_through.items()))}

    def describe(self) -> str:
        """Two short lines for ``status``: the last run, and the totals."""
        last = self.last_run
        lines = [(f"garbage collection: last run {last.get('finished_at') or last.get('started_at')} "
                  f"({last.get('trigger')}), deleted {last.get('files', 0)} files, "
                  f"{bytes_text(int(last.get('bytes') or 0))}, retention {last.get('retention')}")]
        lines.append(f"garbage collection: since {self.since}: {self.runs} runs, {self.total.files} files, "
                     f"{bytes_text(self.total.bytes)} reclaimed")
        if last.get("errors"):
            errors = last["errors"]
            lines.append(f"garbage collection: last run had {len(errors)} error(s): {errors[0]}")
        return "\n".join(lines)


def gc_report_path(root: str) -> str:
    return posixpath.join(root.rstrip("/"), GC_REPORT)


def read_gc_report(root: str) -> GcReport | None:
    data = read_json(gc_report_path(root))
    if not data or not isinstance(data.get("last_run"), dict):
        return None
    totals = data.get("totals") or {}
    return GcReport(
        data["last_run"], str(totals.get("since") or data["last_run"].get("started_at")),
        int(totals.get("runs") or 0), Amount.of(totals),
        {k: Amount.of(v) for k, v in (totals.get("by_kind") or {}).items()},
        {str(t): int(b) for t, b in (data.get("changelog_clean_through") or {}).items()},
    )


def record_run(root: str, run: GcRun) -> GcReport:
    """Add a run that deleted (not a dry run) to the report file; returns the new report."""
    previous = read_gc_report(root)
    total = Amount(previous.total.files, previous.total.bytes) if previous else Amount()
    by_kind = {k: Amount(a.files, a.bytes) for k, a in (previous.by_kind if previous else {}).items()}
    total.add(run.total.files, run.total.bytes)
    for kind, amount in run.by_kind.items():
        by_kind.setdefault(kind, Amount()).add(amount.files, amount.bytes)
    clean = {**(previous.changelog_clean_through if previous else {}), **run.changelog_clean_through}
    report = GcReport(run.as_dict(), previous.since if previous else run.started_at,
                      (previous.runs if previous else 0) + 1, total, by_kind, clean)
    write_json_atomic(gc_report_path(root), report.as_dict())
    return report


def bytes_text(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"

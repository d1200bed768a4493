"""HTML of the phase-monitoring page: one DAG run's pipeline, per table, from the engine's ``StatusReport``.

Plain server-side HTML with a little CSS: the page lives in an iframe of the Airflow UI and must read well
without JavaScript. Every value goes through ``html.escape``: table names, chunk errors and notes come from
users, MySQL and Spark, and none of them may inject markup. The numbers are the ``TableStatus`` fields as the
engine computed them (no status logic here, only formatting); cells carry ``data-field`` names so tests and
scripts can read them back.
"""
from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import Any, Iterable

from airflow_provider_mysqlcdc.engine.status.report import StatusReport
from airflow_provider_mysqlcdc.engine.status.table_status import (
    NOT_PLANNED,
    SNAPSHOT,
    SNAPSHOT_DONE,
    STREAM,
    TableStatus,
)
from airflow_provider_mysqlcdc.engine.status.text import lag_text
from airflow_provider_mysqlcdc.pipeline.record import PipelineRecord

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; font-size: 14px; margin: 16px;
       color: #1f2328; background: #fff; }
h1 { font-size: 18px; margin: 0 0 8px; } h2 { font-size: 15px; margin: 20px 0 6px; }
table { border-collapse: collapse; margin: 6px 0 12px; }
th, td { border: 1px solid #d0d7de; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f6f8fa; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
code, .pos { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12px; }
td.pos { white-space: nowrap; } td.lag { white-space: nowrap; }
dl.meta { display: grid; grid-template-columns: max-content auto; gap: 2px 12px; margin: 0 0 12px; }
dl.meta dt { color: #59636e; } dl.meta dd { margin: 0; }
.phase { display: inline-block; padding: 1px 8px; border-radius: 10px; font-weight: 600; font-size: 12px; }
.phase-stream { background: #dafbe1; color: #116329; }
.phase-snapshot { background: #ddf4ff; color: #0550ae; }
.phase-snapshot-done { background: #fff8c5; color: #7d4e00; }
.phase-not-planned { background: #eaeef2; color: #59636e; }
.failed { color: #cf222e; font-weight: 600; }
.notice { border-left: 4px solid #bf8700; background: #fff8c5; padding: 6px 10px; margin: 8px 0; }
.error { border-left: 4px solid #cf222e; background: #ffebe9; padding: 6px 10px; margin: 8px 0; }
ul.notes { margin: 4px 0 12px; padding-left: 20px; }
.muted { color: #59636e; }
@media (prefers-color-scheme: dark) {
  body { background: #0d1117; color: #e6edf3; } th { background: #161b22; } th, td { border-color: #30363d; }
  .notice { background: #3b2e00; } .error { background: #3d0c0c; }
}
"""

PHASE_LABELS = {
    NOT_PLANNED: "not planned",
    SNAPSHOT: "snapshot phase",
    SNAPSHOT_DONE: "snapshot done, stream not started",
    STREAM: "stream phase",
}


@dataclass(frozen=True)
class RunRef:
    """The DAG run a page is about, and the URLs it links to (already relative to the plugin's prefix)."""

    dag_id: str
    run_id: str
    json_url: str = ""


def _e(value: Any) -> str:
    return escape("-" if value is None else str(value), quote=True)


def _document(title: str, body: str, refresh: int | None = None) -> str:
    meta = f'<meta http-equiv="refresh" content="{int(refresh)}">' if refresh else ""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">{meta}'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head>\n<body>\n{body}\n</body></html>\n"
    )


def _run_header(run: RunRef) -> str:
    return (
        f'<h1>MySQL CDC: <span data-field="dag_id">{_e(run.dag_id)}</span> / '
        f'<span data-field="run_id">{_e(run.run_id)}</span></h1>'
    )


def _meta(items: Iterable[tuple[str, str, Any]]) -> str:
    rows = "".join(
        f'<dt>{_e(label)}</dt><dd data-field="{_e(name)}">{_e(value)}</dd>' for label, name, value in items
    )
    return f'<dl class="meta">{rows}</dl>'


def stream_text(t: TableStatus) -> str:
    """The stream position; ``~`` marks one estimated from the latest record (the engine's note says so)."""
    if t.stream_position is None:
        return "-"
    return str(t.stream_position) + ("" if t.stream_position_exact else "~")


def _lag_cell(t: TableStatus) -> str:
    basis = (
        "behind the server's binlog" if t.lag_from == "stream"
        else "from the smallest HW to the server's binlog: the stream has not started"
    )
    return f'<span title="{_e(basis)}">{_e(lag_text(t))}</span>'


def _phase(t: TableStatus) -> str:
    css = "phase-" + t.phase.replace(" ", "-")
    label = PHASE_LABELS.get(t.phase, t.phase)
    return f'<span class="phase {_e(css)}" title="{_e(label)}">{_e(t.phase)}</span>'


def _hw_range(t: TableStatus) -> str:
    if t.min_hw is None:
        return "-"
    return (
        f'<span data-field="min_hw">{_e(t.min_hw)}</span> ..<br>'
        f'<span data-field="max_hw">{_e(t.max_hw)}</span>'
    )


def _summary_row(t: TableStatus) -> str:
    failed = f'<span class="failed">{t.failed}</span>' if t.failed else str(t.failed)
    cells = [
        ("table", f'<a href="#table-{_e(t.table)}">{_e(t.table)}</a>', ""),
        ("phase", _phase(t), ""),
        ("generation", _e(t.generation), "num"),
        ("chunks", str(t.chunks), "num"),
        ("planned", str(t.planned), "num"),
        ("running", str(t.running), "num"),
        ("committed", str(t.committed), "num"),
        ("failed", failed, "num"),
        ("rows", f"{t.rows:,}", "num"),
        ("hw_range", _hw_range(t), "pos"),
        ("stream_position", _e(stream_text(t)), "pos"),
        ("lag", _lag_cell(t), "lag"),
        ("consistent_from", _e(t.consistent_from), "pos"),
        ("consistent_as_of", _e(t.consistent_as_of) if t.consistent else "not yet", "pos"),
    ]
    tds = "".join(f'<td data-field="{name}" class="{css}">{value}</td>' for name, value, css in cells)
    return f'<tr data-table="{_e(t.table)}">{tds}</tr>'


_SUMMARY_HEAD = (
    '<tr><th rowspan="2">Table</th><th rowspan="2">Phase</th><th rowspan="2">Gen</th>'
    '<th colspan="5">Chunks</th><th rowspan="2">Rows read</th>'
    '<th rowspan="2">HW range (min .. max)</th><th rowspan="2">Stream position</th>'
    '<th rowspan="2">Lag</th><th rowspan="2">Consistent from</th><th rowspan="2">Consistent as of</th></tr>'
    "<tr><th>total</th><th>planned</th><th>running</th><th>done</th><th>failed</th></tr>"
)


def _mirror_text(mirror: dict[str, Any] | None) -> str:
    if not mirror:
        return "none"
    text = (
        f"{mirror.get('rows')} rows through batch {mirror.get('through_batch')}, "
        f"refreshed {mirror.get('refreshed_at')}"
    )
    return text + (f", consistent as of {mirror.get('as_of')}" if mirror.get("consistent") else "")


def _table_details(t: TableStatus) -> str:
    key = "unknown" if t.primary_key is None else (", ".join(t.primary_key) or "none")
    parts = [
        f'<section id="table-{_e(t.table)}" data-table="{_e(t.table)}"><h2>{_e(t.table)} {_phase(t)}</h2>',
        _meta([
            ("plan generation", "generation", t.generation),
            ("mirror built from generation", "mirror_generation", t.mirror_generation),
            ("reruns pending", "rerun_pending", t.rerun_pending),
            ("primary key", "primary_key", key),
            ("schema version", "schema_version", t.schema_version),
            ("latest DDL followed", "last_ddl", t.last_ddl or "none"),
            ("latest stream batch", "stream_batch", t.stream_batch),
            ("mirror", "mirror", _mirror_text(t.mirror)),
        ]),
    ]
    if t.failures:
        rows = "".join(
            f'<tr data-chunk="{f.chunk_id}"><td class="num" data-field="chunk_id">{f.chunk_id}</td>'
            f'<td class="num" data-field="attempts">{f.attempts}</td>'
            f'<td data-field="error"><code>{_e(f.error)}</code></td></tr>'
            for f in t.failures
        )
        parts.append(
            '<h3 class="failed">Failed chunks</h3><table class="failures">'
            f"<tr><th>Chunk</th><th>Attempts</th><th>Error</th></tr>{rows}</table>"
        )
    if t.notes:
        items = "".join(f"<li>{_e(n)}</li>" for n in t.notes)
        parts.append(f'<ul class="notes">{items}</ul>')
    parts.append("</section>")
    return "".join(parts)


def _record_meta(record: PipelineRecord, *extra: tuple[str, str, Any]) -> str:
    return _meta([
        ("MySQL connection", "mysql_conn_id", record.mysql_conn_id),
        ("chunk store", "chunk_store", record.chunk_store),
        ("output", "output", record.output),
        ("checkpoint", "checkpoint", record.checkpoint),
        *extra,
    ])


def render_status(
    run: RunRef,
    record: PipelineRecord,
    report: StatusReport,
    *,
    notes: Iterable[str] = (),
    refresh: int | None = None,
) -> str:
    """The page: the pipeline's locations, a summary row per table, then each table's failures and notes."""
    body = [
        _run_header(run),
        _record_meta(
            record,
            ("server binlog position", "server_position", report.server_position or "unknown"),
            ("collected at", "collected_at", report.collected_at),
        ),
    ]
    body.extend(f'<div class="notice">{_e(note)}</div>' for note in (*report.notes, *notes))
    if report.tables:
        rows = "".join(_summary_row(t) for t in report.tables)
        body.append(f'<table class="summary" id="summary">{_SUMMARY_HEAD}{rows}</table>')
        body.extend(_table_details(t) for t in report.tables)
    else:
        body.append('<p class="muted">The pipeline record names no tables and the chunk store has none.</p>')
    if run.json_url:
        body.append(
            f'<p class="muted"><a href="{_e(run.json_url)}">as JSON</a> &middot; '
            "reload the page for fresh numbers</p>"
        )
    return _document(f"MySQL CDC {run.dag_id} {run.run_id}", "\n".join(body), refresh)


NO_PIPELINE_TEXT = (
    "This DAG run has no MySQL CDC pipeline: its plan task has not run yet (or this DAG has no MySQL CDC "
    "plan task). The page shows the pipeline once the plan task has recorded it."
)


def render_no_pipeline(run: RunRef) -> str:
    """A run whose plan task has not pushed the pipeline record (yet), or a DAG that is no CDC pipeline."""
    body = f'{_run_header(run)}<div class="notice" id="no-pipeline">{_e(NO_PIPELINE_TEXT)}</div>'
    return _document(f"MySQL CDC {run.dag_id} {run.run_id}", body)


def render_problem(run: RunRef | None, title: str, message: str, record: PipelineRecord | None = None) -> str:
    """An error the reader can act on: no such DAG run, chunk store unreachable, unreadable record."""
    body = [_run_header(run)] if run is not None else []
    if record is not None:
        body.append(_record_meta(record))
    body.append(f'<div class="error" id="problem"><strong>{_e(title)}</strong><br>{_e(message)}</div>')
    return _document(f"MySQL CDC: {title}", "\n".join(body))


def render_login_required(login_url: str, detail: str) -> str:
    """A 401/403 as a page. The link stays in the frame: the UI's iframe sandbox forbids navigating the whole
    window, and the login page then comes back here by its ``next`` URL."""
    return _document(
        "MySQL CDC: log in",
        f'<div class="error" id="problem"><strong>{_e(detail)}</strong><br>'
        f'<a href="{_e(login_url)}">Log in to Airflow</a> to see this page.</div>',
    )

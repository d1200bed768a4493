"""HTML of the phase-monitoring page: one DAG run's pipeline, per table, from the engine's ``StatusReport``.

Plain server-side HTML with a little CSS: the page lives in an iframe of the Airflow UI and must read well
without JavaScript. One small inline script refreshes its content in place (a visible control pauses it) and
opens task-instance links in the Airflow UI around the frame. Every value goes through ``html.escape``: table
names, chunk errors and notes come from users, MySQL and Spark, and none of them may inject markup. The
numbers are the ``TableStatus`` fields as the engine computed them (no status logic here, only formatting);
values carry ``data-field`` names so tests and scripts can read them back.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from html import escape
from typing import Any

from airflow_provider_mysqlcdc.engine.status.report import StatusReport
from airflow_provider_mysqlcdc.engine.status.table_status import (
    NOT_PLANNED,
    SNAPSHOT,
    SNAPSHOT_DONE,
    STREAM,
    TableStatus,
)
from airflow_provider_mysqlcdc.engine.status.text import (
    headroom_text,
    lag_seconds_text,
    lag_text,
    mismatch_text,
    progress_text,
    verification_text,
)
from airflow_provider_mysqlcdc.engine.status.verification import OPEN, VerificationStatus
from airflow_provider_mysqlcdc.pipeline.record import PipelineRecord
from airflow_provider_mysqlcdc.plugins.run_tasks import Action, TaskRow

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; font-size: 14px; margin: 16px;
       color: #1f2328; background: #fff; }
h1 { font-size: 18px; margin: 0 0 8px; } h2 { font-size: 15px; margin: 20px 0 6px; }
table { border-collapse: collapse; margin: 6px 0 12px; }
table.summary { width: 100%; }
th, td { border: 1px solid #d0d7de; padding: 3px 6px; text-align: left; vertical-align: top; }
th { background: #f6f8fa; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
code, .pos { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12px; }
td.pos { overflow-wrap: anywhere; min-width: 9ch; } td.lag { white-space: nowrap; }
td.name, td.verified { overflow-wrap: anywhere; min-width: 10ch; }
.bar { width: 100%; max-width: 640px; height: 10px; }
#actions { border-left: 4px solid #cf222e; background: #ffebe9; padding: 6px 10px; margin: 8px 0; }
#actions.ok { border-color: #1a7f37; background: #dafbe1; }
#repair { border-left: 4px solid #bf8700; background: #fff8c5; padding: 6px 10px; margin: 8px 0; }
#repair li { margin: 4px 0; }
#actions li { margin: 4px 0; } .paste { user-select: all; background: #f6f8fa; padding: 1px 4px; }
#refresh { float: right; font-size: 12px; }
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
  .notice, #repair { background: #3b2e00; } .error, #actions { background: #3d0c0c; }
  #actions.ok { background: #0f2d16; }
  .paste { background: #161b22; }
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


def _phase(t: TableStatus) -> str:
    css = "phase-" + t.phase.replace(" ", "-")
    label = PHASE_LABELS.get(t.phase, t.phase)
    return f'<span class="phase {_e(css)}" title="{_e(label)}" data-field="phase">{_e(t.phase)}</span>'


def _hw_range(t: TableStatus) -> str:
    if t.min_hw is None:
        return "-"
    return (
        f'<span data-field="min_hw">{_e(t.min_hw)}</span> ..<br>'
        f'<span data-field="max_hw">{_e(t.max_hw)}</span>'
    )


def _f(name: str, value: Any, css: str = "") -> str:
    """A value readable back by ``data-field`` (tests, scripts), escaped."""
    cls = f' class="{css}"' if css else ""
    return f'<span data-field="{name}"{cls}>{_e(value)}</span>'


def _chunks_cell(t: TableStatus) -> str:
    failed = _f("failed", t.failed, "failed" if t.failed else "")
    return (f'{_f("committed", t.committed)}/{_f("chunks", t.chunks)} done<br><span class="muted">'
            f'{_f("running", t.running)} running, {failed} failed, {_f("planned", t.planned)} planned</span>')


def _stream_cell(t: TableStatus) -> str:
    basis = ("behind the server's binlog" if t.lag_from == "stream"
             else "from the smallest HW to the server's binlog: the stream has not started")
    seconds = "" if t.lag_seconds is None else f', {_f("table_lag_seconds", lag_seconds_text(t.lag_seconds))}'
    return (f'{_f("stream_position", stream_text(t))}<br>'
            f'<span class="muted" title="{_e(basis)}">lag {_f("lag", lag_text(t))}{seconds}</span>')


def _consistent_cell(t: TableStatus) -> str:
    as_of = _f("consistent_as_of", t.consistent_as_of if t.consistent else "not yet")
    return f'{as_of}<br><span class="muted">from {_f("consistent_from", t.consistent_from)}</span>'


def _summary_row(t: TableStatus) -> str:
    cells = [
        (f'<a href="#table-{_e(t.table)}">{_e(t.table)}</a>', "name"),
        (f'{_phase(t)}<br><span class="muted">gen {_f("generation", t.generation)}</span>', ""),
        (_chunks_cell(t), "num"),
        (_f("rows", f"{t.rows:,}"), "num"),
        (_hw_range(t), "pos"),
        (_stream_cell(t), "pos"),
        (_consistent_cell(t), "pos"),
        (_verified_cell(t.verification), "verified"),
    ]
    tds = "".join(f'<td class="{css}">{value}</td>' for value, css in cells)
    return f'<tr data-table="{_e(t.table)}">{tds}</tr>'


_SUMMARY_HEAD = (
    "<tr><th>Table</th><th>Phase, plan generation</th><th>Chunks</th><th>Rows read</th>"
    "<th>HW range (min .. max)</th><th>Stream position, lag</th><th>Mirror consistent</th><th>Verified</th>"
    "</tr>"
)


def _mirror_text(mirror: dict[str, Any] | None) -> str:
    if not mirror:
        return "not refreshed yet: the stream refreshes it after each batch"
    text = (
        f"{mirror.get('rows')} rows through batch {mirror.get('through_batch')}, "
        f"refreshed {mirror.get('refreshed_at')}"
    )
    text += f", consistent as of {mirror.get('as_of')}" if mirror.get("consistent") else ""
    if mirror.get("delta_version") is not None:
        text += f"; Delta table version {mirror['delta_version']}"
        text += f" (exact as of {mirror['delta_as_of']})" if mirror.get("delta_as_of") else ""
    if mirror.get("changelog_delta_batch") is not None:
        text += f"; changelog Delta table through batch {mirror['changelog_delta_batch']}"
    return text


def _table_details(t: TableStatus) -> str:
    key = "unknown" if t.primary_key is None else (", ".join(t.primary_key) or "none")
    parts = [
        f'<section id="table-{_e(t.table)}" data-table="{_e(t.table)}"><h2>{_e(t.table)} {_phase(t)}</h2>',
        _meta([
            ("plan generation", "generation", t.generation),
            ("latest complete generation (the mirror's snapshot)", "mirror_generation", t.mirror_generation),
            ("reruns pending", "rerun_pending", t.rerun_pending),
            ("primary key", "primary_key", key),
            ("schema version", "schema_version", t.schema_version),
            ("latest DDL followed", "last_ddl", t.last_ddl or "none"),
            ("latest stream batch", "stream_batch", t.stream_batch),
            ("mirror (Delta tables)", "mirror", _mirror_text(t.mirror)),
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
    parts.append(_verification_details(t.verification))
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


def _progress(report: StatusReport) -> str:
    """The snapshot's overall progress (a bar, rate, time left) and the stream's largest lag."""
    p, parts = report.progress, []
    if p.chunks:
        parts.append(
            f'<div><strong>Snapshot</strong> <progress class="bar" max="{p.chunks}" value="{p.committed}">'
            f'</progress><br><span data-field="progress">{_e(progress_text(p))}</span></div>'
        )
    streaming = [t for t in report.tables if t.lag_from == "stream" and t.lag_bytes is not None]
    if streaming:
        worst = max(streaming, key=lambda t: (t.lag_files or 0, t.lag_bytes or 0))
        parts.append(f'<div><strong>Stream</strong> lag <span data-field="stream_lag">{_e(lag_text(worst))}'
                     f"</span> behind the server's binlog (largest: {_e(worst.table)})</div>")
    health = report.health
    if health is not None and health.needed is not None:
        seconds = lag_seconds_text(health.lag_seconds) if health.needed_by == "stream" else "not started"
        headroom = health.headroom.seconds if health.headroom is not None else None
        parts.append(
            f'<div><strong>Lag</strong> <span data-field="lag_seconds" data-value="{_e(health.lag_seconds)}">'
            f"{_e(seconds)}</span> behind the server; <strong>binlog headroom</strong> "
            f'<span data-field="binlog_headroom" data-value="{_e(headroom)}">'
            f"{_e(headroom_text(health.headroom))}</span></div>"
        )
    return f'<section id="progress">{"".join(parts)}</section>' if parts else ""


def _task_link(task: TaskRow) -> str:
    # the tab is a sandboxed iframe: the script below opens the link in the Airflow UI around it; without
    # scripts it opens inside the frame
    return f'<a href="{_e(task.href)}" data-top="1" data-task="{_e(task.name)}">{_e(task.name)}</a>'


def _action_items(actions: list[Action]) -> str:
    items = []
    for a in actions:
        if a.task and a.task.name in a.text:  # the task's name in the sentence becomes its link
            before, after = a.text.split(a.task.name, 1)
            text = f"{_e(before)}{_task_link(a.task)}{_e(after)}"
        else:
            text = _e(a.text) + (f" {_task_link(a.task)}" if a.task else "")
        field = "redo_chunks" if a.kind == "redo" else "command"
        paste = f' <code class="paste" data-field="{field}">{_e(a.value)}</code>' if a.value else ""
        items.append(f'<li data-action="{_e(a.kind)}">{text}{paste}</li>')
    return "".join(items)


def _actions(actions: list[Action], tasks: list[TaskRow], repairs: list[Action]) -> str:
    if not actions:
        if not repairs and tasks and all(t.state in ("success", "skipped") for t in tasks):
            return '<div id="actions" class="ok">Nothing to do: every task of this run has succeeded.</div>'
        return ""
    return f'<div id="actions"><strong>To finish this run</strong><ul>{_action_items(actions)}</ul></div>'


def _repairs(repairs: list[Action]) -> str:
    """What repairs the chunks ``mysqlcdc verify`` found different (and verifies re-snapshotted ones)."""
    if not repairs:
        return ""
    return (f'<div id="repair"><strong>To repair what verify found</strong><ul>{_action_items(repairs)}'
            "</ul></div>")


def _verified_cell(v: VerificationStatus | None) -> str:
    if v is None:
        return _f("verified", "never")
    differ = f', {_f("differing", f"{v.differing} differ", "failed")}' if v.differing else ""
    again = f", {v.superseded} to verify again" if v.superseded else ""
    when = "" if v.verified_at is None else f"{v.verified_at:%Y-%m-%d %H:%M} UTC"
    return (f'{_f("verified", f"{v.matched + v.repaired}/{v.chunks} match")}{differ}{_e(again)}<br>'
            f'<span class="muted">at {_f("verified_position", v.position)}<br>{_e(when)}</span>')


def _verification_details(v: VerificationStatus | None) -> str:
    """The last verification in a sentence, then each mismatch (open or superseded) in a table."""
    if v is None:
        return ""
    parts = [f'<p><strong>Last verification</strong> {_f("verification", verification_text(v))}</p>']
    if v.mismatches:
        rows = "".join(
            f'<tr data-mismatch="{m.chunk_id}" data-state="{_e(m.state)}">'
            f'<td class="num" data-field="chunk_id">{m.chunk_id}</td>'
            f'<td data-field="key_range"><code>{_e(m.key_range)}</code></td>'
            f'<td class="num" data-field="source_rows">{_e(m.source_rows)}</td>'
            f'<td class="num" data-field="lake_rows">{_e(m.lake_rows)}</td>'
            f'<td data-field="state" class="{"failed" if m.state == OPEN else ""}">'
            f'{_e("differs" if m.state == OPEN else "snapshotted again since: verify again")}'
            f'{_e("; a rerun is running" if m.rerun_pending else "")}</td>'
            f'<td data-field="why" title="{_e(mismatch_text(m))}">{_e(m.why)}</td></tr>'
            for m in v.mismatches
        )
        parts.append(
            '<h3 class="failed">Chunks that differ from the source</h3><table class="mismatches">'
            "<tr><th>Chunk</th><th>Key range</th><th>Source rows</th><th>Lake rows</th><th>State</th>"
            f"<th>Why</th></tr>{rows}</table>"
        )
    return "".join(parts)


_SHOWN_GROUPS = 40  # beyond this, succeeded groups are counted, not listed (thousands of tables)


def _groups(tasks: list[TaskRow]) -> str:
    mapped = [t for t in tasks if t.mapped]
    if not mapped:
        return ""
    shown = mapped if len(mapped) <= _SHOWN_GROUPS else [t for t in mapped if t.state != "success"]
    rows = "".join(
        f'<tr data-map-index="{t.map_index}"><td class="num">{t.map_index}</td><td>{_task_link(t)}</td>'
        f'<td data-field="state" class="{"failed" if t.state == "failed" else ""}">'
        f'{_e(t.state or "none")}</td>'
        f'<td class="num">{t.try_number}/{t.max_tries + 1}</td></tr>'
        for t in shown
    )
    hidden = len(mapped) - len(shown)
    more = f'<p class="muted">{hidden} more succeeded.</p>' if hidden else ""
    return (f'<h2>Chunk groups (mapped tasks)</h2><table class="groups" id="groups"><tr><th>Map index</th>'
            f"<th>Task instance</th><th>State</th><th>Try</th></tr>{rows}</table>{more}")


_SCRIPT = """
(function () {
  var every = %d, paused = false, box = document.getElementById("refresh");
  function open(event) {
    var a = event.target.closest("a[data-top]");
    if (!a) return;
    try {  // same origin: navigate the Airflow UI around this frame (its router listens to popstate)
      window.parent.history.pushState({}, "", a.getAttribute("href"));
      window.parent.dispatchEvent(new PopStateEvent("popstate"));
      event.preventDefault();
    } catch (e) { /* not framed by the UI: follow the link */ }
  }
  document.addEventListener("click", open);
  if (!box || !every) return;
  var state = box.querySelector("[data-field=refresh_state]"), button = box.querySelector("button");
  button.addEventListener("click", function () {
    paused = !paused; button.textContent = paused ? "resume" : "pause";
    state.textContent = paused ? "paused" : "every " + every + " s";
  });
  setInterval(function () {
    if (paused) return;
    fetch(window.location.href, {credentials: "same-origin"}).then(function (r) {
      if (!r.ok) throw new Error("HTTP " + r.status);
      return r.text();
    }).then(function (html) {
      var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("content");
      if (fresh) document.getElementById("content").replaceWith(fresh);
      state.textContent = "every " + every + " s";
    }).catch(function (e) { state.textContent = "refresh failed (" + e.message + "), retrying"; });
  }, every * 1000);
})();
"""

DEFAULT_REFRESH_S = 10


def render_status(
    run: RunRef,
    record: PipelineRecord,
    report: StatusReport,
    *,
    notes: Iterable[str] = (),
    refresh: int | None = DEFAULT_REFRESH_S,
    tasks: Iterable[TaskRow] = (),
    actions: Iterable[Action] = (),
    repairs: Iterable[Action] = (),
) -> str:
    """The page: what to do (``actions``, if any), what repairs the chunks verify found different
    (``repairs``), overall progress, a summary row per table, the chunk groups, then each table's failures,
    verification and notes. Refreshes itself every ``refresh`` seconds (a visible control pauses)."""
    tasks = list(tasks)
    content = [
        _record_meta(
            record,
            ("server binlog position", "server_position", report.server_position or "unknown"),
            ("collected at", "collected_at", report.collected_at),
        ),
        _actions(list(actions), tasks, list(repairs)),
        _repairs(list(repairs)),
        _progress(report),
    ]
    content.extend(f'<div class="notice">{_e(note)}</div>' for note in (*report.notes, *notes))
    if report.tables:
        rows = "".join(_summary_row(t) for t in report.tables)
        content.append(f'<table class="summary" id="summary">{_SUMMARY_HEAD}{rows}</table>')
        content.append(_groups(tasks))
        content.extend(_table_details(t) for t in report.tables)
    else:
        content.append('<p class="muted">The pipeline record names no tables and the chunk store has '
                       'none.</p>')
    control = (
        f'<div id="refresh">auto-refresh <span data-field="refresh_state">every {int(refresh)} s</span> '
        '<button type="button">pause</button></div>' if refresh else ""
    )
    body = [control, _run_header(run), f'<div id="content">{"".join(content)}</div>']
    if run.json_url:
        body.append(f'<p class="muted"><a href="{_e(run.json_url)}">as JSON</a></p>')
    body.append(f"<script>{_SCRIPT % int(refresh or 0)}</script>")
    return _document(f"MySQL CDC {run.dag_id} {run.run_id}", "\n".join(body))


NO_PIPELINE_TEXT = (
    "This DAG run has no MySQL CDC pipeline: its plan task has not run yet (or this DAG has no MySQL CDC "
    "plan task). The page shows the pipeline once the plan task has recorded it."
)


def render_no_pipeline(run: RunRef) -> str:
    """A run whose plan task has not pushed the pipeline record (yet), or a DAG that is no CDC pipeline."""
    body = f'{_run_header(run)}<div class="notice" id="no-pipeline">{_e(NO_PIPELINE_TEXT)}</div>'
    return _document(f"MySQL CDC {run.dag_id} {run.run_id}", body, refresh=DEFAULT_REFRESH_S)


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

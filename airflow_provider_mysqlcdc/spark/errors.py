"""The error that matters out of Spark's wrapping of it.

A failed Spark action raises a Py4J error, a failed streaming query a ``StreamingQueryException``: their text
is the Java stack with the Python worker's traceback inside, where the task's own Python exception (the
engine's error, where there is one) is the line worth reporting.
Two readers of that text, for two readers of the result:

* ``stream_failure_message``: what ``StreamFailed`` says when the stream's query stopped: the engine's own
  error (``Name: message``, the exception's class without its module), else the last Python exception, else
  the first line. The resnapshot marker inside an engine error (``[resnapshot table=... position=...]``) must
  survive it whole (``run_stream`` looks for it).
* ``task_failure_summary``: what a failed chunk group records on its chunks (one line, at most 500 characters,
  shown in ``status``): the task's last Python exception line as it stands, else the root JVM cause.
"""
from __future__ import annotations

import re

_OUR_ERROR = re.compile(r"^airflow_provider_mysqlcdc\.[\w.]*?(\w+): (.+)$")
_PYTHON_ERROR = re.compile(r"^([\w.]*(?:Error|Exception)): (.+)$")
_TASK_ERROR = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Fault|Failed|Stale\w*|Unknown\w*): ")


def _lines(*errors: BaseException | None) -> list[str]:
    text = "\n".join(str(e) for e in errors if e is not None)
    return [line.strip() for line in text.splitlines()]


def stream_failure_message(exc: BaseException) -> str:
    """The engine's own error out of Spark's wrapping (Java stack, Python traceback), else the first line."""
    lines = _lines(exc, exc.__cause__)
    for pattern in (_OUR_ERROR, _PYTHON_ERROR):
        found = [m for m in map(pattern.match, lines) if m]
        if found:
            name, message = found[-1].group(1), found[-1].group(2)
            return f"{name.rsplit('.', 1)[-1]}: {message}"[:4000]
    return lines[0][:2000] if lines else repr(exc)


def task_failure_summary(exc: BaseException) -> str:
    """The most telling line of a Spark/Py4J error: the task's Python exception, else the root JVM cause."""
    lines = [ln for ln in _lines(exc) if ln and not ln.startswith(("at ", "...", "File "))]
    python = [ln for ln in lines if _TASK_ERROR.match(ln) and not ln.startswith(("org.", "java.", "py4j"))]
    if python:
        return python[-1][:500]
    causes = [ln.removeprefix("Caused by: ") for ln in lines if ln.startswith("Caused by: ")]
    causes = [c.split(": ", 1)[-1] for c in causes if "EOFException" not in c]
    if causes:
        return causes[0][:500]
    aborted = [ln for ln in lines if "Job aborted" in ln]
    return (aborted or lines or [repr(exc)])[0][:500]

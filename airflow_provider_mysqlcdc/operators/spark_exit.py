"""Why a Spark application our task started ended, in one line, from the Spark provider's error: the
spark-submit exit code (named when it means SIGKILL) and the driver's own last word, found in the tail of
spark-submit's output the provider appends (our apps' one-line ``<app>: error: ...``, else a Python exception
line), so a task's error leads with the cause instead of Airflow's "Cannot execute: <command>".
"""
from __future__ import annotations

import re

# SIGKILL as Popen reports it (-9) and as a shell does (128 + 9):
# the kernel's OOM killer, a container limit, kill -9
_KILLED = {-9, 137}


def exit_reason(failure: BaseException | None) -> str:
    """``spark-submit exit code 137 (killed: ...)`` from the Spark provider's error, else the error's type."""
    if failure is None:
        return "no error from spark-submit"
    code = re.search(r"Error code is: (-?\d+)", str(failure))
    if not code:
        first_line = str(failure).strip().splitlines()[0][:300] if str(failure) else ""
        return f"{type(failure).__name__}: {first_line}"
    number = int(code.group(1))
    text = f"spark-submit exit code {number}"
    if number in _KILLED:
        text += " (killed by SIGKILL: the out-of-memory killer, a container limit or kill -9)"
    cause = _cause_line(str(failure))
    return f"{text}: {cause}" if cause else text


# what the driver says last about why it stopped: our apps' one-line errors first,
# then a Python exception line
_CAUSES = (
    re.compile(r"^(snapshot_chunks|binlog_stream): error: .+"),
    re.compile(r"^[\w.]+(Error|Exception): .+"),
)


def _cause_line(message: str) -> str | None:
    """The driver's own error line from the tail of spark-submit's output the Spark provider appends."""
    _, found, tail = message.partition("Last spark-submit output:")
    lines = [line.strip() for line in tail.splitlines() if line.strip()] if found else []
    for pattern in _CAUSES:
        hits = [line for line in lines if pattern.match(line)]
        if hits:
            return hits[-1][:400]
    return None



"""A native crash leaves a readable error behind: the Python stack of every thread, on stderr.

Why: the pipeline runs native code in-process (pyarrow's C++, delta-rs, connectorx, the compiled binlog
decoder and framer). When one of them aborts (``terminate called without an active exception`` from a C++
thread pool torn down while a worker still runs, a segfault), the process dies with SIGABRT or SIGSEGV and no
Python traceback: nothing says which command, table or step it was in. Python's fault handler prints every
thread's stack on SIGSEGV, SIGFPE, SIGABRT, SIGBUS and SIGILL before the process dies, at no cost until then.

Spark's Python workers (chunk reads, the binlog source's partitions) are separate processes: Spark turns the
handler on in them with ``WORKER_CONF`` and puts the stack into the task's error.
"""
from __future__ import annotations

import faulthandler
import io
import sys

WORKER_CONF = {"spark.python.worker.faulthandler.enabled": "true"}


def report_native_faults() -> None:
    """Turn the fault handler on for this process (every thread), writing to stderr; once is enough."""
    if faulthandler.is_enabled():
        return
    for stream in (sys.stderr, sys.__stderr__):
        if stream is None:
            continue
        try:
            faulthandler.enable(file=stream, all_threads=True)
            return
        except (AttributeError, ValueError, io.UnsupportedOperation):  # no file descriptor behind it
            continue

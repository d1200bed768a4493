"""Commits of different tables made at once: a batch that changed many tables commits each table's Delta log
(changelog, then mirror) in a small thread pool instead of one after another.

Each table's commit touches only that table's files and log, so their order does not matter; delta-rs and
Arrow's file system release the GIL for their I/O, so a commit's file-system round trips overlap another's
(measured: ~4 ms of a ~5 ms commit is spent inside delta-rs). Every task runs to its end, then the first
failure (in the order given) is raised: the caller sees the same error a sequential loop would have raised
first, and the commits that succeeded are idempotent on replay (the Delta application transaction of the
changelog, the manifest's sync of the mirror).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from airflow_provider_mysqlcdc.engine.common.environment import COMMIT_THREADS_ENV

T = TypeVar("T")

# threads per batch: file-system round trips overlap well beyond the cores, and a handful is enough to hide
# them (measured on 2 cores: 8 threads ~3x faster than 1, 16 no better than 8)
MAX_THREADS = 8
THREADS_ENV = COMMIT_THREADS_ENV


def commit_threads() -> int:
    """How many commits run at once (``MYSQLCDC_COMMIT_THREADS``, default 8; 1: one after another)."""
    try:
        return max(1, int(os.environ.get(THREADS_ENV, MAX_THREADS)))
    except ValueError:
        return MAX_THREADS


def concurrently(tasks: Sequence[Callable[[], T]], threads: int | None = None) -> list[T]:
    """Run ``tasks`` (at most ``threads`` at a time) and return their results in order; after every task
    ended, raise the first task's exception (in ``tasks``' order), if any."""
    threads = commit_threads() if threads is None else threads
    if len(tasks) <= 1 or threads <= 1:
        return [task() for task in tasks]
    workers = min(threads, len(tasks))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mysqlcdc-commit") as pool:
        futures = [pool.submit(task) for task in tasks]
    for future in futures:
        error = future.exception()
        if error is not None:
            raise error
    return [future.result() for future in futures]

"""Writes and DDL paced by volume and by the stream's batches, never by time.

``DdlSteps``: DDL applied while available-now stream runs are in progress. Each statement lands after the
writers wrote ``step`` more statements, and every few statements only after the stream committed a batch
since the previous wait: the DDL is spread over the stream's runs whatever the machine's speed, and a slow
machine writes no more (a writer bounded by time did: 110 micro-batches instead of 51 on a loaded machine).
``WritesPerBatch``: writers allowed a volume per committed batch, for tests that wait for a number of batches
of a processing-time stream.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from airflow_provider_mysqlcdc.engine.model.tables import TableId
from tests.support.workload import SingleRowWriters

BatchHook = Callable[[int, list[TableId]], None]


class CountingHook:
    """A batch hook that counts the batches the stream committed, then calls ``hook``."""

    def __init__(self, hook: BatchHook | None = None) -> None:
        self.hook, self.batches = hook, 0
        self._changed = threading.Condition()

    def __call__(self, batch_id: int, tables: list[TableId]) -> None:
        if self.hook is not None:
            self.hook(batch_id, tables)
        with self._changed:
            self.batches += 1
            self._changed.notify_all()

    def wait_beyond(self, count: int, timeout: float) -> None:
        """Wait until the stream committed more than ``count`` batches."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self.batches <= count:
                left = deadline - time.monotonic()
                assert left > 0, f"the stream committed no batch after batch count {count}"
                self._changed.wait(min(left, 0.5))


class DdlSteps(threading.Thread):
    """Applies ``statements`` one by one (``run_sql``), each after ``step`` more writes, and every
    ``batch_every``-th one after a new batch too; then allows ``after`` more writes (the volume the assertions
    need after the last statement)."""

    def __init__(self, statements: list[str], run_sql: Callable[[str], None], writers: SingleRowWriters,
                 batches: CountingHook, step: int, after: int | None = None, batch_every: int = 1,
                 timeout: float = 120.0) -> None:
        super().__init__(daemon=True)
        self.statements, self.run_sql, self.writers = list(statements), run_sql, writers
        self.batches, self.step, self.timeout = batches, step, timeout
        self.after = step if after is None else after  # writes allowed after the last statement
        # a new batch before every n-th statement (the n-th, 2n-th, ...): each costs a stream run
        self.batch_every = batch_every
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            seen = self.batches.batches
            for i, statement in enumerate(self.statements):
                self.writers.allow(self.step)
                self.writers.wait_for(self.writers.limit or 0, self.timeout)
                if (i + 1) % self.batch_every == 0:
                    self.batches.wait_beyond(seen, self.timeout)
                    seen = self.batches.batches
                self.run_sql(statement)
            self.writers.allow(self.after)  # writes after the last statement too
        except BaseException as exc:  # noqa: BLE001 - raised in the test's thread by join_and_check
            self.error = exc

    def join_and_check(self) -> None:
        self.join(self.timeout)
        assert not self.is_alive(), "the DDL thread did not finish"
        if self.error is not None:
            raise self.error


class WritesPerBatch(CountingHook):
    """A batch hook that lets ``writers`` write ``per_batch`` more statements each time the stream commits a
    batch: writes follow the stream's progress, so a test that waits for a number of batches gets a bounded
    volume whatever the machine's speed (writers bounded by time write more on a slow one)."""

    def __init__(self, writers: SingleRowWriters, per_batch: int, hook: BatchHook | None = None) -> None:
        super().__init__(hook)
        self.writers, self.per_batch = writers, per_batch

    def __call__(self, batch_id: int, tables: list[TableId]) -> None:
        super().__call__(batch_id, tables)
        self.writers.allow(self.per_batch)

"""Waiting between tries of something that may work a little later: exponential backoff with jitter, bounded
by a time budget (and, where a try count matters more than time, by a number of tries).

Every retry loop of the engine uses this one clock: a MySQL outage (``source/outages.py``), a chunk store
outage or lock conflict (``chunk_store/database.py``), a read slot held by other readers
(``source/limits.py``), SQLite switching its journal mode. The loops keep their own judgement of *which*
errors are worth a retry and what to say when the budget is spent; this module only decides how long to wait
and when to stop.
"""
from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Backoff:
    """One run of waits: ``delay`` starts at ``first_delay_s`` and doubles up to ``max_delay_s``; each wait is
    the delay times a random factor in ``jitter`` (so that many waiting clients do not retry in step), and
    never runs past the budget. The budget counts from the moment the run is created."""

    budget_s: float
    first_delay_s: float
    max_delay_s: float
    jitter: tuple[float, float] = (0.5, 1.0)
    max_tries: int | None = None  # waits allowed, when a count bounds the run as well as the budget
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    delay: float = field(init=False)
    waits: int = field(init=False, default=0)
    started_at: float = field(init=False)

    def __post_init__(self) -> None:
        self.delay = self.first_delay_s
        self.started_at = self.clock()

    @property
    def waited_s(self) -> float:
        """Seconds since the run started."""
        return self.clock() - self.started_at

    @property
    def remaining_s(self) -> float:
        return max(0.0, self.budget_s - self.waited_s)

    def exhausted(self, *, counting_next_wait: bool = False) -> bool:
        """True once the budget is spent (or, with ``counting_next_wait``, once the next wait would overrun
        it), or the allowed number of waits is used up."""
        if self.max_tries is not None and self.waits >= self.max_tries:
            return True
        spent = self.waited_s + (self.delay if counting_next_wait else 0.0)
        return spent > self.budget_s if counting_next_wait else spent >= self.budget_s

    def wait(self) -> None:
        """Sleep for the current delay (jittered, within the budget), then double the delay."""
        low, high = self.jitter
        self.sleep(max(0.0, min(self.remaining_s, self.delay * random.uniform(low, high))))
        self.waits += 1
        self.delay = min(self.delay * 2, self.max_delay_s)

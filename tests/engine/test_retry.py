"""The one backoff every retry loop uses: doubling, jittered waits that never run past the budget or the
count."""
from __future__ import annotations

import random

from airflow_provider_mysqlcdc.engine.common.retry import Backoff


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_waits_double_up_to_the_cap_within_the_jitter() -> None:
    random.seed(7)
    clock = FakeClock()
    backoff = Backoff(1000.0, first_delay_s=0.5, max_delay_s=4.0, jitter=(0.75, 1.25), sleep=clock.sleep,
                      clock=clock)
    for _ in range(6):
        backoff.wait()
    for waited, delay in zip(clock.slept, [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]):
        assert 0.75 * delay <= waited <= 1.25 * delay
    assert backoff.waits == 6 and abs(backoff.waited_s - sum(clock.slept)) < 1e-9


def test_the_budget_ends_the_run_and_no_wait_overruns_it() -> None:
    random.seed(11)
    clock = FakeClock()
    backoff = Backoff(3.0, first_delay_s=1.0, max_delay_s=10.0, jitter=(1.0, 1.0), sleep=clock.sleep,
                      clock=clock)
    assert not backoff.exhausted()
    backoff.wait()  # 1 s
    assert not backoff.exhausted(counting_next_wait=True)  # 1 + 2 <= 3
    backoff.wait()  # 2 s: the budget is spent
    assert backoff.exhausted() and backoff.remaining_s == 0.0
    backoff.wait()  # a wait past the budget sleeps nothing
    assert clock.slept == [1.0, 2.0, 0.0]


def test_the_next_wait_that_would_overrun_the_budget_counts_as_exhausted() -> None:
    clock = FakeClock()
    backoff = Backoff(2.5, first_delay_s=1.0, max_delay_s=10.0, jitter=(1.0, 1.0), sleep=clock.sleep,
                      clock=clock)
    backoff.wait()  # waited 1, next delay 2: 3 > 2.5
    assert not backoff.exhausted() and backoff.exhausted(counting_next_wait=True)


def test_a_count_bounds_the_run_as_well() -> None:
    clock = FakeClock()
    backoff = Backoff(float("inf"), first_delay_s=0.01, max_delay_s=0.1, max_tries=2, sleep=clock.sleep,
                      clock=clock)
    backoff.wait()
    assert not backoff.exhausted()
    backoff.wait()
    assert backoff.exhausted()

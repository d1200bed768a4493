"""The stream lock: of starts racing for a free lock on a local file system exactly one wins, at once."""
from __future__ import annotations

import threading
import time

import pytest

from airflow_provider_mysqlcdc.engine.lake import stream_lock
from airflow_provider_mysqlcdc.engine.lake.stream_lock import StreamLock, StreamLocked


def test_racing_starts_on_a_free_local_lock_give_one_holder_without_waiting(tmp_path, monkeypatch):
    # a start that waited out the write-then-verify pause would show here
    monkeypatch.setattr(stream_lock, "SETTLE_SECONDS", 30.0)
    for round_ in range(20):
        checkpoint = str(tmp_path / f"round-{round_}")
        locks = [StreamLock(checkpoint, description=f"racer {i}") for i in range(4)]
        outcomes: list[str] = []
        barrier = threading.Barrier(len(locks))

        def start(lock: StreamLock, barrier: threading.Barrier, outcomes: list[str]) -> None:
            barrier.wait()
            try:
                lock.acquire()
                outcomes.append("won")
            except StreamLocked as exc:
                outcomes.append(str(exc))

        started = time.monotonic()
        threads = [threading.Thread(target=start, args=(lock, barrier, outcomes)) for lock in locks]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert time.monotonic() - started < 10
        assert outcomes.count("won") == 1, outcomes
        holder = next(lock for lock in locks if lock.owner is not None)
        assert all("another stream runs on this checkpoint" in o and holder.description in o
                   for o in outcomes if o != "won"), outcomes
        holder.release()
        assert StreamLock(checkpoint).read() is None
        assert not list((tmp_path / f"round-{round_}" / "mysqlcdc").glob("*.tmp-*")), "no temporary file left"


def test_a_held_lock_is_refused_and_a_released_one_taken_again(tmp_path):
    checkpoint = str(tmp_path)
    first = StreamLock(checkpoint, description="first")
    first.acquire()
    with pytest.raises(StreamLocked, match="first"):
        StreamLock(checkpoint).acquire()
    first.release()
    second = StreamLock(checkpoint)
    second.acquire()
    assert second.read() is not None and second.read().token == second.owner.token
    second.release()

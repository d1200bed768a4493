"""A StatsD server on loopback for the metrics tests: a UDP socket that keeps every line it receives, and
Airflow's metrics pointed at it (``AIRFLOW__METRICS__*`` in the environment, and the task SDK's ``Stats``
initialised again from that configuration, as a task process does when it starts)."""
from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Self


@dataclass(frozen=True)
class Received:
    """One StatsD line: ``<prefix>.<name>[,tag=value...]:<value>|<type>``, tags as Influx-style StatsD."""

    name: str
    value: float
    kind: str  # g, c, ms
    tags: dict[str, str]

    @classmethod
    def parse(cls, line: str, prefix: str) -> Received | None:
        head, _, rest = line.partition(":")
        value, _, kind = rest.partition("|")
        name, *tags = head.split(",")
        if not name.startswith(prefix + "."):
            return None
        return cls(name[len(prefix) + 1:], float(value), kind.split("|")[0],
                   dict(t.split("=", 1) for t in tags if "=" in t))


class StatsdListener:
    def __init__(self, prefix: str = "airflow") -> None:
        self.prefix = prefix
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="statsd-listener")

    def _run(self) -> None:
        while not self._halt.is_set():
            try:
                data = self.sock.recv(65535)
            except TimeoutError:
                continue
            except OSError:
                return
            self.lines.extend(data.decode(errors="replace").splitlines())

    def received(self, name_prefix: str = "") -> list[Received]:
        out = [Received.parse(line, self.prefix) for line in list(self.lines)]
        return [r for r in out if r is not None and r.name.startswith(name_prefix)]

    def wait_for(self, name: str, count: int = 1, timeout: float = 30) -> list[Received]:
        """The samples of ``name`` once ``count`` of them arrived (UDP: a moment after they were sent)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [r for r in self.received() if r.name == name]
            if len(found) >= count:
                return found
            time.sleep(0.05)
        raise AssertionError(f"no {name} received; got {sorted({r.name for r in self.received()})}")

    def env(self) -> dict[str, str]:
        """Airflow's configuration for StatsD to this listener, with tags in the names (Influx style)."""
        return {"AIRFLOW__METRICS__STATSD_ON": "True", "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
                "AIRFLOW__METRICS__STATSD_PORT": str(self.port),
                "AIRFLOW__METRICS__STATSD_PREFIX": self.prefix,
                "AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED": "True"}

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._halt.set()
        self._thread.join(timeout=5)
        self.sock.close()


@contextlib.contextmanager
def airflow_statsd(monkeypatch) -> Iterator[StatsdListener]:
    """A listener, and this process's Airflow metrics sent to it until the block ends (then off again)."""
    from airflow.sdk.observability import stats
    from airflow.sdk.observability.metrics.stats_utils import get_stats_factory

    with StatsdListener() as listener:
        for name, value in listener.env().items():
            monkeypatch.setenv(name, value)
        stats.initialize(factory=get_stats_factory(), export_legacy_names=False)
        try:
            yield listener
        finally:
            for name in listener.env():
                monkeypatch.delenv(name)
            stats.initialize(factory=get_stats_factory(), export_legacy_names=False)

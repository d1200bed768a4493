"""Wall time and CPU share of each side of a benchmark: the client tree, the MySQL server, the rest.

The client side is a process tree: this Python process (or another root, e.g. the suite process when a Spark
driver runs in a child) and its descendants -- Spark JVMs, executors of a standalone cluster started from it,
Python workers -- including what they reaped. The MySQL server is a child too and is excluded from that tree
and counted on its own, as are load generators (``extra``: a writer, a raw binlog tailer) so the share of the
system under test is not inflated by the load that drives it. ``other`` is the rest of the machine's busy
CPU: other work on the same cores skews the figures, look at it before trusting a ratio.
CPU shares: 100% = one core.
"""
from __future__ import annotations

import os
import platform
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

import psutil


def _excluded(exclude: int | Iterable[int] | None) -> set[int]:
    if exclude is None:
        return set()
    return {exclude} if isinstance(exclude, int) else set(exclude)


def tree_cpu(root: psutil.Process, exclude: int | Iterable[int] | None = None) -> float:
    """CPU seconds of ``root`` and its live descendants, plus what their reaped children used."""
    skip = _excluded(exclude)
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        if proc.pid in skip:
            continue
        try:
            t = proc.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def cpu_by_kind(root: psutil.Process,
                exclude: int | Iterable[int] | None = None) -> dict[int, tuple[str, float, float]]:
    """pid -> (kind, own CPU, CPU of its reaped children); kind: driver, jvm or python workers."""
    skip = _excluded(exclude)
    out = {}
    for proc in [root, *root.children(recursive=True)]:
        if proc.pid in skip:
            continue
        try:
            t, name = proc.cpu_times(), proc.name()
        except psutil.Error:
            continue
        kind = "driver" if proc.pid == root.pid else "jvm" if name == "java" else "python workers"
        # What the JVM reaped were Python daemons/workers; what a Python process reaped stays with its kind.
        out[proc.pid] = (kind, t.user + t.system, t.children_user + t.children_system)
    return out


def kind_deltas(before: dict[int, tuple[str, float, float]],
                after: dict[int, tuple[str, float, float]]) -> dict[str, float]:
    totals: dict[str, float] = {"driver": 0.0, "jvm": 0.0, "python workers": 0.0}
    for sign, snap in ((-1, before), (1, after)):
        for kind, own, reaped in snap.values():
            totals[kind] += sign * own
            totals["python workers" if kind == "jvm" else kind] += sign * reaped
    return totals


def tree_rss(root: psutil.Process, exclude: int | Iterable[int] | None = None) -> int:
    skip = _excluded(exclude)
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        if proc.pid in skip:
            continue
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            continue
    return total


def process_cpu(pid: int) -> float:
    """CPU seconds of one process (0 once it is gone)."""
    try:
        t = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return t.user + t.system


@dataclass
class Measure:
    wall: float = 0.0
    client: float = 0.0  # CPU seconds
    server: float = 0.0  # CPU seconds
    peak_rss_mb: float = 0.0
    other: float = 0.0  # CPU seconds of every other process on the machine (other work sharing the cores)
    client_by_kind: dict[str, float] | None = None  # CPU seconds of the driver, the JVM, the Python workers
    extra: dict[str, float] = field(default_factory=dict)  # CPU seconds of named load generators

    def __add__(self, other: Measure) -> Measure:
        extra = {k: self.extra.get(k, 0.0) + other.extra.get(k, 0.0) for k in {*self.extra, *other.extra}}
        return Measure(self.wall + other.wall, self.client + other.client, self.server + other.server,
                       max(self.peak_rss_mb, other.peak_rss_mb), self.other + other.other, None, extra)

    def share(self, seconds: float) -> float:
        return seconds / self.wall if self.wall > 0 else 0.0

    def shares(self) -> str:
        return (f"client {self.share(self.client):.0%} / server {self.share(self.server):.0%} of a core "
                f"(other processes {self.share(self.other):.0%})")

    def compact(self) -> str:
        """``client / server (other)`` for a table cell, plus named load generators."""
        text = f"{self.share(self.client):.0%} / {self.share(self.server):.0%} ({self.share(self.other):.0%})"
        for name, seconds in sorted(self.extra.items()):
            text += f"; {name} {self.share(seconds):.0%}"
        return text


def machine_busy() -> float:
    t = psutil.cpu_times()
    idle = t.idle + getattr(t, "iowait", 0.0)
    return sum(t) - idle - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)  # guest time is in user


class Timer:
    """Wall time, client-tree CPU, server CPU and named extra processes' CPU of a block; samples the client
    tree's RSS every 0.5 s. ``root``: the client tree's root pid (default: this process)."""

    def __init__(self, server_pid: int, root: int | None = None, exclude: Iterable[int] = (),
                 extra: dict[str, int] | None = None) -> None:
        self.me = psutil.Process(root) if root else psutil.Process()
        self.server_pid = server_pid
        self.extra = dict(extra or {})
        self.skip = {server_pid, *exclude, *self.extra.values()}
        self.m = Measure()
        self._stop = threading.Event()
        self._peak = 0

    def _sample(self) -> None:
        while not self._stop.wait(0.5):
            self._peak = max(self._peak, tree_rss(self.me, self.skip))

    def _extra_cpu(self) -> dict[str, float]:
        return {name: process_cpu(pid) for name, pid in self.extra.items()}

    def __enter__(self) -> Self:
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        self._kinds = cpu_by_kind(self.me, self.skip)
        self._extra0 = self._extra_cpu()
        self._t0 = (time.perf_counter(), tree_cpu(self.me, self.skip), process_cpu(self.server_pid),
                    machine_busy())
        return self

    def __exit__(self, *exc: object) -> None:
        wall, client, server = time.perf_counter(), tree_cpu(self.me, self.skip), process_cpu(self.server_pid)
        busy = machine_busy()
        extra = {k: max(0.0, v - self._extra0.get(k, 0.0)) for k, v in self._extra_cpu().items()}
        kinds = kind_deltas(self._kinds, cpu_by_kind(self.me, self.skip))
        self._stop.set()
        self._thread.join()
        self._peak = max(self._peak, tree_rss(self.me, self.skip))
        client, server = client - self._t0[1], server - self._t0[2]
        other = max(0.0, busy - self._t0[3] - client - server - sum(extra.values()))
        self.m = Measure(wall - self._t0[0], client, server, self._peak / 2**20, other, kinds, extra)


@contextmanager
def measure(server_pid: int, root: int | None = None, exclude: Iterable[int] = (),
            extra: dict[str, int] | None = None) -> Iterator[Measure]:
    """``Timer`` as a context yielding a ``Measure`` that is filled in when the block ends (the protocol of
    ``bench/planning.py``'s own ``measure``)."""
    m = Measure()
    with Timer(server_pid, root, exclude, extra) as timer:
        yield m
    m.__dict__.update(timer.m.__dict__)


def settle(server_pid: int, idle_cpu: float = 0.05, timeout: float = 120.0) -> None:
    """Wait until the server is idle (a load leaves dirty pages and purge work behind)."""
    proc = psutil.Process(server_pid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = sum(proc.cpu_times()[:2])
        time.sleep(1.0)
        if sum(proc.cpu_times()[:2]) - before < idle_cpu:
            return


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def os_name() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return f"{line.split('=', 1)[1].strip(chr(34))}, Linux {platform.release()}"
    except OSError:
        pass
    return platform.platform()


def machine() -> str:
    mem = psutil.virtual_memory().total / 2**30
    return f"{os.cpu_count()} cores ({cpu_model()}), {mem:.0f} GB RAM"

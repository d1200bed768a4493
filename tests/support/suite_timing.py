"""Where the suite's time goes, every run: per-test wall time (setup, call, teardown), the machine's load, and
a per-test budget that fails the run.

Each test's phases are timed, and around each test the machine is read from ``/proc``: CPU time of the suite's
own processes (every process started with its environment: servers, Spark, Airflow, browsers), CPU time of
every other process on the machine, and steal time (a neighbour on the host). At the end the suite prints its
slowest tests, its total, and the machine's load and CPU use at start and end, so a slow run says whether the
code or the machine was slow; every test's figures go to ``test-artifacts/durations.json``
(``$MYSQLCDC_TEST_DURATIONS``) after a run of the whole suite, and to ``durations-partial.json`` beside
it after a run of some tests, so a single test run afterwards does not overwrite the last full run's.

The suite's own budget: ``SUITE_BUDGET`` seconds on 2 reference cores (scaled by ``slowness``); the
summary says when a whole run went over it.

The budget: a test (setup and teardown included) may take ``MYSQLCDC_TEST_BUDGET`` seconds (default
``DEFAULT_BUDGET``) of wall time on the reference machine, scaled up on a slower one (a calibration loop timed
at the start: ``slowness``) and by the cores that others took from the suite while it ran (busy processes
outside the suite, steal). A test over its budget fails the run, named with its figures. A test marked
``@pytest.mark.budget(seconds)`` has that base instead (the example DAG's end-to-end test, which says why).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DURATIONS_ENV = "MYSQLCDC_TEST_DURATIONS"
BUDGET_ENV = "MYSQLCDC_TEST_BUDGET"
DEFAULT_BUDGET = 120.0  # seconds of wall time per test on 2 quiet cores, setup and teardown included
SUITE_BUDGET = 20 * 60.0  # seconds of wall time for the whole suite on 2 quiet reference cores
SLOWEST_SHOWN = 15
_TICK = os.sysconf("SC_CLK_TCK")


MARKER_ENV = "MYSQLCDC_TEST_RUN"  # set by this plugin; every process the suite starts inherits it


@dataclass(frozen=True)
class MachineReading:
    """CPU seconds since boot at one instant: the machine's, and each process's by whose it is."""

    wall: float
    load: tuple[float, float, float]
    busy: float  # every core's non-idle time (steal excluded)
    steal: float  # time the hypervisor gave this machine's cores to someone else
    others: dict[tuple[int, int], float]  # (pid, start tick) -> CPU seconds with reaped children, not ours

    @classmethod
    def now(cls, marker: str) -> MachineReading:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in (fields + ["0"] * 8)[:8])
        return cls(
            wall=time.monotonic(),
            load=os.getloadavg(),
            busy=(user + nice + system + irq + softirq) / _TICK,
            steal=steal / _TICK,
            others=_foreign_processes(marker),
        )


_OURS: dict[tuple[int, int], bool] = {}  # (pid, start tick) -> started by the suite: decided once


def _foreign_processes(marker: str) -> dict[tuple[int, int], float]:
    """CPU seconds of each live process the suite did not start: other test runs, a stream left running, a
    neighbour's build, the kernel's threads. The suite's own are those whose environment holds ``marker``
    (inherited, so servers and Spark JVMs stay ours after their parent died) and the children of its own
    (a process started with an environment of its own, a browser's sandboxed helpers)."""
    me = os.getpid()
    seen: dict[int, tuple[int, int, float]] = {}  # pid -> (parent pid, start tick, CPU seconds)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        rest = stat[stat.rindex(")") + 2:].split()  # the name may hold spaces and parentheses
        pid = int(entry.name)
        # utime, stime and the reaped children's cutime, cstime; but init reaps orphans, the suite's among
        # them (a killed stream's Spark JVM): its own time only
        cpu = sum(int(v) for v in rest[11:13 if pid == 1 else 15]) / _TICK
        seen[pid] = (int(rest[1]), int(rest[19]), cpu)

    def ours(pid: int) -> bool:
        parent, start, _cpu = seen[pid]
        key = (pid, start)
        if key not in _OURS:
            if pid == me:  # its environment was read before the marker was set
                _OURS[key] = True
            else:
                try:
                    own = marker.encode() in Path(f"/proc/{pid}/environ").read_bytes()
                except OSError:
                    own = False  # a kernel thread, or gone
                _OURS[key] = own or (parent in seen and parent != pid and ours(parent))
        return _OURS[key]

    return {(pid, start): cpu for pid, (_p, start, cpu) in seen.items() if not ours(pid)}


@dataclass(frozen=True)
class Usage:
    """What happened between two readings."""

    seconds: float
    suite_cpu: float  # the machine's busy time less the others'
    others_cpu: float  # busy time of processes outside the suite
    steal: float

    @classmethod
    def between(cls, start: MachineReading, end: MachineReading) -> Usage:
        others = sum(max(cpu - start.others.get(key, 0.0), 0.0) for key, cpu in end.others.items())
        return cls(
            seconds=end.wall - start.wall,
            suite_cpu=max(end.busy - start.busy - others, 0.0),
            others_cpu=others,
            steal=max(end.steal - start.steal, 0.0),
        )

    def cores_taken(self) -> float:
        """Cores others had on average: busy processes outside the suite, and the host's steal."""
        return (self.others_cpu + self.steal) / self.seconds if self.seconds > 0 else 0.0


@dataclass
class TestTiming:
    nodeid: str
    phases: dict[str, float] = field(default_factory=dict)
    outcome: str = "passed"
    suite_cpu: float = 0.0
    others_cpu: float = 0.0
    steal: float = 0.0
    budget: float = 0.0

    @property
    def total(self) -> float:
        return sum(self.phases.values())


REFERENCE_LOOP_S = 0.095  # the calibration loop's best time, in this plugin, where the budget was set


def slowness() -> float:
    """How much slower one core of this machine runs a fixed Python loop than the reference machine (at
    least 1): a slower or throttled CPU gets a larger budget, as a busy one does."""

    def loop() -> float:
        started, total = time.perf_counter(), 0
        for i in range(2_000_000):
            total += i * i % 7
        return time.perf_counter() - started

    return max(1.0, min(loop() for _ in range(3)) / REFERENCE_LOOP_S)


def _budget(base: float, usage: Usage, cores: int) -> float:
    """``base`` on a machine of its own; more when others took cores from the suite (at least half a core
    stays counted as the suite's, so a saturated machine scales the budget by at most ``2 * cores``)."""
    left = max(cores - usage.cores_taken(), 0.5)
    return base * cores / left


class SuiteTiming:
    """The pytest plugin (registered by ``tests/conftest.py``)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.slowness = slowness()
        self.base_budget = float(os.environ.get(BUDGET_ENV) or DEFAULT_BUDGET) * self.slowness
        self.cores = os.cpu_count() or 1
        self.marker = f"{MARKER_ENV}={os.getpid()}-{time.time_ns()}"
        os.environ[MARKER_ENV] = self.marker.split("=", 1)[1]
        self.start = MachineReading.now(self.marker)
        self.tests: dict[str, TestTiming] = {}
        self._test_start: MachineReading | None = None

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        before = MachineReading.now(self.marker)
        yield
        usage = Usage.between(before, MachineReading.now(self.marker))
        timing = self.tests.get(item.nodeid)
        if timing is not None:
            timing.suite_cpu, timing.others_cpu, timing.steal = usage.suite_cpu, usage.others_cpu, usage.steal
            own = item.get_closest_marker("budget")  # a test that says why it needs more (its docstring)
            base = float(own.args[0]) * self.slowness if own is not None else self.base_budget
            timing.budget = _budget(base, usage, self.cores)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        timing = self.tests.setdefault(report.nodeid, TestTiming(report.nodeid))
        timing.phases[report.when] = timing.phases.get(report.when, 0.0) + report.duration
        if report.failed:
            timing.outcome = "failed"
        elif report.skipped and report.when != "teardown":
            timing.outcome = "skipped"

    def over_budget(self) -> list[TestTiming]:
        return [t for t in self.tests.values() if t.budget and t.total > t.budget]

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.end = MachineReading.now(self.marker)
        self._write()
        if self.over_budget() and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _write(self) -> None:
        name = "durations.json" if self._whole_suite() else "durations-partial.json"
        path = Path(os.environ.get(DURATIONS_ENV) or REPO / "test-artifacts" / name)
        path.parent.mkdir(parents=True, exist_ok=True)
        usage = Usage.between(self.start, self.end)
        doc = {
            "seconds": round(usage.seconds, 1),
            "cores": self.cores,
            "machine": {"start": _reading(self.start), "end": _reading(self.end), "usage": asdict(usage)},
            "budget": self.base_budget,
            "slowness": round(self.slowness, 2),
            "tests": [asdict(t) | {"total": round(t.total, 3)}
                      for t in sorted(self.tests.values(), key=lambda t: -t.total)],
        }
        path.write_text(json.dumps(doc, indent=1))
        self.path = path

    def _whole_suite(self) -> bool:
        """Run as ``make test`` runs it: no test selected by path, keyword or marker."""
        args = [a for a in self.config.args if Path(a).resolve() != REPO / "tests"]
        selected = self.config.getoption("keyword", "") or self.config.getoption("markexpr", "")
        return not args and not selected

    def pytest_terminal_summary(self, terminalreporter) -> None:
        write = terminalreporter.write_line
        usage = Usage.between(self.start, self.end)
        terminalreporter.section("where the time went")
        for t in sorted(self.tests.values(), key=lambda t: -t.total)[:SLOWEST_SHOWN]:
            parts = [f"{k} {v:.1f}" for k, v in t.phases.items() if v >= 0.05]
            parts += [f"{t.suite_cpu:.0f} cpu-s, others took {t.others_cpu + t.steal:.0f}"]
            write(f"{t.total:7.1f}s  {t.nodeid}  ({'; '.join(parts)})")
        write(f"total: {len(self.tests)} tests in {usage.seconds:.0f}s ({usage.seconds / 60:.1f} min) on "
              f"{self.cores} cores")
        write(f"load average at start {_load(self.start)}, at end {_load(self.end)}")
        write(f"cpu: the suite's processes {usage.suite_cpu:.0f} cpu-s, others {usage.others_cpu:.0f} cpu-s, "
              f"steal {usage.steal:.0f} cpu-s (machine capacity {usage.seconds * self.cores:.0f} cpu-s)")
        write(f"a core of this machine runs the calibration loop {self.slowness:.2f}x as slow as the "
              f"reference one: each test's budget is {self.base_budget:.0f}s, more while others took cores")
        write(f"every test's figures: {self.path}")
        suite_budget = SUITE_BUDGET * self.slowness
        if self._whole_suite() and usage.seconds > suite_budget:
            terminalreporter.write_line(
                f"OVER THE SUITE'S BUDGET: {usage.seconds / 60:.1f} min, budget {suite_budget / 60:.1f} min "
                f"({SUITE_BUDGET / 60:.0f} min on the reference machine): look at the slowest tests above",
                red=True, bold=True,
            )
        for t in self.over_budget():
            terminalreporter.write_line(
                f"OVER BUDGET: {t.nodeid} took {t.total:.1f}s, budget {t.budget:.0f}s "
                f"({self.base_budget:.0f}s on this machine, scaled by the cores others took: "
                f"{t.others_cpu + t.steal:.0f} cpu-s); make it share what it starts or wait on a condition, "
                f"or make the product faster ({BUDGET_ENV} sets the base)",
                red=True, bold=True,
            )


def _reading(r: MachineReading) -> dict:
    return {"load": list(r.load), "busy_cpu_s": round(r.busy, 1), "steal_cpu_s": round(r.steal, 1)}


def _load(r: MachineReading) -> str:
    return "/".join(f"{v:.2f}" for v in r.load)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(SuiteTiming(config), "mysqlcdc-suite-timing")

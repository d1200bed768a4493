"""Sends samples through Airflow's metrics facade (``Stats``) in the task process: StatsD, Datadog or
OpenTelemetry, whichever the user configured for Airflow; nothing is done when none is on.

A metric never fails a task: a send that raises is logged once and the task goes on.
"""
from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_mysqlcdc.metrics.names import COUNTER, GAUGE

if TYPE_CHECKING:  # the samples module loads the engine's status: only where metrics are on
    from airflow_provider_mysqlcdc.metrics.samples import Sample

log = logging.getLogger(__name__)

_BACKENDS = ("statsd_on", "statsd_datadog_enabled", "otel_on")
_NOT_IN_NAMES = re.compile(r"[^A-Za-z0-9_.-]")  # Airflow drops a metric whose name (tags included) has one


def metrics_on() -> bool:
    """Whether Airflow sends metrics (``[metrics] statsd_on``, ``statsd_datadog_enabled`` or ``otel_on``)."""
    try:
        from airflow.sdk.configuration import conf
    except ImportError:  # Airflow before 3.2
        from airflow.configuration import conf
    return any(conf.getboolean("metrics", name, fallback=False) for name in _BACKENDS)


def _stats() -> Any:
    try:
        from airflow.sdk.observability import stats
    except ImportError:  # Airflow before 3.2
        from airflow.stats import Stats as stats  # type: ignore[no-redef]
    return stats


class Emitter:
    """``emit(samples)``: each sample as a gauge, a counter (``incr``) or a timing."""

    def __init__(self) -> None:
        self.stats = _stats()
        self._failed = False

    def emit(self, samples: Iterable[Sample]) -> None:
        for sample in samples:
            try:
                self._send(sample)
            except Exception as exc:  # noqa: BLE001 - metrics never fail the task
                if not self._failed:
                    log.warning("sending metric %s failed (%s): metrics may be missing", sample.name, exc)
                    self._failed = True

    def _send(self, sample: Sample) -> None:
        tags = {k: _NOT_IN_NAMES.sub("_", str(v)) for k, v in sample.tags.items()}
        kind = sample.metric.kind
        if kind == GAUGE:
            self.stats.gauge(sample.name, sample.value, tags=tags)
        elif kind == COUNTER:
            self.stats.incr(sample.name, count=int(sample.value), tags=tags)
        else:
            self.stats.timing(sample.name, timedelta(seconds=sample.value), tags=tags)

"""The OpenLineage methods our operators offer the OpenLineage provider's listener (called only where it is
installed; nothing of OpenLineage is imported before).

``ReportsLineage``: an operator that reads or writes datasets says what in ``_lineage(detailed)``: names only
before it runs and when it failed (no query), schemas and run details once it completed.
``NoDatasets``: a task that reads and writes no dataset of its own (the group runner's start and stop).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage


class ReportsLineage:
    def _lineage(self, detailed: bool) -> OperatorLineage:
        raise NotImplementedError

    def get_openlineage_facets_on_start(self) -> OperatorLineage:
        return self._lineage(detailed=False)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage:
        return self._lineage(detailed=True)

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> OperatorLineage:
        return self._lineage(detailed=False)


class NoDatasets:
    """Its events carry the job (without these methods, OpenLineage would mark it an operator it knows nothing
    about)."""

    def get_openlineage_facets_on_start(self) -> OperatorLineage:
        from airflow.providers.openlineage.extractors import OperatorLineage

        return OperatorLineage()

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage:
        return self.get_openlineage_facets_on_start()

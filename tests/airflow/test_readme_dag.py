"""The README's minimal DAG is a valid DAG as written: it imports, its setup and teardown are wired as Airflow
requires (``dag.validate()``), and the snapshot tasks defer to the group runner."""
from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_minimal_dag_builds_and_validates():
    text = README.read_text(encoding="utf-8")
    section = text.split("## A minimal DAG", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    namespace: dict = {}
    exec(compile(code, "README.md (A minimal DAG)", "exec"), namespace)  # noqa: S102 - our own README
    from airflow.sdk import DAG

    dag = next(t.dag for t in namespace.values() if hasattr(t, "task_id") and hasattr(t, "dag"))
    assert isinstance(dag, DAG)
    dag.validate()
    tasks = dag.task_dict
    assert tasks["start_runner"].is_setup and tasks["stop_runner"].is_teardown
    assert tasks["snapshot_phase.snapshot_chunk_group"].partial_kwargs["deferrable"] is True
    downstream = {t.task_id for t in tasks["start_runner"].downstream_list}
    assert "snapshot_phase.snapshot_chunk_group" in downstream

"""A DAG run's conf may hold only the DAG's params: Airflow keeps an unknown key (``{"tabels": ...}``) without
a word, and the run goes on with the defaults, on tables nobody asked for, writing a pipeline nobody wanted.
The plan task (the first of a pipeline's runs) refuses such a conf before anything is read or written, naming
the key and the param it was likely meant to be.
"""
from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError


def unknown_keys(conf: Mapping[str, Any] | None, params: Iterable[str]) -> list[str]:
    """The conf's keys that name no param, in the conf's order."""
    known = set(params)
    return [key for key in (conf or {}) if key not in known]


def unknown_conf_message(dag_id: str, unknown: list[str], params: list[str]) -> str:
    named = []
    for key in unknown:
        close = difflib.get_close_matches(str(key), params, n=1, cutoff=0.6)
        named.append(f"{key!r} (did you mean {close[0]!r}?)" if close else repr(key))
    keys = "a key" if len(unknown) == 1 else "keys"
    return (f"the conf of this run of DAG {dag_id} has {keys} the DAG has no param for: {', '.join(named)}. "
            f"Nothing was read or written: trigger the run again with the "
            f"DAG's params ({', '.join(params)}), or give the plan task allow_unknown_conf=True if other "
            f"tasks of the DAG read these keys")


def check_run_conf(context: Mapping[str, Any]) -> None:
    """Refuse a run whose conf has keys the DAG declares no param for (a DAG without params is not checked:
    it has said nothing about its conf)."""
    dag = context.get("dag")
    params = list(getattr(dag, "params", None) or {})
    if not params:
        return
    conf = getattr(context.get("dag_run"), "conf", None)
    unknown = unknown_keys(conf, params)
    if unknown:
        raise ConfigurationError(unknown_conf_message(str(getattr(dag, "dag_id", "?")), unknown, params))

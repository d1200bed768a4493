"""Loading the compiled framer, or saying why it is absent.

The package must import where the extension was not built (no C compiler at install time): the reader then
keeps mysql-replication's parsing of every event, said once per process in the log, never silently."""
from __future__ import annotations

import logging
import threading
from types import ModuleType

_log = logging.getLogger(__name__)
_lock = threading.Lock()
_warned = False

_frames: ModuleType | None
_missing: str | None
try:
    from airflow_provider_mysqlcdc.engine.binlog.event_framer import _frames as _built

    _frames, _missing = _built, None
except ImportError as exc:  # not built, or built for another interpreter
    _frames = None
    _missing = (
        f"the compiled binlog event framer is not available ({exc}); every event is parsed by "
        "mysql-replication in pure Python, several times slower on OLTP binlogs. Reinstall with a C compiler "
        "present (make setup, or pip install -e . with gcc and the Python headers)"
    )


def loaded() -> ModuleType | None:
    """The compiled module or None, without a word in the log."""
    return _frames


def module() -> ModuleType | None:
    """The compiled module, or None (logged once per process)."""
    global _warned
    if _frames is None and not _warned:
        with _lock:
            if not _warned:
                _warned = True
                _log.warning("%s", _missing)
    return _frames


def missing_reason() -> str | None:
    """Why the compiled framer is absent; None when it is loaded."""
    return _missing

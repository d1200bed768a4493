"""The collector pause over the stream's reads (engine/common/gc_pause.py)."""
from __future__ import annotations

import gc

import pytest

from airflow_provider_mysqlcdc.engine.common.gc_pause import gc_paused


def test_the_collector_is_off_inside_and_on_again_after_also_after_an_error() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():  # nested: one pause
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), gc_paused():
        raise ValueError("boom")
    assert gc.isenabled()


def test_a_collector_the_caller_turned_off_stays_off() -> None:
    gc.disable()
    try:
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()

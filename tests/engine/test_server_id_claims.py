"""A stream's server_id range claim, on the real server: a second claim of an overlapping range fails at once
naming both checkpoints, a disjoint one works, and a claim whose holder is gone (released, its session killed,
its process killed) frees itself. The claim through ``start_stream`` is in
tests/faults/test_server_id_ranges.py.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from airflow_provider_mysqlcdc.engine.chunk_store import ChunkStore
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
from airflow_provider_mysqlcdc.engine.stream import server_id_claims
from airflow_provider_mysqlcdc.engine.stream.server_id_claims import (
    ServerIdRangeTaken,
    claim_server_id_range,
    lock_name,
)
from tests.support.servers import with_query


def _settings(mysql_server, ids: str) -> MySQLSettings:
    return MySQLSettings.from_url(with_query(mysql_server.cdc_url, server_id=ids))


def _is_free(mysql_server, server_id: int) -> bool:
    with mysql_server.admin() as conn, conn.cursor() as cur:
        cur.execute("SELECT IS_FREE_LOCK(%s)", (lock_name(server_id),))
        return cur.fetchone()[0] == 1


def _freed(mysql_server, server_id: int, timeout: float = 10.0) -> bool:
    """The id's lock is free, or becomes free soon: a closed session's locks are freed by the server once it
    has processed the client's quit, a moment after the client returned from close()."""
    deadline = time.monotonic() + timeout
    while not _is_free(mysql_server, server_id):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_overlapping_ranges_fail_naming_both_checkpoints(mysql_server, tmp_path):
    store = str(tmp_path / "chunks.db")
    first = claim_server_id_range(_settings(mysql_server, "7100-7109"), "/ckpt/first", store)
    try:
        assert not _is_free(mysql_server, 7100) and not _is_free(mysql_server, 7109)
        started = time.monotonic()
        with pytest.raises(ServerIdRangeTaken) as refused:
            claim_server_id_range(_settings(mysql_server, "7105-7120"), "/ckpt/second", store)
        assert time.monotonic() - started < 5, "a second stream must fail at once"
        message = str(refused.value)
        assert "the stream on checkpoint /ckpt/second cannot claim its server_id range 7105-7120" in message
        assert ("server_id 7105 is held by the stream on checkpoint /ckpt/first "
                "(server_id range 7100-7109") in message
        assert f"MySQL connection {first.connection_id}" in message and "disjoint" in message, message
        assert "?server_id=" in message and "extra" in message, message
        assert _freed(mysql_server, 7110), "the refused claim keeps none of its ids"
        # the top id (mysqlcdc check's) counts too; a disjoint range is fine, side by side
        with pytest.raises(ServerIdRangeTaken, match="server_id 7109 is held by"):
            claim_server_id_range(_settings(mysql_server, "7109-7130"), "/ckpt/third", store)
        disjoint = claim_server_id_range(_settings(mysql_server, "7110-7119"), "/ckpt/disjoint", store)
        disjoint.release()
        disjoint.release()  # idempotent
    finally:
        first.release()
    assert _freed(mysql_server, 7100) and _freed(mysql_server, 7109)
    with ChunkStore(store) as chunk_store:
        assert chunk_store.stream_claim_holders(first.identity.token, first.connection_id) == []
    again = claim_server_id_range(_settings(mysql_server, "7105-7120"), "/ckpt/second", store)
    again.release()


def test_a_holder_in_another_chunk_store_is_named_by_its_session(mysql_server, tmp_path):
    first = claim_server_id_range(_settings(mysql_server, "7200-7209"), "/ckpt/a", str(tmp_path / "a.db"))
    try:
        with pytest.raises(ServerIdRangeTaken) as refused:
            claim_server_id_range(_settings(mysql_server, "7200-7201"), "/ckpt/b", str(tmp_path / "b.db"))
        message = str(refused.value)
        assert (f"another stream (MySQL connection {first.connection_id}; "
                "its checkpoint is not recorded") in message
    finally:
        first.release()


def test_a_dead_holder_frees_the_range(mysql_server, tmp_path):
    """A killed session (a KILL, a server-side timeout) and a killed process leave nothing behind."""
    store = str(tmp_path / "chunks.db")
    settings = _settings(mysql_server, "7300-7309")
    first = claim_server_id_range(settings, "/ckpt/killed-session", store)
    with mysql_server.admin() as conn, conn.cursor() as cur:
        cur.execute(f"KILL {int(first.connection_id)}")
    deadline = time.monotonic() + 10
    while not _is_free(mysql_server, 7300):
        assert time.monotonic() < deadline, "a killed session's locks stay held"
        time.sleep(0.1)
    claim_server_id_range(settings, "/ckpt/next", store).release()
    first.release()  # after its session died: nothing to do, no error

    script = textwrap.dedent(f"""
        import os, sys, time
        from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings
        from airflow_provider_mysqlcdc.engine.stream.server_id_claims import claim_server_id_range
        claim_server_id_range(MySQLSettings.from_url({settings.url_without_password()!r},
                                                     password={settings.password!r}),
                              "/ckpt/process", {store!r})
        print("claimed", flush=True)
        time.sleep(600)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "claimed"
        with pytest.raises(ServerIdRangeTaken, match="held by the stream on checkpoint /ckpt/process"):
            claim_server_id_range(settings, "/ckpt/after", store)
    finally:
        child.kill()
        child.wait()
    claim_server_id_range(settings, "/ckpt/after", store).release()  # retried over the holder's last moments


def test_a_lost_session_claims_the_range_again(mysql_server, tmp_path, monkeypatch):
    """The heartbeat finds its session gone (a server restart, a network cut) and takes the range again; if
    another stream took it meanwhile, the claim is reported lost."""
    monkeypatch.setattr(server_id_claims, "HEARTBEAT_S", 0.2)
    store = str(tmp_path / "chunks.db")
    settings = _settings(mysql_server, "7400-7404")
    lost: list[str] = []
    claim = claim_server_id_range(settings, "/ckpt/beating", store, on_lost=lost.append)
    try:
        killed = claim.connection_id
        with mysql_server.admin() as conn, conn.cursor() as cur:
            cur.execute(f"KILL {int(killed)}")
        deadline = time.monotonic() + 10
        while claim.connection_id == killed or _is_free(mysql_server, 7400):
            assert time.monotonic() < deadline, "the range was not claimed again"
            time.sleep(0.1)
        with pytest.raises(ServerIdRangeTaken, match="held by the stream on checkpoint /ckpt/beating"):
            claim_server_id_range(settings, "/ckpt/other", store)
        # its session dies again, and another stream takes the range before the heartbeat does
        monkeypatch.setattr(server_id_claims, "HEARTBEAT_S", 2.0)
        time.sleep(0.5)  # the heartbeat's current wait ends: its next one is long
        with mysql_server.admin() as conn, conn.cursor() as cur:
            cur.execute(f"KILL {int(claim.connection_id)}")
        while not _is_free(mysql_server, 7400):
            time.sleep(0.01)
        other = claim_server_id_range(settings, "/ckpt/other", store)
        try:
            deadline = time.monotonic() + 10
            while not lost:
                assert time.monotonic() < deadline, "the lost claim was not reported"
                time.sleep(0.1)
            assert "lost its server_id range" in lost[0] and "/ckpt/other" in lost[0], lost
        finally:
            other.release()
    finally:
        claim.release()
    assert lost == lost[:1]

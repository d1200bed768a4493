"""`mysqlcdc check` on a real server: a good server passes, each misconfiguration names its setting and
fix."""
from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator

import pytest

from airflow_provider_mysqlcdc.engine.source.readiness import _check_version
from airflow_provider_mysqlcdc.engine.source.server import ServerInfo, binlog_status_statement
from airflow_provider_mysqlcdc.engine.source.watermark_table import WATERMARK_DDL
from tests.support.servers import binlog_end, with_query

pytestmark = pytest.mark.both_flavors  # on MariaDB and on Oracle MySQL in every run


def run_check(url: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(["mysqlcdc", "check", "--mysql-url", url, *extra], check=False, capture_output=True,
                          text=True)


def assert_no_password(result: subprocess.CompletedProcess, password: str) -> None:
    assert password not in result.stdout and password not in result.stderr


@contextlib.contextmanager
def global_variable(server, name: str, value: object) -> Iterator[None]:
    with server.admin() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT @@GLOBAL.{name}")
        (old,) = cur.fetchone()
        cur.execute(f"SET GLOBAL {name} = %s", (value,))
    try:
        yield
    finally:
        with server.admin() as conn, conn.cursor() as cur:
            cur.execute(f"SET GLOBAL {name} = %s", (old,))


def test_good_server_passes(mysql_server):
    result = run_check(mysql_server.cdc_url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "result: ready for CDC" in result.stdout
    assert "current binlog position:" in result.stdout
    assert ("MariaDB" in result.stdout) or ("MySQL" in result.stdout)
    assert_no_password(result, mysql_server.cdc_url.split(":")[2].split("@")[0])


def test_json_report(mysql_server):
    result = run_check(mysql_server.cdc_url, "--json")
    report = json.loads(result.stdout)
    assert report["ok"] is True
    assert report["server"]["flavor"] in ("mariadb", "mysql")
    assert report["binlog"]["file"] and report["binlog"]["position"] > 0
    assert "password" not in result.stdout.lower()


# (variable, bad value, flavor or None for both)
MISCONFIGURATIONS = [
    ("binlog_format", "STATEMENT", None),
    ("binlog_format", "MIXED", None),
    ("binlog_row_image", "MINIMAL", None),
    ("binlog_row_image", "NOBLOB", None),
    ("binlog_row_metadata", "MINIMAL", None),
    ("log_bin_compress", "ON", "mariadb"),
    ("binlog_transaction_compression", "ON", "mysql"),
    ("binlog_row_value_options", "PARTIAL_JSON", "mysql"),
    ("binlog_order_commits", "OFF", "mysql"),
]


@pytest.mark.parametrize("name, bad, flavor", MISCONFIGURATIONS,
                         ids=[f"{n}={v}" for n, v, _ in MISCONFIGURATIONS])
def test_each_misconfiguration_is_named(mysql_server, server_flavor, name, bad, flavor):
    if flavor and flavor != server_flavor:
        pytest.skip(f"{name} exists only on {flavor}")
    with global_variable(mysql_server, name, bad):
        result = run_check(mysql_server.cdc_url)
    assert result.returncode == 1, result.stdout
    fail_lines = [line for line in result.stdout.splitlines() if "[FAIL]" in line]
    assert len(fail_lines) == 1, result.stdout
    assert name in fail_lines[0] and bad in fail_lines[0]
    assert f"fix: set {name}=" in result.stdout


def test_short_retention_warns(mysql_server, server_flavor):
    with global_variable(mysql_server, "binlog_expire_logs_seconds", 3600):
        result = run_check(mysql_server.cdc_url)
    assert result.returncode == 0, result.stdout
    assert "[WARN] binlog retention: binlogs expire after 1 h" in result.stdout
    assert "binlog_expire_logs_seconds" in result.stdout


def test_missing_replication_client(limited_user):
    result = run_check(limited_user("cdc_noclient", "SELECT, REPLICATION SLAVE"))
    assert result.returncode == 1
    assert "[FAIL] privilege REPLICATION CLIENT" in result.stdout
    assert "GRANT" in result.stdout
    assert_no_password(result, "limited-pw-123")


def test_missing_replication_slave(limited_user):
    result = run_check(limited_user("cdc_noslave", "SELECT, REPLICATION CLIENT"))
    assert result.returncode == 1
    assert "[FAIL] privilege REPLICATION SLAVE" in result.stdout
    assert "GRANT REPLICATION SLAVE ON *.*" in result.stdout


def test_wrong_password_is_clear_and_hidden(mysql_server):
    url = f"mysql://cdc:not-the-password-42@127.0.0.1:{mysql_server.port}/"
    result = run_check(url)
    assert result.returncode == 2
    assert "refused the credentials of cdc@127.0.0.1" in result.stderr
    assert "Traceback" not in result.stderr
    assert_no_password(result, "not-the-password-42")


def test_unreachable_server_is_clear():
    from airflow_provider_mysqlcdc.testing.mariadb import free_port

    result = run_check(f"mysql://cdc:pw-xyz@127.0.0.1:{free_port()}/")
    assert result.returncode == 2
    assert "cannot reach MySQL at 127.0.0.1" in result.stderr
    assert_no_password(result, "pw-xyz")


@pytest.mark.both_flavors
def test_server_without_binlog(server_flavor):
    """log_bin cannot change at runtime: start a second server without it."""
    from tests.support.servers import binlog_off, start_server

    with start_server(server_flavor, **binlog_off(server_flavor)) as server:
        result = run_check(server.cdc_url)
    assert result.returncode == 1
    assert "[FAIL] log_bin: log_bin = OFF" in result.stdout
    assert "--log-bin" in result.stdout


@pytest.mark.parametrize(
    "flavor, version, ok",
    [("mysql", (5, 7, 44), False), ("mysql", (8, 0, 36), True), ("mariadb", (10, 4, 30), False),
     ("mariadb", (10, 11, 6), True), ("mariadb", (11, 4, 2), True)],
)
def test_version_floor_by_flavor(flavor, version, ok):
    info = ServerInfo(flavor, version, "x", 1, None, "OFF")
    result = _check_version(info)
    assert (result.status == "ok") is ok
    if not ok:
        assert "binlog_row_metadata" in result.detail and "upgrade" in result.fix


@pytest.mark.parametrize(
    "flavor, version, statement",
    [("mysql", (8, 0, 36), "SHOW MASTER STATUS"), ("mysql", (8, 4, 0), "SHOW BINARY LOG STATUS"),
     ("mysql", (9, 7, 4), "SHOW BINARY LOG STATUS"), ("mariadb", (10, 11, 6), "SHOW MASTER STATUS"),
     ("mariadb", (11, 8, 2), "SHOW MASTER STATUS")],
)
def test_binlog_status_statement_by_flavor_and_version(flavor, version, statement):
    """8.4 removed SHOW MASTER STATUS, 8.0 has only it; MariaDB 10.11/11.x are not "newer than MySQL 8.4"."""
    assert binlog_status_statement(ServerInfo(flavor, version, "x", 1, None, "OFF")) == statement


@pytest.mark.both_flavors
def test_the_watermark_table_is_checked(mysql_server, mysql_db, limited_user):
    """Where chunk reads use it (read_view_mode=watermark_table here), a named watermark table must exist and
    take the CDC user's marker row (written, rolled back), and a source without one is warned about, with
    what to create. Under ``auto`` both flavors read without it (MariaDB's consistent snapshot, MySQL's
    executed GTIDs): a named one is never written (a read-only replica passes), a missing one not asked
    for."""
    user = limited_user("cdc_wm", "SELECT, SHOW DATABASES, REPLICATION SLAVE, REPLICATION CLIENT")
    base = with_query(user, read_view_mode="watermark_table")
    missing = run_check(with_query(base, watermark_table=f"{mysql_db}.nowhere"))
    assert missing.returncode == 1, missing.stdout
    assert f"[FAIL] watermark table: {mysql_db}.nowhere does not exist" in missing.stdout
    assert "CREATE TABLE" in missing.stdout
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute(WATERMARK_DDL.format(table="wm"))
    denied = run_check(with_query(base, watermark_table=f"{mysql_db}.wm"))
    assert denied.returncode == 1 and "[FAIL] watermark table: the CDC user may not write" in denied.stdout
    assert f"GRANT INSERT, UPDATE ON `{mysql_db}`.`wm`" in denied.stdout
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("GRANT INSERT, UPDATE ON wm TO 'cdc_wm'@'%'")
        before = binlog_end(conn)
    ok = run_check(with_query(base, watermark_table=f"{mysql_db}.wm"))
    assert ok.returncode == 0 and f"[ok  ] watermark table: {mysql_db}.wm is writable" in ok.stdout, ok.stdout
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM wm")
        assert cur.fetchone()[0] == 0  # rolled back
        assert binlog_end(conn) == before  # and nothing reached the binlog
    unnamed = run_check(base)
    assert unnamed.returncode == 0 and "[WARN] watermark table:" in unnamed.stdout
    assert "?watermark_table=" in unnamed.stdout
    assert "watermark table" not in run_check(user).stdout  # auto: not needed, not asked for
    unused = run_check(with_query(user, watermark_table=f"{mysql_db}.nowhere"))
    assert unused.returncode == 0, unused.stdout
    assert f"[ok  ] watermark table: {mysql_db}.nowhere is named but not used" in unused.stdout


# (read_view_mode, gtid_mode, enforce_gtid_consistency) -> the statuses of the gtid_mode and
# enforce_gtid_consistency lines (None: no line)
GTID_CASES = [
    ("gtid_executed", "ON", "ON", "ok", "ok"),
    ("gtid_executed", "OFF", "OFF", "fail", "fail"),
    ("gtid_executed", "ON_PERMISSIVE", "ON", "fail", "ok"),
    ("auto", "ON", "ON", "ok", "ok"),
    ("auto", "ON", "WARN", "ok", "fail"),  # auto picks gtid_executed where gtid_mode=ON
    ("auto", "OFF", "OFF", "warn", None),  # auto picks the watermark table: only failover is off
    ("watermark_table", "OFF", "OFF", "warn", None),
]


@pytest.mark.parametrize("mode, gtid_mode, enforce, gtid_status, enforce_status", GTID_CASES)
def test_gtid_settings_are_checked_where_the_mode_needs_them(mode, gtid_mode, enforce, gtid_status,
                                                             enforce_status):
    from types import SimpleNamespace

    from airflow_provider_mysqlcdc.engine.source.readiness import _check_gtids

    info = ServerInfo("mysql", (9, 7, 4), "9.7.4", 1, "3e11fa47-71ca-11e1-9e33-c80aa9429562", gtid_mode)
    results = {r.name: r for r in _check_gtids(
        info, {"gtid_mode": gtid_mode, "enforce_gtid_consistency": enforce},
        SimpleNamespace(read_view_mode=mode))}  # type: ignore[arg-type]
    assert results["gtid_mode"].status == gtid_status, results
    assert (results["enforce_gtid_consistency"].status if "enforce_gtid_consistency" in results
            else None) == enforce_status, results
    for result in results.values():
        if result.status != "ok":
            assert "gtid_mode=ON and enforce_gtid_consistency=ON" in result.fix, result
    if gtid_status == "fail":
        assert "read_view_mode=gtid_executed needs ON" in results["gtid_mode"].detail
    if gtid_status == "warn":
        assert "cannot fail over" in results["gtid_mode"].detail
    mariadb = ServerInfo("mariadb", (10, 11, 6), "10.11.6", 1, None, "ON")
    assert _check_gtids(mariadb, {"gtid_mode": None, "enforce_gtid_consistency": None},
                        SimpleNamespace(read_view_mode=mode)) == []  # type: ignore[arg-type]


def test_gtid_mode_on_the_server(mysql_server, server_flavor):
    """The test servers run with GTIDs on: ok. Oracle MySQL one step away from it (ON_PERMISSIVE): the
    check warns that the stream cannot fail over, and says how to turn GTIDs on."""
    result = run_check(mysql_server.cdc_url)
    if server_flavor != "mysql":
        assert "gtid_mode:" not in result.stdout, result.stdout
        return
    assert "[ok  ] gtid_mode: gtid_mode = ON" in result.stdout, result.stdout
    assert "[ok  ] enforce_gtid_consistency" in result.stdout, result.stdout
    with global_variable(mysql_server, "gtid_mode", "ON_PERMISSIVE"):
        permissive = run_check(with_query(mysql_server.cdc_url, read_view_mode="watermark_table"))
    assert permissive.returncode == 0, permissive.stdout
    assert "[WARN] gtid_mode: gtid_mode = ON_PERMISSIVE: offsets and chunk HWs record no GTID set" in (
        permissive.stdout), permissive.stdout
    assert "fix: set gtid_mode=ON and enforce_gtid_consistency=ON" in permissive.stdout

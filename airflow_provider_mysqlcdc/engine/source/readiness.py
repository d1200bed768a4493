"""Is this server ready for CDC? Each check names the setting that is wrong and how to fix it.

Used by ``mysqlcdc check``, the Airflow connection test and, before they write anything, the planner and the
stream (``require_ready``), so all of them say the same thing.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Literal

import pymysql

from airflow_provider_mysqlcdc.engine.common.errors import ServerNotReady
from airflow_provider_mysqlcdc.engine.source.connection import Connection, MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.source.server import (
    BinlogStatus,
    ServerInfo,
    current_binlog_status,
    global_variables,
    server_info,
    watermark_table_used,
)
from airflow_provider_mysqlcdc.engine.source.watermark_table import WATERMARK_DDL

Status = Literal["ok", "warn", "fail"]

MIN_VERSION = {"mysql": (8, 0, 0), "mariadb": (10, 5, 0)}
DEFAULT_MIN_RETENTION_HOURS = 24.0


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: Status
    detail: str
    fix: str = ""


@dataclass
class CheckReport:
    url: str
    server: ServerInfo | None = None
    binlog: BinlogStatus | None = None
    results: list[CheckResult] = field(default_factory=list)
    retention_s: float | None = None  # binlog retention; 0 = binlogs never expire automatically

    @property
    def ok(self) -> bool:
        return all(r.status != "fail" for r in self.results)

    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if r.status == "fail"]

    def as_dict(self) -> dict:
        return {
            "url": self.url,
            "ok": self.ok,
            "server": asdict(self.server) if self.server else None,
            "binlog": asdict(self.binlog) if self.binlog else None,
            "results": [asdict(r) for r in self.results],
        }

    def render(self) -> str:
        lines = [f"mysqlcdc check of {self.url}"]
        if self.server:
            s = self.server
            lines.append(
                f"server: {s.label} ({s.version_string}), server_id {s.server_id}, gtid {s.gtid_mode}"
            )
        for r in self.results:
            tag = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL"}[r.status]
            line = f"  [{tag}] {r.name}: {r.detail}"
            if r.fix and r.status != "ok":
                line += f"\n         fix: {r.fix}"
            lines.append(line)
        if self.binlog:
            lines.append(f"current binlog position: {self.binlog}")
        lines.append("result: ready for CDC" if self.ok
                     else f"result: {len(self.failures())} check(s) failed")
        return "\n".join(lines)


def check_server(
    settings: MySQLSettings, min_retention_hours: float = DEFAULT_MIN_RETENTION_HOURS
) -> CheckReport:
    """Run every CDC check. Connection failures raise ConnectionFailed (nothing else can be checked)."""
    report = CheckReport(url=settings.redacted_url())
    conn = connect(settings.with_database(None))
    try:
        info = server_info(conn)
        report.server = info
        report.results.append(_check_version(info))
        names = [
            "log_bin",
            "binlog_format",
            "binlog_row_image",
            "binlog_row_metadata",
            "binlog_row_value_options",
            "binlog_transaction_compression",
            "log_bin_compress",
            "binlog_order_commits",
            "binlog_expire_logs_seconds",
            "expire_logs_days",
            "gtid_mode",
            "enforce_gtid_consistency",
        ]
        variables = global_variables(conn, names)
        report.results.extend(_check_binlog_settings(info, variables))
        report.results.extend(_check_gtids(info, variables, settings))
        report.results.append(_check_retention(variables, min_retention_hours))
        report.retention_s = _retention_seconds(variables)
        client = _check_replication_client(conn, info)
        report.results.append(client[0])
        report.binlog = client[1]
        watermark = _check_watermark_table(conn, info, settings)
        if watermark is not None:
            report.results.append(watermark)
    finally:
        conn.close()
    report.results.append(_check_replication_slave(settings, report.binlog))
    return report


def require_ready(settings: MySQLSettings, what: str) -> CheckReport:
    """The checks of ``mysqlcdc check``, run before ``what`` (a plan, a stream) writes anything: a failed one
    stops it with every failure and its fix (a STATEMENT binlog would otherwise stream nothing, silently)."""
    report = check_server(settings, min_retention_hours=0)
    failures = report.failures()
    if failures:
        listed = "; ".join(f"{r.detail} (fix: {r.fix})" if r.fix else r.detail for r in failures)
        raise ServerNotReady(
            f"{report.url} is not ready for CDC, so {what} did not start and wrote nothing: {listed}. "
            "Run `mysqlcdc check` after fixing it"
        )
    return report


def retention_warning(retention_s: float | None, rows: int, rows_per_second: float) -> str | None:
    """Binlogs that expire before the snapshot is done (with a margin of half again) take with them the
    changes the stream needs from the smallest HW on: the pipeline would have to start over."""
    if not retention_s or rows <= 0 or rows_per_second <= 0:
        return None
    estimate_s = rows / rows_per_second
    if estimate_s * 1.5 < retention_s:
        return None
    return (
        f"binlog retention ({retention_s / 3600:g} h) is shorter than the estimated snapshot time "
        f"({estimate_s / 3600:.2g} h for ~{rows} rows at ~{rows_per_second:g} rows/s, plus half again): "
        "binlogs the stream needs from the smallest HW on may be purged before it starts. Raise "
        "binlog_expire_logs_seconds (or expire_logs_days) for the snapshot, or snapshot fewer tables at once"
    )


def _setting_fix(name: str, value: str) -> str:
    return (
        f"set {name}={value} in the server configuration ([mysqld] {name}={value}) and restart, "
        f"or run SET GLOBAL {name}='{value}' (new sessions only) and persist it"
    )


def _check_version(info: ServerInfo) -> CheckResult:
    minimum = MIN_VERSION[info.flavor]
    shown = ".".join(map(str, minimum))
    if info.version < minimum:
        return CheckResult(
            "version",
            "fail",
            f"{info.label} is too old: binlog_row_metadata=FULL needs {info.flavor} >= {shown}",
            f"upgrade the server to {'MariaDB' if info.flavor == 'mariadb' else 'MySQL'} {shown} or newer",
        )
    return CheckResult("version", "ok", f"{info.label} (>= {shown})")


def _expect(name: str, actual: str | None, wanted: str) -> CheckResult:
    shown = "(not set)" if actual is None else actual
    if (actual or "").upper() == wanted:
        return CheckResult(name, "ok", f"{name} = {shown}")
    return CheckResult(name, "fail", f"{name} = {shown}, CDC needs {wanted}", _setting_fix(name, wanted))


def _check_binlog_settings(info: ServerInfo, v: dict[str, str | None]) -> list[CheckResult]:
    results = []
    if (v["log_bin"] or "").upper() != "ON":
        results.append(
            CheckResult(
                "log_bin",
                "fail",
                f"log_bin = {v['log_bin'] or 'OFF'}: binary logging is off",
                "start the server with --log-bin=mysql-bin (and a non-zero --server-id); "
                "log_bin cannot be changed at runtime",
            )
        )
    else:
        results.append(CheckResult("log_bin", "ok", "log_bin = ON"))
    results.append(_expect("binlog_format", v["binlog_format"], "ROW"))
    results.append(_expect("binlog_row_image", v["binlog_row_image"], "FULL"))
    results.append(_expect("binlog_row_metadata", v["binlog_row_metadata"], "FULL"))
    if info.flavor == "mysql":
        options = v["binlog_row_value_options"] or ""
        if options:
            results.append(
                CheckResult(
                    "binlog_row_value_options",
                    "fail",
                    f"binlog_row_value_options = {options}: partial JSON updates cannot be replayed",
                    "set binlog_row_value_options='' in the server configuration and run SET GLOBAL "
                    "binlog_row_value_options='' (new sessions only)",
                )
            )
        else:
            results.append(CheckResult("binlog_row_value_options", "ok", "binlog_row_value_options is empty"))
        results.append(_expect_off("binlog_transaction_compression", v["binlog_transaction_compression"]))
        # the watermark-table read view (Oracle MySQL's exact mode) holds only if transactions commit in the
        # storage engine in their binlog order: everything before a marker is then visible after it
        order = _expect("binlog_order_commits", v["binlog_order_commits"], "ON")
        if order.status != "ok":
            order = replace(order, detail=order.detail + ": chunk reads between watermarks could "
                                        "miss a transaction committed in the binlog before their low marker")
        results.append(order)
    else:
        results.append(_expect_off("log_bin_compress", v["log_bin_compress"]))
    return results


GTID_FIX = (
    "set gtid_mode=ON and enforce_gtid_consistency=ON in the server configuration ([mysqld] gtid_mode=ON, "
    "enforce_gtid_consistency=ON) and restart; online: SET PERSIST enforce_gtid_consistency=ON, then SET "
    "PERSIST gtid_mode to OFF_PERMISSIVE, ON_PERMISSIVE and ON, one step at a time (MySQL manual: enabling "
    "GTID transactions online)"
)


def _check_gtids(info: ServerInfo, v: dict[str, str | None], settings: MySQLSettings) -> list[CheckResult]:
    """Oracle MySQL: the read view mode ``gtid_executed`` (also what ``auto`` picks where gtid_mode=ON) takes
    its watermarks from the executed GTID set, and a stream fails over to another server of the topology by
    the GTID set its offsets record: both need gtid_mode=ON and enforce_gtid_consistency=ON. Without them, a
    mode that needs them fails; otherwise a warning says that failover is off."""
    if info.flavor != "mysql":
        return []
    mode, enforce = (v["gtid_mode"] or "OFF").upper(), (v["enforce_gtid_consistency"] or "OFF").upper()
    read_view = settings.read_view_mode
    needs_gtids = read_view == "gtid_executed"
    uses = ("read_view_mode=gtid_executed (chunk watermarks from the executed GTID set) and GTID failover"
            if needs_gtids or (read_view == "auto" and mode == "ON") else "GTID failover")
    results = []
    if mode == "ON":
        results.append(CheckResult("gtid_mode", "ok", f"gtid_mode = ON: {uses} available"))
    elif needs_gtids:
        results.append(CheckResult(
            "gtid_mode", "fail", f"gtid_mode = {mode}, read_view_mode=gtid_executed needs ON: its chunk "
            "watermarks are executed GTID sets", GTID_FIX + "; or choose read_view_mode=watermark_table"))
    else:
        results.append(CheckResult(
            "gtid_mode", "warn", f"gtid_mode = {mode}: offsets and chunk HWs record no GTID set, so the "
            "stream cannot fail over to another server of the topology (a promoted replica, a restore): it "
            "stops instead", GTID_FIX))
    if enforce == "ON":
        results.append(CheckResult("enforce_gtid_consistency", "ok", "enforce_gtid_consistency = ON"))
    elif needs_gtids or mode == "ON":
        results.append(CheckResult(
            "enforce_gtid_consistency", "fail", f"enforce_gtid_consistency = {enforce}, {uses} needs ON: "
            "every transaction must be loggable with its own GTID", GTID_FIX))
    return results


def _expect_off(name: str, actual: str | None) -> CheckResult:
    if (actual or "OFF").upper() in ("OFF", "0"):
        return CheckResult(name, "ok", f"{name} = {actual or 'OFF'}")
    return CheckResult(
        name,
        "fail",
        f"{name} = {actual}: compressed binlog events cannot be decoded",
        _setting_fix(name, "OFF"),
    )


def _check_retention(v: dict[str, str | None], min_hours: float) -> CheckResult:
    seconds = _retention_seconds(v)
    if seconds == 0:
        return CheckResult("binlog retention", "ok", "binlogs never expire automatically")
    hours = seconds / 3600
    detail = f"binlogs expire after {hours:g} h"
    if hours < min_hours:
        return CheckResult(
            "binlog retention",
            "warn",
            f"{detail}, less than {min_hours:g} h: a stream down longer than that must re-snapshot",
            f"raise binlog_expire_logs_seconds to at least {int(min_hours * 3600)}",
        )
    return CheckResult("binlog retention", "ok", detail)


def _retention_seconds(v: dict[str, str | None]) -> float:
    seconds = float(v["binlog_expire_logs_seconds"] or 0)
    days = float(v["expire_logs_days"] or 0)
    # MySQL 8 and MariaDB 10.6+ keep both in sync or prefer seconds; take whichever is set.
    return seconds if seconds else days * 86400


def _check_replication_client(
    conn: pymysql.connections.Connection, info: ServerInfo
) -> tuple[CheckResult, BinlogStatus | None]:
    try:
        status = current_binlog_status(conn, info)
    except ServerNotReady as exc:
        return CheckResult("binlog position", "fail", str(exc)), None
    except pymysql.err.MySQLError as exc:
        if exc.args and exc.args[0] in (1227, 1045, 1142):
            grant = "BINLOG MONITOR" if info.flavor == "mariadb" else "REPLICATION CLIENT"
            return (
                CheckResult(
                    "privilege REPLICATION CLIENT",
                    "fail",
                    "this user may not read the binlog position",
                    f"GRANT {grant} ON *.* TO the CDC user (REPLICATION CLIENT is its alias on MariaDB)",
                ),
                None,
            )
        raise
    return CheckResult("privilege REPLICATION CLIENT", "ok", "binlog position readable"), status


def _check_watermark_table(conn: pymysql.connections.Connection, info: ServerInfo,
                           settings: MySQLSettings) -> CheckResult | None:
    """The watermark table the source names (``watermark_table``): it exists and the CDC user may write it
    (a marker row written and rolled back: nothing reaches the binlog), where the read view mode uses it. On
    Oracle MySQL without GTIDs and without one, exact chunk reads are impossible: a warning says what to
    create (a stream that never re-snapshots runs). A table named but not used is never written: a read-only
    replica passes."""
    name = "watermark table"
    used = watermark_table_used(conn, info, settings.read_view_mode)
    if not settings.watermark_table:
        if not used:
            return None
        return CheckResult(
            name, "warn", f"{info.label} has neither a read view with its own binlog position nor GTIDs "
            "(gtid_mode=ON): chunk reads (the snapshot, a re-snapshot after TRUNCATE or RENAME) need a "
            "watermark table",
            "create one (" + WATERMARK_DDL.format(table="db.mysqlcdc_watermark") + "), GRANT INSERT, "
            "UPDATE on it to the CDC user, and name it in the source: the connection extra watermark_table "
            "or ?watermark_table=db.mysqlcdc_watermark in the URL",
        )
    if not used:
        return CheckResult(name, "ok", f"{settings.watermark_table} is named but not used: chunk reads on "
                           f"{info.label} write nothing (read_view_mode={settings.read_view_mode})")
    database, _, table = settings.watermark_table.partition(".")
    quoted = f"`{database.replace('`', '``')}`.`{table.replace('`', '``')}`"
    with conn.cursor() as cur:  # a user who may not write it is told "denied" even where it is missing
        cur.execute("SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                    (database, table))
        if cur.fetchone() is None:
            return CheckResult(name, "fail", f"{settings.watermark_table} does not exist (or the CDC user "
                               "may not see it)", WATERMARK_DDL.format(table=quoted))
    try:
        with conn.cursor() as cur:
            cur.execute("START TRANSACTION")
            try:
                cur.execute(f"INSERT INTO {quoted} (id, token) VALUES (%s, %s) "
                            "ON DUPLICATE KEY UPDATE token = %s", (2**31 - 1, "check", "check"))
            finally:
                cur.execute("ROLLBACK")
    except pymysql.err.MySQLError as exc:
        code = exc.args[0] if exc.args else None
        if code == 1146:
            return CheckResult(name, "fail", f"{settings.watermark_table} does not exist",
                               WATERMARK_DDL.format(table=quoted))
        if code in (1142, 1044, 1227):
            return CheckResult(name, "fail", f"the CDC user may not write {settings.watermark_table}",
                               f"GRANT INSERT, UPDATE ON {quoted} TO the CDC user")
        return CheckResult(name, "fail", f"{settings.watermark_table} cannot take a marker row: "
                           f"{exc.args[-1] if exc.args else exc}",
                           "create it as " + WATERMARK_DDL.format(table=quoted))
    return CheckResult(name, "ok", f"{settings.watermark_table} is writable")


def _check_replication_slave(settings: MySQLSettings, binlog: BinlogStatus | None) -> CheckResult:
    """Open a real binlog dump at the current position: the only check that also sees grants via roles.

    It uses the top id of the configured server_id range, reserved for this check, so it never kicks
    a running reader off the server.
    """
    from pymysqlreplication import BinLogStreamReader

    if binlog is None:
        return CheckResult(
            "privilege REPLICATION SLAVE", "warn", "not checked: the binlog position is unknown", ""
        )
    reader = BinLogStreamReader(
        connection_settings=settings.replication_kwargs(),
        server_id=settings.server_id_range[1],
        log_file=binlog.file,
        log_pos=binlog.position,
        resume_stream=True,
        blocking=False,
        pymysql_wrapper=Connection,  # bounded reads and keepalive, as every session of ours
    )
    try:
        reader.fetchone()
    except pymysql.err.MySQLError as exc:
        code = exc.args[0] if exc.args else None
        if code in (1227, 1045, 1142, 1044):
            return CheckResult(
                "privilege REPLICATION SLAVE",
                "fail",
                "this user may not read the binlog stream",
                "GRANT REPLICATION SLAVE ON *.* TO the CDC user",
            )
        return CheckResult("privilege REPLICATION SLAVE", "fail", f"binlog dump failed: {exc.args[-1]}", "")
    finally:
        reader.close()
    return CheckResult("privilege REPLICATION SLAVE", "ok", "binlog stream readable")

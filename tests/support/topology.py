"""A replication topology of either flavor for the failover tests: a primary and a read-only replica
replicating from it by GTID (MariaDB: ``MASTER_USE_GTID``, ``read_only``; Oracle MySQL:
``SOURCE_AUTO_POSITION``, ``super_read_only``, as teams run the replica they point CDC at), waiting for the
replica to catch up, promoting it (writable again)."""
from __future__ import annotations

from typing import Any

import pytest

from tests.support.servers import start_server

MARIADB_OPTIONS = {"log-slave-updates": None, "gtid-strict-mode": "ON"}
# log_replica_updates is on by default since MySQL 8.0; gtid_mode=ON is the test servers' default
MYSQL_OPTIONS: dict[str, str | None] = {}


def require_flavor(flavor: str) -> None:
    """Skip the test where the flavor's server is not installed."""
    try:
        if flavor == "mysql":
            from airflow_provider_mysqlcdc.testing.mysql import find_mysql

            find_mysql()
        else:
            from airflow_provider_mysqlcdc.testing.mariadb import find_mariadbd

            find_mariadbd()
    except RuntimeError as exc:
        pytest.skip(str(exc))


def start_member(flavor: str, server_id: int, **options: Any) -> Any:
    """A server of the topology's flavor with its own server_id (and the options replication needs)."""
    extra = MARIADB_OPTIONS if flavor == "mariadb" else MYSQL_OPTIONS
    return start_server(flavor, **{"server-id": str(server_id), **extra, **options})


def executed(server: Any, flavor: str) -> str:
    """What the server applied: MariaDB's GTID binlog position, MySQL's gtid_executed."""
    variable = "gtid_binlog_pos" if flavor == "mariadb" else "gtid_executed"
    with server.admin() as conn, conn.cursor() as cur:
        cur.execute(f"SELECT @@GLOBAL.{variable}")
        (value,) = cur.fetchone()
    return "".join(str(value or "").split())


def replicate(replica: Any, primary: Any, flavor: str) -> None:
    """Start replication at the primary's current GTID state. Each server made its CDC user at start: the
    replica's binlog and GTIDs are reset and it takes the primary's as already applied (so those transactions
    are not replayed on it, and it has none of its own: no errant transactions)."""
    position = executed(primary, flavor)
    with replica.admin() as conn, conn.cursor() as cur:
        if flavor == "mariadb":
            cur.execute("RESET MASTER")
            cur.execute("SET GLOBAL gtid_slave_pos = %s", (position,))
            cur.execute(
                "CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = %s, MASTER_USER = 'root', "
                "MASTER_USE_GTID = slave_pos",
                (primary.port,),
            )
            cur.execute("START SLAVE")
            cur.execute("SET GLOBAL read_only = ON")  # MariaDB's: no user without READ_ONLY ADMIN writes
            return
        cur.execute("RESET BINARY LOGS AND GTIDS")
        cur.execute("SET GLOBAL gtid_purged = %s", (position,))
        cur.execute(
            "CHANGE REPLICATION SOURCE TO SOURCE_HOST = '127.0.0.1', SOURCE_PORT = %s, SOURCE_USER = 'root', "
            "SOURCE_PASSWORD = '', SOURCE_AUTO_POSITION = 1, GET_SOURCE_PUBLIC_KEY = 1",
            (primary.port,),
        )
        cur.execute("START REPLICA")
        cur.execute("SET GLOBAL super_read_only = ON")  # not even root writes: only the applier


def caught_up(replica: Any, primary: Any, flavor: str, timeout: float = 60.0) -> str:
    """Wait until the replica applied everything the primary logged; returns that GTID state."""
    position = executed(primary, flavor)
    wait = ("SELECT MASTER_GTID_WAIT(%s, %s)" if flavor == "mariadb"
            else "SELECT WAIT_FOR_EXECUTED_GTID_SET(%s, %s)")
    with replica.admin() as conn, conn.cursor() as cur:
        cur.execute(wait, (position, timeout))
        (waited,) = cur.fetchone()
        if waited != 0:
            cur.execute("SHOW SLAVE STATUS" if flavor == "mariadb" else "SHOW REPLICA STATUS")
            status = dict(zip([d[0] for d in cur.description], cur.fetchone() or ()))
            error = status.get("Last_Error") or status.get("Last_SQL_Error") or status.get("Last_IO_Error")
            raise AssertionError(f"the replica did not reach {position}: {error!r}")
    return position


def promote(replica: Any, flavor: str) -> None:
    with replica.admin() as conn, conn.cursor() as cur:
        if flavor == "mariadb":
            cur.execute("STOP SLAVE")
            cur.execute("RESET SLAVE ALL")
            cur.execute("SET GLOBAL read_only = OFF")
        else:
            cur.execute("STOP REPLICA")
            cur.execute("RESET REPLICA ALL")
            cur.execute("SET GLOBAL super_read_only = OFF")
            cur.execute("SET GLOBAL read_only = OFF")

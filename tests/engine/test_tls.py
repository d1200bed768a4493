"""TLS to MySQL with a self-signed CA: a MariaDB started by the test that refuses plain connections; the
check, the planner, a chunk read and the binlog reader all verify its certificate; a wrong CA is refused
clearly."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from airflow_provider_mysqlcdc.engine.binlog.changes import RowChange
from airflow_provider_mysqlcdc.engine.binlog.reader import BinlogReader
from airflow_provider_mysqlcdc.engine.chunks.planner import plan_table
from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition
from airflow_provider_mysqlcdc.engine.model.tables import TableId
from airflow_provider_mysqlcdc.engine.snapshot.chunk_reader import ChunkRead, ChunkReadOptions
from airflow_provider_mysqlcdc.engine.source.catalog import load_schema
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings, connect
from airflow_provider_mysqlcdc.engine.source.readiness import check_server
from airflow_provider_mysqlcdc.engine.source.server import current_binlog_status, server_info
from airflow_provider_mysqlcdc.testing.mariadb import MariaDBServer
from tests.support.servers import with_query


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _ca_and_server_cert(folder: Path, name: str) -> tuple[Path, Path, Path]:
    """A self-signed CA and a server certificate for 127.0.0.1 signed by it."""
    folder.mkdir(parents=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name} test CA",
             "-keyout", "ca.key", "-out", "ca.pem", cwd=folder)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", "server.key",
             "-out", "server.csr", cwd=folder)
    (folder / "san.cnf").write_text("subjectAltName = IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-extfile", "san.cnf", "-out", "server.pem", cwd=folder)
    return folder / "ca.pem", folder / "server.pem", folder / "server.key"


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tls")
    ca, cert, key = _ca_and_server_cert(folder / "good", "mysqlcdc")
    other_ca, _, _ = _ca_and_server_cert(folder / "other", "another")
    server = MariaDBServer(options={"ssl-ca": str(ca), "ssl-cert": str(cert), "ssl-key": str(key),
                                    "require-secure-transport": "ON"})
    with server:
        yield server, ca, other_ca


def test_every_connection_verifies_the_server_certificate(tls_server):
    server, ca, _ = tls_server
    settings = MySQLSettings.from_url(with_query(server.cdc_url, ssl_ca=str(ca)))
    assert settings.ssl == {"ca": str(ca), "check_hostname": True}
    with server.admin() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE shop")
        cur.execute("CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(10))")
        cur.executemany("INSERT INTO shop.t VALUES (%s, %s)", [(i, f"v{i}") for i in range(50)])
    with connect(settings) as conn, conn.cursor() as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        assert cur.fetchone()[1], "the session must be encrypted"
        status = current_binlog_status(conn, server_info(conn))
        start = BinlogPosition(status.file, status.position)

    report = check_server(settings)  # includes a binlog dump (REPLICATION SLAVE) over TLS
    assert report.ok, report.render()

    table = TableId("shop", "t")
    with connect(settings) as conn:
        schema = load_schema(conn, table)
    plan = plan_table(lambda: connect(settings), table, 1, chunk_size=20)
    rows = sum(b.num_rows for c in plan.chunks
               for b in ChunkRead(settings, schema, plan, c,
                                  ChunkReadOptions(mode="consistent_snapshot")).batches())
    assert rows == 50

    with server.admin() as conn, conn.cursor() as cur:
        cur.execute("UPDATE shop.t SET v = 'tls' WHERE id < 5")
    reader = BinlogReader(settings, settings.server_id_range[0] + 7, {table}, {table: schema})
    changes = [c for c in reader.read(BinlogOffset.at(start), end=None, timeout=10)
               if isinstance(c, RowChange)]
    assert len([c for c in changes if c.values.get("v") == "tls"]) == 5


def test_a_server_certificate_from_another_ca_is_refused(tls_server):
    server, _, other_ca = tls_server
    settings = MySQLSettings.from_url(with_query(server.cdc_url, ssl_ca=str(other_ca)))
    with pytest.raises(CdcError) as info:
        connect(settings)
    message = str(info.value)
    assert "certificate" in message.lower() and "ssl_ca" in message, message
    assert settings.password not in message

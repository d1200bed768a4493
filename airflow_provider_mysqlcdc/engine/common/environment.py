"""Every environment variable the package reads, named once: import the name from here, never spell it.

Secrets travel by environment (or by file) so that command lines, Spark options, plans and logs never carry
them. The test suite's own variables (``MYSQLCDC_TEST_*``, ``MYSQLCDC_BINLOG_TOOL``,
``MYSQLCDC_UI_SCREENSHOTS``) are read by ``tests/`` only and live there.
"""
from __future__ import annotations

# The source server's URL without its password (mysql://user@host:port[?...]): the CLI's --mysql-url default.
MYSQL_URL_ENV = "MYSQLCDC_MYSQL_URL"
# The source server's password, wherever a MySQL URL comes without one (driver and executors).
MYSQL_PASSWORD_ENV = "MYSQLCDC_MYSQL_PASSWORD"
# The chunk store URL or SQLite path; a URL that carries a password must come from here, not from options.
CHUNK_STORE_URL_ENV = "MYSQLCDC_CHUNK_STORE_URL"
# Seconds a chunk store call keeps retrying while the store is unreachable (default 300; 0: fail at once).
CHUNK_STORE_OUTAGE_ENV = "MYSQLCDC_CHUNK_STORE_OUTAGE_S"
# The Spark master of ``mysqlcdc stream`` (default local[*]).
SPARK_MASTER_ENV = "MYSQLCDC_SPARK_MASTER"

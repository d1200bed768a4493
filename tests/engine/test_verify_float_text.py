"""``verify``'s text of FLOAT and DOUBLE values equals the server's own, on both flavors: the digest of a
chunk prints each double on the lake's side exactly as the server prints it (``float_text``), so thousands of
seeded values across the whole range, and the edges (negative zero, subnormals, the largest double, 17-digit
values at the field width), must print byte for byte alike."""
from __future__ import annotations

import random

import pytest

from airflow_provider_mysqlcdc.engine.source.server import server_info
from airflow_provider_mysqlcdc.engine.verify.float_text import MYSQL_WIDTH, WIDE, server_double_text

pytestmark = pytest.mark.both_flavors
SEED = 83
EDGES = [0.0, -0.0, 1.0, 0.1, 1e15, 999999999999999.0, 1e16, 1e-14, 1.5e-15, 1e300, 1e-300, 5e-324,
         1.7976931348623157e308, 2.2250738585072014e-308, -1.2345678901234567e-27, 0.00012345678901234567,
         -0.00012345678901234567, -1234.5678901234567, 123456789012345678.0, 1 / 3, -2 / 3]


def _values(count: int) -> list[float]:
    rng = random.Random(SEED)
    out = list(EDGES)
    while len(out) < count:
        digits = rng.randint(1, 17)
        exponent = rng.randint(-330, 308)
        sign = "-" if rng.random() < 0.5 else ""
        value = float(f"{sign}{rng.randint(0, 10 ** digits)}e{exponent - digits}")
        if abs(value) != float("inf"):
            out.append(value)
    return out


def test_doubles_and_floats_print_as_the_server_prints_them(mysql_server, mysql_db):
    values = _values(3000)
    with mysql_server.admin(mysql_db) as conn, conn.cursor() as cur:
        width = MYSQL_WIDTH if server_info(conn).flavor == "mysql" else WIDE
        cur.execute("CREATE TABLE f (id INT PRIMARY KEY, d DOUBLE, f FLOAT)")
        cur.executemany("INSERT INTO f VALUES (%s, %s, %s)",
                        [(i, v, v if 1.2e-38 < abs(v) < 3.4e38 or v == 0 else None)
                         for i, v in enumerate(values)])
        cur.execute("SELECT d, CAST(CAST(d AS DOUBLE) AS CHAR), CAST(f AS DOUBLE), "
                    "CAST(CAST(f AS DOUBLE) AS CHAR) FROM f ORDER BY id")
        rows = cur.fetchall()
    wrong = [(value, text, server_double_text(value, width))
             for d, d_text, f, f_text in rows
             for value, text in ((d, d_text), (f, f_text)) if value is not None
             and server_double_text(value, width) != text]
    assert not wrong, wrong[:10]

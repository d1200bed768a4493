"""MySQL URL parsing: every option understood, bad input named, the password never shown."""
from __future__ import annotations

import pytest

from airflow_provider_mysqlcdc.engine.common.environment import MYSQL_PASSWORD_ENV
from airflow_provider_mysqlcdc.engine.common.errors import ConfigurationError
from airflow_provider_mysqlcdc.engine.source.connection import MySQLSettings


def test_parses_full_url():
    s = MySQLSettings.from_url(
        "mysql://cdc%40x:p%3Ass@db.example.com:3307/shop?server_id=6000-6009&ssl_ca=/ca.pem&charset=utf8mb4"
    )
    assert (s.user, s.password, s.host, s.port, s.database) == (
        "cdc@x", "p:ss", "db.example.com", 3307, "shop")
    assert s.server_id_range == (6000, 6009)
    assert s.ssl == {"ca": "/ca.pem", "check_hostname": True}


def test_password_from_environment(monkeypatch):
    monkeypatch.setenv(MYSQL_PASSWORD_ENV, "from-env")
    assert MySQLSettings.from_url("mysql://cdc@h/").password == "from-env"
    assert MySQLSettings.from_url("mysql://cdc:in-url@h/").password == "in-url"


def test_password_never_shown():
    s = MySQLSettings.from_url("mysql://cdc:topsecret@h:3306/db")
    assert "topsecret" not in repr(s)
    assert "topsecret" not in s.redacted_url()
    assert s.redacted_url() == "mysql://cdc@h:3306/db"


@pytest.mark.parametrize(
    "url, words",
    [
        ("postgres://h/", ["mysql://"]),
        ("mysql:///db", ["no host"]),
        ("mysql://h/?bogus=1", ["bogus"]),
        ("mysql://h/?server_id=9-3", ["server_id"]),
        ("mysql://h/?server_id=abc", ["server_id"]),
    ],
)
def test_bad_urls_are_named(url, words):
    with pytest.raises(ConfigurationError) as err:
        MySQLSettings.from_url(url)
    for word in words:
        assert word in str(err.value)

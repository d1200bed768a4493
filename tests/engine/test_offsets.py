"""Resume offsets: JSON round trip, ordering, stored versions stay readable, newer versions are refused."""
from __future__ import annotations

import json

import pytest

from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.model.offsets import BinlogOffset, OffsetFormatError
from airflow_provider_mysqlcdc.engine.model.positions import BinlogPosition


def test_json_round_trip_keeps_every_field():
    offsets = [
        BinlogOffset("mysql-bin.000001", 4),
        BinlogOffset("mysql-bin.000042", 123456, skip_events=3, skip_rows=17, gtid="0-1-99"),
        BinlogOffset("binlog.1000000", 2**32 + 5, skip_events=0, skip_rows=1, gtid="3e11fa47-71ca:23"),
    ]
    for offset in offsets:
        text = offset.to_json()
        assert json.loads(text)["version"] == 1
        assert BinlogOffset.from_json(text) == offset


def test_version_one_as_stored_today_is_read_forever():
    stored = '{"file":"mysql-bin.000007","gtid":null,"pos":9876,"skip_events":2,"skip_rows":5,"version":1}'
    assert BinlogOffset.from_json(stored) == BinlogOffset("mysql-bin.000007", 9876, 2, 5)
    # optional fields may be missing in hand-written offsets
    assert BinlogOffset.from_json('{"version":1,"file":"mysql-bin.000007","pos":4}') == BinlogOffset(
        "mysql-bin.000007", 4
    )


def test_newer_version_is_rejected_with_a_clear_error():
    future = '{"version":4,"file":"mysql-bin.000007","pos":4,"skip_events":0,"skip_rows":0,"extra":"?"}'
    with pytest.raises(OffsetFormatError, match="newer mysqlcdc release.*upgrade"):
        BinlogOffset.from_json(future)
    with pytest.raises(OffsetFormatError):
        BinlogOffset("mysql-bin.000001", 4, version=4)


def test_failover_fields_round_trip_and_only_a_file_number_base_needs_version_two():
    """The server identity and GTID position ride along in version 1 (older releases ignore them); a file
    number base (a stream that failed over) makes it version 2, which older releases refuse."""
    same = BinlogOffset("mysql-bin.000003", 1234, server="mariadb:11", gtid_position="0-11-57")
    assert same.to_dict()["version"] == 1
    assert BinlogOffset.from_json(same.to_json()) == same
    moved = BinlogOffset("mysql-bin.000001", 400, server="mariadb:12", gtid_position="0-11-57",
                         file_number_base=4)
    assert moved.to_dict()["version"] == 2
    assert BinlogOffset.from_json(moved.to_json()) == moved
    assert moved.key > same.key  # positions of the new server order after the old server's
    assert moved.ordered_position == BinlogPosition("mysql-bin.000005", 400) > same.ordered_position
    assert same.ordered_position == same.position
    # version 1 never carries a base: a stray key is not read as one
    stray = '{"version":1,"file":"mysql-bin.000001","pos":4,"file_number_base":9}'
    assert BinlogOffset.from_json(stray).file_number_base == 0


def test_a_mysql_gtid_set_needs_version_three():
    """An Oracle MySQL GTID set as the GTID state makes an offset version 3: a release that knows MariaDB GTID
    positions only refuses it (upgrade) instead of taking it for a binlog that does not match. Versions 1 and
    2 as stored before read as they did."""
    gtid_set = "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-57,9180c4c1-eb2e-11f1-b384-02fc00000001:1-3"
    on_mysql = BinlogOffset("binlog.000003", 1234, server="mysql:11:3e11fa47-71ca-11e1-9e33-c80aa9429562",
                            gtid_position=gtid_set)
    assert on_mysql.to_dict()["version"] == 3
    assert BinlogOffset.from_json(on_mysql.to_json()) == on_mysql
    moved = BinlogOffset("binlog.000001", 400, gtid_position=gtid_set, file_number_base=4)
    assert moved.to_dict()["version"] == 3 and BinlogOffset.from_json(moved.to_json()) == moved
    stored = [('{"version":1,"file":"binlog.000002","pos":4,"skip_events":0,"skip_rows":0,"gtid":null,'
               '"server":"mysql:11:3e11fa47-71ca-11e1-9e33-c80aa9429562"}'),
              '{"version":2,"file":"mysql-bin.000001","pos":4,"file_number_base":3,"gtid_position":"0-11-5"}']
    for text in stored:
        offset = BinlogOffset.from_json(text)
        assert offset.to_dict()["version"] == json.loads(text)["version"]


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[1, 2]",
        '{"file":"mysql-bin.000001","pos":4}',  # no version
        '{"version":"1","file":"mysql-bin.000001","pos":4}',
        '{"version":1,"pos":4}',
        '{"version":1,"file":"mysql-bin.000001","pos":"4"}',
        '{"version":1,"file":"mysql-bin.000001","pos":4,"skip_rows":-1}',
        '{"version":1,"file":"mysql-bin","pos":4}',
        '{"version":1,"file":"mysql-bin.000001","pos":4,"gtid":5}',
        '{"version":2,"file":"mysql-bin.000001","pos":4,"file_number_base":"1"}',
        '{"version":2,"file":"mysql-bin.000001","pos":4,"file_number_base":-1}',
        '{"version":1,"file":"mysql-bin.000001","pos":4,"server":11}',
    ],
)
def test_malformed_offsets_are_rejected(text):
    with pytest.raises(CdcError):
        BinlogOffset.from_json(text)


def test_at_a_boundary_and_ordering():
    boundary = BinlogOffset.at(BinlogPosition("mysql-bin.000003", 1234), gtid="0-1-5")
    assert boundary.at_boundary and boundary.position == BinlogPosition("mysql-bin.000003", 1234)
    assert boundary.gtid == "0-1-5"
    inside = BinlogOffset("mysql-bin.000003", 1234, skip_events=1)
    assert not inside.at_boundary
    ordered = [
        BinlogOffset("mysql-bin.999999", 9999),
        BinlogOffset("mysql-bin.1000000", 4),
        BinlogOffset("mysql-bin.1000000", 4, 0, 1),
        BinlogOffset("mysql-bin.1000000", 4, 1, 0),
        BinlogOffset("mysql-bin.1000000", 5),
    ]
    # sorted from the reversed list: a tie (two equal keys) would stay reversed and fail
    assert sorted(reversed(ordered), key=lambda o: o.key) == ordered  # noqa: C414 - a tie would fail
    assert str(inside) == "mysql-bin.000003:1234+1ev+0rows"

"""What a DDL statement does to a captured table (engine.binlog.ddl): followed in the changelog, or a new
snapshot."""

from __future__ import annotations

import pytest

from airflow_provider_mysqlcdc.engine.binlog.ddl import table_ddl


@pytest.mark.parametrize(
    ("sql", "renamed", "added", "dropped", "modified"),
    [
        ("ALTER TABLE t ADD COLUMN c INT NOT NULL DEFAULT 5 AFTER a", {}, {"c": "5"}, (), ()),
        (
            "alter table `t` add `c``x` varchar(10) first, drop column d, rename column x to y",
            {"x": "y"},
            {"c`x": None},
            ("d",),
            (),
        ),
        (
            "ALTER TABLE t CHANGE a b BIGINT NOT NULL, MODIFY COLUMN v DECIMAL(12,2)",
            {"a": "b"},
            {},
            (),
            ("b", "v"),
        ),
        (
            "ALTER TABLE t ADD (p INT DEFAULT -1.5e2, q CHAR(2) NOT NULL, r INT NOT NULL)",
            {},
            {"p": "-1.5e2", "q": "''", "r": "0"},
            (),
            (),
        ),
        (
            "ALTER TABLE t ADD COLUMN s VARCHAR(5) NOT NULL DEFAULT 'a,b' COMMENT 'DEFAULT 9'",
            {},
            {"s": "'a,b'"},
            (),
            (),
        ),
        (
            "ALTER TABLE t ADD COLUMN d DATE NOT NULL DEFAULT '2020-01-01', ALGORITHM=INSTANT",
            {},
            {"d": "'2020-01-01'"},
            (),
            (),
        ),
        ("ALTER TABLE t ADD INDEX i (a), ALTER COLUMN a SET DEFAULT 3, ENGINE=InnoDB", {}, {}, (), ()),
        ("/*!40000 ALTER TABLE `t` DISABLE KEYS */", {}, {}, (), ()),
        ("ALTER TABLE t PARTITION BY HASH(id) PARTITIONS 4", {}, {}, (), ()),
        ("CREATE INDEX i ON t (a)", {}, {}, (), ()),
        ("DROP INDEX i ON t", {}, {}, (), ()),
    ],
)
def test_column_changes_the_changelog_follows(sql, renamed, added, dropped, modified):
    ddl = table_ddl(sql, ("id",))
    assert ddl.resnapshot is None, ddl
    assert (ddl.changes.renamed, ddl.changes.added, ddl.changes.dropped, ddl.changes.modified) == (
        renamed,
        added,
        dropped,
        modified,
    )


@pytest.mark.parametrize(
    ("sql", "why"),
    [
        ("TRUNCATE TABLE t", "TRUNCATE"),
        ("RENAME TABLE t TO t_old, t_new TO t", "RENAME TABLE"),
        ("DROP TABLE t", "dropped"),
        ("CREATE OR REPLACE TABLE t (id INT)", "created anew"),
        ("ALTER TABLE t RENAME TO u", "RENAME"),
        ("ALTER TABLE t DROP PARTITION p0", "DROP PARTITION"),
        ("ALTER TABLE t TRUNCATE PARTITION p0", "TRUNCATE PARTITION"),
        ("ALTER TABLE x EXCHANGE PARTITION p0 WITH TABLE t", "EXCHANGE"),
        ("ALTER TABLE t ADD COLUMN ts TIMESTAMP DEFAULT CURRENT_TIMESTAMP", "expression"),
        ("ALTER TABLE t ADD COLUMN n INT DEFAULT (1+2)", "expression"),
        ("ALTER TABLE t ADD COLUMN g INT AS (a+1) VIRTUAL", "generated"),
        ("ALTER TABLE t ADD COLUMN seq INT NOT NULL AUTO_INCREMENT UNIQUE", "AUTO_INCREMENT"),
        ("ALTER TABLE t ADD COLUMN e ENUM('a','b') NOT NULL", "implicit default"),
        ("ALTER TABLE t ADD COLUMN b BINARY(2) NOT NULL DEFAULT 'x'", "cannot reproduce"),
        ("ALTER TABLE t MODIFY id BIGINT", "primary key"),
        ("ALTER TABLE t RENAME COLUMN id TO pk", "primary key"),
        ("ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (a)", "primary key"),
        ("ALTER TABLE t CONVERT TO CHARACTER SET utf8mb4", "re-encodes"),
        ("ALTER TABLE t FROBNICATE", "unrecognised clause 'FROBNICATE'"),
    ],
)
def test_ddl_that_needs_a_new_snapshot_says_why(sql, why):
    ddl = table_ddl(sql, ("id",))
    assert ddl.resnapshot and why in ddl.resnapshot, ddl


def test_credentials_in_table_options_never_leave_the_statement():
    ddl = table_ddl("ALTER TABLE t CONNECTION='mysql://u:s3cret@h/db/t', PASSWORD = \"pw2\", "
                    "ADD COLUMN c INT", ("id",))
    assert "s3cret" not in ddl.statement and "pw2" not in ddl.statement
    assert "CONNECTION='***'" in ddl.statement and ddl.changes.added == {"c": None}

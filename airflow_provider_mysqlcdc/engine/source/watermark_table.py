"""The watermark table: a small table of the source the CDC user may write, where a chunk read in the
``watermark_table`` read view mode commits its marker rows (engine/snapshot/read_view.py). Oracle MySQL needs
one for exact chunk reads; ``check`` verifies it (engine/source/readiness.py)."""
from __future__ import annotations

WATERMARK_DDL = (
    "CREATE TABLE {table} (id INT PRIMARY KEY, token VARCHAR(64) NOT NULL, "
    "written_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB"
)

"""The Flink ``changelog-json`` form of the changelog (optional, ``changelog-json/batch=<id>/``).

One object per line, ``{"data": {...}, "op": "+I"}``; DECIMAL and integers as JSON numbers (exact), DATETIME
as ``"yyyy-MM-dd HH:mm:ss.SSSSSS"``, TIMESTAMP the same with a ``Z`` (UTC), DATE ``"yyyy-MM-dd"``, TIME
``"HH:mm:ss.SSSSSS"``, binary as base64 (Flink's JSON format conventions).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from airflow_provider_mysqlcdc.engine.model.records import Record


def flink_json_line(record: Record) -> str:
    """One line of Flink's ``changelog-json`` format for a record."""
    data = {name: _flink_value(value) for name, value in record.values.items()}
    return "".join(_encode_json({"data": data, "op": record.op}))


class _RawNumber(str):
    """A number that must be written verbatim (a Decimal or a huge integer keeps every digit)."""


def _encode_json(value: Any) -> Iterator[str]:
    if isinstance(value, _RawNumber):
        yield str.__str__(value)
    elif isinstance(value, dict):
        yield "{"
        for i, (k, v) in enumerate(value.items()):
            if i:
                yield ","
            yield json.dumps(k, ensure_ascii=False)
            yield ":"
            yield from _encode_json(v)
        yield "}"
    else:
        yield json.dumps(value, ensure_ascii=False, allow_nan=True)


def _flink_value(value: Any) -> Any:
    if value is None or isinstance(value, (bool, str, float)):
        return value
    if isinstance(value, int):
        return _RawNumber(str(value))
    if isinstance(value, Decimal):
        return _RawNumber(format(value, "f"))
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%fZ")
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, timedelta):
        sign = "-" if value < timedelta(0) else ""
        micros = abs(value) // timedelta(microseconds=1)
        seconds, micro = divmod(micros, 1_000_000)
        minutes, second = divmod(seconds, 60)
        hours, minute = divmod(minutes, 60)
        return f"{sign}{hours:02d}:{minute:02d}:{second:02d}.{micro:06d}"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    return str(value)

"""Chunk keys in JSON: tagged ``[tag, value]`` lists, exactly
reversible, so plans and offsets store any key type."""
from __future__ import annotations

import base64
from collections.abc import Sequence
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from airflow_provider_mysqlcdc.engine.common.errors import CdcError
from airflow_provider_mysqlcdc.engine.model.values import ZeroDate

Key = tuple[Any, ...]


class KeyCodec:
    """Chunk keys as JSON-safe lists of ``[tag, value]``, exactly reversible.

    Integers travel as strings (JSON readers in other languages lose digits above 2^53), Decimals keep their
    scale, bytes are base64. The tags are part of the chunk-store format: never change one, only add.
    """

    @staticmethod
    def encode_value(value: Any) -> list[Any]:
        if value is None:
            return ["n", None]
        if isinstance(value, bool):
            return ["i", str(int(value))]
        if isinstance(value, int):
            return ["i", str(value)]
        if isinstance(value, Decimal):
            return ["dec", str(value)]
        if isinstance(value, float):
            return ["f", repr(value)]
        if isinstance(value, ZeroDate):  # before str: a ZeroDate is a str
            return ["zd", str(value)]
        if isinstance(value, str):
            return ["s", value]
        if isinstance(value, (bytes, bytearray, memoryview)):
            return ["b", base64.b64encode(bytes(value)).decode("ascii")]
        if isinstance(value, datetime):  # before date: datetime is a date
            return ["dt", value.isoformat()]
        if isinstance(value, date):
            return ["d", value.isoformat()]
        if isinstance(value, timedelta):
            return ["td", str(timedelta_micros(value))]
        if isinstance(value, time):
            return ["t", value.isoformat()]
        raise TypeError(f"cannot encode a chunk key value of type {type(value).__name__}: {value!r}")

    @staticmethod
    def decode_value(item: Sequence[Any]) -> Any:
        try:
            tag, value = item
        except (TypeError, ValueError):
            raise CdcError(f"malformed chunk key element {item!r}: expected [tag, value]") from None
        if tag == "n":
            return None
        if tag == "i":
            return int(value)
        if tag == "dec":
            return Decimal(value)
        if tag == "f":
            return float(value)
        if tag == "s":
            return str(value)
        if tag == "zd":
            return ZeroDate(value)
        if tag == "b":
            return base64.b64decode(value)
        if tag == "dt":
            return datetime.fromisoformat(value)
        if tag == "d":
            return date.fromisoformat(value)
        if tag == "td":
            return timedelta(microseconds=int(value))
        if tag == "t":
            return time.fromisoformat(value)
        raise CdcError(f"unknown chunk key tag {tag!r}: was this written by a newer release?")

    @classmethod
    def encode_key(cls, key: Sequence[Any]) -> list[list[Any]]:
        return [cls.encode_value(v) for v in key]

    @classmethod
    def decode_key(cls, data: Sequence[Sequence[Any]]) -> Key:
        return tuple(cls.decode_value(item) for item in data)


encode_key = KeyCodec.encode_key
decode_key = KeyCodec.decode_key


def timedelta_micros(value: timedelta) -> int:
    return (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds

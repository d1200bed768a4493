"""Key-changing updates: split into a delete of the old key and an insert of the new key, before filtering.

Both the chunk backfill and the stream filter judge each half by the chunk of its *own* row image: an update
that moves a row from chunk A to chunk B is a delete in A and an insert in B.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Protocol, TypeVar

from airflow_provider_mysqlcdc.engine.model.records import DELETE, INSERT, UPDATE_AFTER, UPDATE_BEFORE


class RowImage(Protocol):
    """What the split reads of an image (a frozen ``RowChange`` or ``Record``): read-only attributes."""

    @property
    def op(self) -> str: ...
    @property
    def values(self) -> dict: ...


T = TypeVar("T", bound=RowImage)


def identity_columns(primary_key: Sequence[str], key_columns: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys((*primary_key, *key_columns)))


def split_key_changes(images: Sequence[T], identity: Sequence[str]) -> list[T]:
    """-U/+U pairs whose identity columns differ become -D/+I; everything else passes through in order."""
    out: list[T] = []
    i = 0
    n = len(images)
    while i < n:
        image = images[i]
        if image.op == UPDATE_BEFORE and i + 1 < n and images[i + 1].op == UPDATE_AFTER:
            after = images[i + 1]
            if any(image.values.get(c) != after.values.get(c) for c in identity):
                out.append(dataclasses.replace(image, op=DELETE))  # type: ignore[type-var]
                out.append(dataclasses.replace(after, op=INSERT))  # type: ignore[type-var]
            else:
                out.append(image)
                out.append(after)
            i += 2
            continue
        out.append(image)
        i += 1
    return out

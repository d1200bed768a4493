"""Types of the compiled rows-event decoder (``_rows.pyx``, built by Cython): what the Python side calls.

mypy cannot read the built extension; keep this in step with the ``def`` signatures of ``_rows.pyx``."""
from enum import IntEnum
from typing import Any

def check_codes(wire: type[IntEnum], out: type[IntEnum], flag: type[IntEnum]) -> None: ...

class MultibyteTable:
    def __init__(
        self, single: str, multi: dict[bytes, str], max_width: int, ascii_identity: bool
    ) -> None: ...

class CompiledLayout:
    @property
    def ncols(self) -> int: ...
    def __init__(self, columns: list[tuple[Any, ...]]) -> None: ...
    def decode(
        self, data: bytes, start: int, end: int, present: bytes, present_after: bytes | None
    ) -> tuple[list[list[list[Any]]], int]: ...

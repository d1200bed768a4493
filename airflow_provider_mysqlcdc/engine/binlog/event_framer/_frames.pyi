"""Types of the compiled event framer (``_frames.pyx``, built by Cython): what the Python side reads.

mypy cannot read the built extension; keep this in step with ``_frames.pyx``."""
from collections.abc import Sequence

PACKET_EOF: int
PACKET_ERROR: int
PASS_NONE: int
PASS_OVER: int
PASS_MARK: int
PASS_BOUNDARY: int

class FramingError(Exception): ...

class FramedEvent:
    event_type: int
    framed: bool
    timestamp: int
    server_id: int
    event_size: int
    log_pos: int
    header_flags: int
    data: bytes
    start: int
    end: int
    packet_start: int
    packet_end: int
    table_id: int
    rows_flags: int
    body_start: int
    body_end: int
    column_count: int
    present: bytes | None
    present_after: bytes | None
    schema: str | bytes | None
    table: str | None
    gtid: str | None
    gtid_flags: int
    query: str | None
    next_binlog: str | None
    position: int
    xid: int
    passable: bool
    def packet(self) -> bytes: ...
    def body(self) -> bytes: ...
    def body_equals(self, other: bytes) -> bool: ...

class Framer:
    checksum: bool
    next_seq: int
    pass_over: int
    passed_log_pos: int
    passed: int
    def __init__(self, checksum: bool, next_seq: int) -> None: ...
    def set_post_header_lengths(self, lengths: Sequence[int] | None) -> None: ...
    def feed(self, chunk: bytes) -> None: ...
    def buffered(self) -> int: ...
    def wanted(self) -> int: ...
    def next_event(self) -> FramedEvent | None: ...
    def remember(self, event: FramedEvent) -> None: ...

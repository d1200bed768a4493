# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The compiled framer of the binlog event stream: MySQL packets split off the replication connection's bytes,
each event's header and the fields of the event types the reader acts on parsed in C.

Why: mysql-replication turns every packet into a pymysql packet, a wrapper, an event object and, for a
TABLE_MAP, a list of column objects and its optional metadata, all in Python (~40 us per event). On an OLTP
binlog (one TABLE_MAP and one single-row rows event per statement) that is the whole cost of a catch-up. Here
one ``FramedEvent`` per event holds offsets into the received bytes and the few fields the event loop reads;
nothing is copied, nothing is decoded that the loop does not ask for.

Framed types (``framed`` True): QUERY, ROTATE, XID, TABLE_MAP (its body kept for the table-map cache),
WRITE/UPDATE/DELETE_ROWS v1 (MariaDB) and v2 (Oracle MySQL), MySQL's GTID and ANONYMOUS_GTID, MariaDB's GTID,
and bookkeeping events that carry nothing the loop needs (heartbeat, STOP, ROWS_QUERY, PREVIOUS_GTIDS,
MariaDB's ANNOTATE_ROWS, BINLOG_CHECKPOINT, GTID_LIST). Every other type (FORMAT_DESCRIPTION, INTVAR,
USER_VAR, XA_PREPARE, LOAD DATA, MySQL's partial JSON updates and transaction payloads, MariaDB's compressed
events, anything unknown) comes out unframed: the caller hands its packet to mysql-replication, which parses
it (or refuses it) exactly as before. Each field is read the way mysql-replication 1.0.17 reads it (compare
mode checks that on every event of the suite).

Checksums: with ``binlog_checksum=CRC32`` every event ends with the CRC32 of its bytes; it is checked here
(mysql-replication does not) and left out of the event's body.

Passed over in C (``pass_over``, inside a transaction only: the event loop says when it reads one): the events
that mean nothing to the loop there, so no Python object is made for them. A TABLE_MAP whose body equals the
one the loop last took for its table id (``remember``; forgotten at a rotation that clears mysql-replication's
table map, and all of them at a TABLE_MAP the framer cannot parse), ROWS_QUERY and MariaDB's ANNOTATE_ROWS.
On an OLTP binlog that is every TABLE_MAP but the first of each table: half the events. ``passed_log_pos`` is
where the last of them ended (the resume point of a reconnect); in compare mode (``PASS_MARK``) they are not
passed over but returned with ``passable`` set, so the loop checks that each one would have changed nothing.
A boundary scan (``PASS_BOUNDARY``) gets only the events that start or end a transaction or a file (GTIDs,
QUERY, XID, XA_PREPARE, ROTATE) and FORMAT_DESCRIPTION: every other event, rows and TABLE_MAPs included, is
checked (its checksum) and passed over in C.
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.stdio cimport snprintf
from libc.string cimport memcmp


cdef extern from "Python.h":
    object PyUnicode_DecodeUTF8(const char *s, Py_ssize_t size, const char *errors)


# What ``next_event`` returns besides events (``event_type`` of the FramedEvent)
PACKET_EOF = -1  # the server's EOF packet: the binlog's end (non-blocking dump)
PACKET_ERROR = -2  # an error packet: ``packet()`` is its payload, for pymysql to raise
# ``Framer.pass_over``: return every event; pass over those the loop would pass over; return them marked;
# return only the events that mark transaction boundaries (a boundary scan: ``boundaries.iter_framed``)
PASS_NONE, PASS_OVER, PASS_MARK, PASS_BOUNDARY = 0, 1, 2, 3

cdef enum:
    K_EOF = -1
    K_ERROR = -2
    T_QUERY = 0x02
    T_STOP = 0x03
    T_ROTATE = 0x04
    T_FORMAT_DESCRIPTION = 0x0F
    T_XA_PREPARE = 0x26
    T_GTID_TAGGED = 0x2A
    P_BOUNDARY = 3
    T_XID = 0x10
    T_TABLE_MAP = 0x13
    T_WRITE_V1 = 0x17
    T_UPDATE_V1 = 0x18
    T_DELETE_V1 = 0x19
    T_HEARTBEAT = 0x1B
    T_ROWS_QUERY = 0x1D
    T_WRITE_V2 = 0x1E
    T_UPDATE_V2 = 0x1F
    T_DELETE_V2 = 0x20
    T_GTID = 0x21
    T_ANONYMOUS_GTID = 0x22
    T_PREVIOUS_GTIDS = 0x23
    T_ANNOTATE_ROWS = 0xA0
    T_CHECKPOINT = 0xA1
    T_MARIADB_GTID = 0xA2
    T_GTID_LIST = 0xA3
    HEADER = 19
    MAX_PACKET = 0xFFFFFF

cdef uint32_t CRC_TABLE[256]
cdef uint32_t _c, _k
cdef int _n
for _n in range(256):
    _c = <uint32_t>_n
    for _k in range(8):
        _c = (0xEDB88320 ^ (_c >> 1)) if (_c & 1) else (_c >> 1)
    CRC_TABLE[_n] = _c


cdef inline uint32_t crc32(const uint8_t *p, Py_ssize_t n) noexcept nogil:
    cdef uint32_t c = <uint32_t>0xFFFFFFFFu
    cdef Py_ssize_t i
    for i in range(n):
        c = CRC_TABLE[(c ^ p[i]) & 0xFF] ^ (c >> 8)
    return c ^ <uint32_t>0xFFFFFFFFu


cdef inline uint32_t u16(const uint8_t *p) noexcept nogil:
    return p[0] | (<uint32_t>p[1] << 8)


cdef inline uint32_t u32(const uint8_t *p) noexcept nogil:
    return p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)


cdef inline uint64_t u48(const uint8_t *p) noexcept nogil:
    return u32(p) | (<uint64_t>u16(p + 4) << 32)


cdef inline uint64_t u64(const uint8_t *p) noexcept nogil:
    return u32(p) | (<uint64_t>u32(p + 4) << 32)


class FramingError(Exception):
    """The bytes are not a well-formed event stream (truncated event, bad checksum, packet out of order)."""


cdef class FramedEvent:
    """One event: its header, where its bytes lie in ``data`` (``start`` = the header, ``end`` = the end of
    its body, before the checksum) and the fields of its type (those of other types keep their defaults)."""

    cdef readonly int event_type
    cdef readonly bint framed
    cdef readonly uint32_t timestamp, server_id, event_size, log_pos
    cdef readonly int header_flags
    cdef readonly bytes data
    cdef readonly Py_ssize_t start, end, packet_start, packet_end
    # TABLE_MAP and rows events
    cdef readonly uint64_t table_id
    cdef readonly int rows_flags
    cdef readonly Py_ssize_t body_start, body_end, column_count
    cdef readonly bytes present, present_after
    cdef readonly object schema, table  # TABLE_MAP: str; QUERY: schema as bytes
    # GTIDs: the text mysql-replication gives (None for an anonymous GTID); MariaDB's GTID flags byte
    cdef readonly object gtid
    cdef readonly int gtid_flags
    cdef readonly object query, next_binlog
    cdef readonly uint64_t position, xid
    # the framer would have passed over it (``PASS_MARK``: compare mode checks that it means nothing)
    cdef readonly bint passable

    def packet(self):
        """The packet's payload as pymysql reads it (the OK byte, then the event with its checksum)."""
        return self.data[self.packet_start:self.packet_end]

    def body(self):
        """The event's body (after the header, before the checksum): a TABLE_MAP's cache key."""
        return self.data[self.start + HEADER:self.end]

    def body_equals(self, bytes other):
        """Whether the body is ``other``, byte for byte (a cached TABLE_MAP), without copying it."""
        cdef Py_ssize_t n = self.end - self.start - HEADER
        if PyBytes_GET_SIZE(other) != n:
            return False
        return memcmp(PyBytes_AS_STRING(self.data) + self.start + HEADER, PyBytes_AS_STRING(other), n) == 0


cdef class Framer:
    """Splits the replication connection's bytes into packets and events (``feed`` bytes, then
    ``next_event`` until it returns None: the next event is not complete yet)."""

    cdef bytes buf
    cdef Py_ssize_t pos
    cdef readonly bint checksum
    cdef public int next_seq
    cdef bytes post_header  # FORMAT_DESCRIPTION's post-header length per type (empty: the defaults)
    cdef public int pass_over  # PASS_NONE, PASS_OVER or PASS_MARK (the loop sets it inside a transaction)
    cdef dict known  # table id -> the TABLE_MAP body the loop took for it (``remember``)
    cdef readonly uint32_t passed_log_pos  # where the last event passed over ended (0: none since a return)
    cdef readonly Py_ssize_t passed  # events passed over

    def __init__(self, bint checksum, int next_seq):
        self.buf = b""
        self.pos = 0
        self.checksum = checksum
        self.next_seq = next_seq
        self.post_header = b""
        self.pass_over = PASS_NONE
        self.known = {}
        self.passed_log_pos = 0
        self.passed = 0

    def remember(self, FramedEvent event):
        """The loop took this TABLE_MAP: one of its table id with the same body changes nothing."""
        self.known[event.table_id] = event.body()

    def set_post_header_lengths(self, lengths):
        """The post-header lengths of the last FORMAT_DESCRIPTION event (mysql-replication parses it)."""
        self.post_header = bytes(lengths or ())

    def feed(self, bytes chunk):
        if self.pos >= PyBytes_GET_SIZE(self.buf):
            self.buf = chunk
        else:
            self.buf = self.buf[self.pos:] + chunk
        self.pos = 0

    def buffered(self):
        """Bytes received and not framed yet."""
        return PyBytes_GET_SIZE(self.buf) - self.pos

    def wanted(self):
        """How many more bytes the next packet needs at least (a read hint for large events)."""
        cdef Py_ssize_t avail = PyBytes_GET_SIZE(self.buf) - self.pos
        cdef const uint8_t *p = <const uint8_t *>PyBytes_AS_STRING(self.buf) + self.pos
        if avail < 4:
            return 4 - avail
        return max(0, 4 + <Py_ssize_t>(p[0] | (p[1] << 8) | (p[2] << 16)) - avail)

    cdef int _post_header(self, int event_type, int default):
        cdef int i = event_type - 1
        if i < 0 or i >= PyBytes_GET_SIZE(self.post_header):
            return default
        return (<const uint8_t *>PyBytes_AS_STRING(self.post_header))[i]

    def next_event(self):
        """The next packet as a FramedEvent, or None when it has not fully arrived."""
        cdef const uint8_t *p
        cdef Py_ssize_t avail, plen, total, at
        cdef int seq
        cdef bytes data
        cdef Py_ssize_t start
        cdef FramedEvent event
        while True:
            avail = PyBytes_GET_SIZE(self.buf) - self.pos
            if avail < 4:
                return None
            p = <const uint8_t *>PyBytes_AS_STRING(self.buf) + self.pos
            plen = p[0] | (p[1] << 8) | (p[2] << 16)
            if plen == MAX_PACKET:
                data = self._joined()  # a payload of 16 MiB or more: split into several packets
                if data is None:
                    return None
                start = 0
                plen = PyBytes_GET_SIZE(data)
            else:
                if avail < 4 + plen:
                    return None
                seq = p[3]
                if seq != self.next_seq:
                    raise FramingError(f"packet sequence {seq}, expected {self.next_seq}")
                self.next_seq = (seq + 1) & 0xFF
                data = self.buf
                start = self.pos + 4
                self.pos += 4 + plen
            if plen == 0:
                continue
            p = <const uint8_t *>PyBytes_AS_STRING(data) + start
            if p[0] == 0xFE and plen < 9:
                return self._marker(K_EOF, data, start, plen)
            if p[0] == 0xFF:
                return self._marker(K_ERROR, data, start, plen)
            if p[0] != 0x00:
                continue  # not an OK packet: mysql-replication passes over it too
            event = self._event(data, start, plen)
            if event is not None:
                self.passed_log_pos = 0
                return event

    cdef bytes _joined(self):
        """The payload of a packet split at 16 MiB, once all its parts are here (else None)."""
        cdef Py_ssize_t at = self.pos, plen, end = PyBytes_GET_SIZE(self.buf)
        cdef const uint8_t *p
        cdef list parts = []
        cdef int seq = self.next_seq
        while True:
            if end - at < 4:
                return None
            p = <const uint8_t *>PyBytes_AS_STRING(self.buf) + at
            plen = p[0] | (p[1] << 8) | (p[2] << 16)
            if end - at < 4 + plen:
                return None
            if p[3] != seq:
                raise FramingError(f"packet sequence {p[3]}, expected {seq}")
            seq = (seq + 1) & 0xFF
            parts.append(self.buf[at + 4:at + 4 + plen])
            at += 4 + plen
            if plen < MAX_PACKET:
                break
        self.pos = at
        self.next_seq = seq
        return b"".join(parts)

    cdef FramedEvent _marker(self, int kind, bytes data, Py_ssize_t start, Py_ssize_t plen):
        cdef FramedEvent ev = FramedEvent.__new__(FramedEvent)
        ev.event_type = kind
        ev.data = data
        ev.packet_start, ev.packet_end = start, start + plen
        return ev

    cdef FramedEvent _event(self, bytes data, Py_ssize_t start, Py_ssize_t plen):
        """The event of this packet, or None when it is passed over (``pass_over``)."""
        cdef const uint8_t *base = <const uint8_t *>PyBytes_AS_STRING(data)
        cdef const uint8_t *h = base + start + 1
        cdef FramedEvent ev
        cdef Py_ssize_t end
        cdef int event_type
        cdef uint32_t event_size, log_pos
        cdef bint passable = False
        if plen - 1 < HEADER:
            raise FramingError(f"an event of {plen - 1} bytes is shorter than its header")
        event_type = h[4]
        event_size = u32(h + 9)
        log_pos = u32(h + 13)
        if event_size != plen - 1:
            raise FramingError(
                f"event of type {event_type:#04x} at {log_pos} says {event_size} bytes, its packet holds "
                f"{plen - 1}")
        end = start + 1 + event_size
        if self.checksum:
            if event_size < HEADER + 4:
                raise FramingError(f"event of type {event_type:#04x} at {log_pos} has no room for its checksum")
            end -= 4
            if crc32(h, end - start - 1) != u32(base + end):
                raise FramingError(
                    f"event of type {event_type:#04x} ending at {log_pos}: its CRC32 checksum does not "
                    "match its bytes (corrupt binlog or transfer)")
        if self.pass_over == P_BOUNDARY:
            if not (event_type == T_QUERY or event_type == T_XID or event_type == T_ROTATE
                    or event_type == T_GTID or event_type == T_ANONYMOUS_GTID or event_type == T_GTID_TAGGED
                    or event_type == T_MARIADB_GTID or event_type == T_XA_PREPARE
                    or event_type == T_FORMAT_DESCRIPTION):
                if log_pos != 0:
                    self.passed_log_pos = log_pos
                self.passed += 1
                return None
        elif self.pass_over != PASS_NONE and log_pos != 0 and not u16(h + 17) & 0x20:  # not artificial
            passable = self._passable(event_type, h + HEADER, base + end)
            if passable and self.pass_over == PASS_OVER:
                self.passed_log_pos = log_pos
                self.passed += 1
                return None
        ev = FramedEvent.__new__(FramedEvent)
        ev.data = data
        ev.packet_start, ev.packet_end = start, start + plen
        ev.start = start + 1
        ev.timestamp = u32(h)
        ev.event_type = event_type
        ev.server_id = u32(h + 5)
        ev.event_size = event_size
        ev.log_pos = log_pos
        ev.header_flags = u16(h + 17)
        ev.end = end
        ev.passable = passable
        self._parse(ev, base, h + HEADER, base + end)
        if event_type == T_ROTATE and ev.timestamp != 0 or event_type == T_TABLE_MAP and not ev.framed:
            self.known.clear()  # mysql-replication forgets its table maps at a rotation
        return ev

    cdef bint _passable(self, int t, const uint8_t *b, const uint8_t *e) except -1:
        """Whether the loop would pass over this event inside a transaction (see the module's docstring)."""
        cdef object body
        cdef Py_ssize_t n = e - b
        if t == T_ROWS_QUERY or t == T_ANNOTATE_ROWS:
            return True
        if t != T_TABLE_MAP or not self.known or self._post_header(T_TABLE_MAP, 8) < 8 or n < 8:
            return False
        body = self.known.get(u48(b))
        return (body is not None and PyBytes_GET_SIZE(body) == n
                and memcmp(PyBytes_AS_STRING(body), b, n) == 0)

    cdef void _parse(self, FramedEvent ev, const uint8_t *base, const uint8_t *b, const uint8_t *e) except *:
        cdef int t = ev.event_type
        cdef Py_ssize_t n = e - b
        cdef int ph
        ev.body_start = b - base
        ev.body_end = e - base
        if t == T_XID:
            _need(ev, n, 8)
            ev.xid = u64(b)
        elif t == T_WRITE_V1 or t == T_UPDATE_V1 or t == T_DELETE_V1 \
                or t == T_WRITE_V2 or t == T_UPDATE_V2 or t == T_DELETE_V2:
            if not self._rows(ev, base, b, e):
                return
        elif t == T_TABLE_MAP:
            if not self._table_map(ev, b, e):
                return
        elif t == T_MARIADB_GTID:
            _need(ev, n, 13)
            ev.gtid_flags = b[12]
            ev.gtid = f"{u32(b + 8)}-{ev.server_id}-{u64(b)}"
        elif t == T_GTID:
            _need(ev, n, 25)
            ev.gtid = _uuid_gno(b + 1, u64(b + 17))
        elif t == T_QUERY:
            ph = self._post_header(t, 13)
            if ph < 13:
                return
            if not self._query(ev, b, e, ph):
                return
        elif t == T_ROTATE:
            _need(ev, n, 8)
            ev.position = u64(b)
            ev.next_binlog = (<bytes>PyBytes_FromStringAndSize(<const char *>b + 8, n - 8)).decode()
        elif not (t == T_ANONYMOUS_GTID or t == T_HEARTBEAT or t == T_STOP or t == T_ROWS_QUERY
                  or t == T_PREVIOUS_GTIDS or t == T_ANNOTATE_ROWS or t == T_CHECKPOINT or t == T_GTID_LIST):
            return  # mysql-replication parses it
        ev.framed = True

    cdef bint _rows(self, FramedEvent ev, const uint8_t *base, const uint8_t *b, const uint8_t *e) except -1:
        cdef int t = ev.event_type
        cdef bint v2 = t >= T_WRITE_V2
        cdef int known = 10 if v2 else 8
        cdef int ph = self._post_header(t, known)
        cdef const uint8_t *at = b
        cdef Py_ssize_t width, extra
        cdef uint64_t ncols
        if ph < known or e - b < ph:
            return False
        ev.table_id = u48(at)
        ev.rows_flags = u16(at + 6)
        at += ph
        if v2:
            extra = u16(b + 8)
            if extra < 2 or e - at < extra - 2:
                return False
            at += extra - 2
        if not _packed(&at, e, &ncols):
            return False
        width = (ncols + 7) // 8
        if e - at < width * (2 if t == T_UPDATE_V1 or t == T_UPDATE_V2 else 1):
            return False
        ev.column_count = ncols
        ev.present = PyBytes_FromStringAndSize(<const char *>at, width)
        at += width
        if t == T_UPDATE_V1 or t == T_UPDATE_V2:
            ev.present_after = PyBytes_FromStringAndSize(<const char *>at, width)
            at += width
        ev.body_start = at - base
        return True

    cdef bint _table_map(self, FramedEvent ev, const uint8_t *b, const uint8_t *e) except -1:
        cdef int ph = self._post_header(T_TABLE_MAP, 8)
        cdef const uint8_t *at = b
        cdef Py_ssize_t length
        if ph < 8 or e - b < ph + 1:
            return False
        ev.table_id = u48(b)
        at += ph
        length = at[0]
        if e - at < length + 3:
            return False
        ev.schema = PyBytes_FromStringAndSize(<const char *>at + 1, length).decode()
        at += length + 2
        length = at[0]
        if e - at < length + 1:
            return False
        ev.table = PyBytes_FromStringAndSize(<const char *>at + 1, length).decode()
        return True

    cdef bint _query(self, FramedEvent ev, const uint8_t *b, const uint8_t *e, int ph) except -1:
        cdef Py_ssize_t schema_len, status_len
        cdef const uint8_t *at
        if e - b < ph:
            return False
        schema_len = b[8]
        status_len = u16(b + 11)
        at = b + ph + status_len
        if e - at < schema_len + 1:
            return False
        ev.schema = PyBytes_FromStringAndSize(<const char *>at, schema_len)
        at += schema_len + 1
        ev.query = PyUnicode_DecodeUTF8(<const char *>at, e - at, "backslashreplace")
        return True


cdef inline void _need(FramedEvent ev, Py_ssize_t have, Py_ssize_t need) except *:
    if have < need:
        raise FramingError(f"event of type {ev.event_type:#04x} ending at {ev.log_pos} has a body of {have} "
                           f"bytes, {need} expected")


cdef inline bint _packed(const uint8_t **at, const uint8_t *e, uint64_t *out) noexcept:
    """A length-encoded integer (mysql-replication's read_length_coded_binary)."""
    cdef const uint8_t *p = at[0]
    if e - p < 1:
        return False
    if p[0] < 251:
        out[0] = p[0]
        at[0] = p + 1
        return True
    if p[0] == 252 and e - p >= 3:
        out[0] = u16(p + 1)
        at[0] = p + 3
        return True
    if p[0] == 253 and e - p >= 4:
        out[0] = p[1] | (<uint64_t>p[2] << 8) | (<uint64_t>p[3] << 16)
        at[0] = p + 4
        return True
    if p[0] == 254 and e - p >= 9:
        out[0] = u64(p + 1)
        at[0] = p + 9
        return True
    return False


cdef str _uuid_gno(const uint8_t *sid, uint64_t gno):
    """MySQL's GTID as mysql-replication writes it: the source UUID in lower-case hex, a colon, the number."""
    cdef char text[64]
    cdef int n = snprintf(
        text, 64,
        b"%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x:%llu",
        sid[0], sid[1], sid[2], sid[3], sid[4], sid[5], sid[6], sid[7], sid[8], sid[9], sid[10], sid[11],
        sid[12], sid[13], sid[14], sid[15], <unsigned long long>gno)
    return PyBytes_FromStringAndSize(text, n).decode("ascii")

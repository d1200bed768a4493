# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The compiled decoder of rows-event bodies: every row image of a WRITE/UPDATE/DELETE_ROWS event, decoded and
normalised in C, column by column.

Why: mysql-replication decodes each value in Python (~28k row images/s) and every image is then normalised
by ``model.values.binlog_normalizer``; that is the whole cost of a catch-up. This loop produces, for each
column, the list of values ``normalize(row["values"], row["none_sources"])`` would hold, without a Python
call per value (text of charsets without a table here and JSON call the column's converter once per value).

Each branch below reproduces mysql-replication 1.0.17's reading of a column type as ``binlog.row_decoding``
patches it (row_event.py, column.py, packet.py), quirks included, followed by the normaliser's conversion:
the output equals the Python path's, type for type. The layout (``layout.py``) decides which branch a column
takes; this module never guesses. Bytes are only read, never consumed: the packet stays where
mysql-replication left it, so its own ``event.rows`` can still run on the same event.
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.datetime cimport date_new, datetime_new, import_datetime, timedelta_new
from cpython.long cimport PyLong_FromLongLong, PyLong_FromUnsignedLongLong
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.ref cimport Py_DECREF, PyObject
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.stdio cimport snprintf
from libc.string cimport memcpy, memset

import datetime as _dt
from decimal import Decimal

from airflow_provider_mysqlcdc.engine.model.values import ZeroDate

import_datetime()

cdef object UTC = _dt.timezone.utc

cdef extern from *:
    """
    /* Text decoders that report failure as NULL with the error cleared: the caller then runs the column's
       Python converter on the same bytes, which raises the project's own error (UndecodableText). */
    static PyObject *mcdc_decode(int mode, const char *s, Py_ssize_t n, PyObject *mapping) {
        PyObject *r = NULL;
        int order;
        switch (mode) {
            case 3: r = PyUnicode_DecodeUTF8(s, n, NULL); break;
            case 4: order = 1; r = PyUnicode_DecodeUTF16(s, n, NULL, &order); break;
            case 5: order = -1; r = PyUnicode_DecodeUTF16(s, n, NULL, &order); break;
            case 6: order = 1; r = PyUnicode_DecodeUTF32(s, n, NULL, &order); break;
            case 7: r = PyUnicode_DecodeCharmap(s, n, mapping, NULL); break;
            default: return NULL;
        }
        if (r == NULL) PyErr_Clear();
        return r;
    }
    """
    PyObject *mcdc_decode(int mode, const char *s, Py_ssize_t n, PyObject *mapping)
    object PyUnicode_DecodeASCII(const char *s, Py_ssize_t size, const char *errors)
    object PyUnicode_FromKindAndData(int kind, const void *buffer, Py_ssize_t size)

cdef enum:
    # Wire (codes.py)
    W_INT8 = 1
    W_UINT8 = 2
    W_INT16 = 3
    W_UINT16 = 4
    W_INT24 = 5
    W_UINT24 = 6
    W_INT32 = 7
    W_UINT32 = 8
    W_INT64 = 9
    W_UINT64 = 10
    W_FLOAT = 11
    W_DOUBLE = 12
    W_DECIMAL = 13
    W_DATE = 14
    W_DATETIME = 15
    W_DATETIME2 = 16
    W_TIME = 17
    W_TIME2 = 18
    W_TIMESTAMP = 19
    W_TIMESTAMP2 = 20
    W_YEAR = 21
    W_ENUM = 22
    W_SET = 23
    W_BIT = 24
    W_STRING = 25
    # Out (codes.py)
    O_RAW = 0
    O_BYTES = 1
    O_PADDED = 2
    O_UTF8 = 3
    O_UTF16BE = 4
    O_UTF16LE = 5
    O_UTF32BE = 6
    O_CHARMAP = 7
    O_MULTIBYTE = 8
    O_PYCALL = 9
    O_UUID = 10
    O_INET4 = 11
    O_INET6 = 12
    # Flag (codes.py)
    F_UTC = 1
    F_TIME_FIX = 2
    F_YEAR_ZERO = 4
    F_SET_TEXT = 8
    F_BIT_INT = 16

cdef uint32_t NO_CHAR = 0xFFFFFFFF
cdef int64_t US_PER_DAY = 86400000000
cdef int SET_CACHE_LIMIT = 4096
cdef int[10] DIG2BYTES = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4]
cdef char *HEX = b"0123456789abcdef"


def check_codes(wire, out, flag):
    """Fail loudly when codes.py and the C enums above differ (checked once, at import)."""
    expected = {
        "INT8": W_INT8, "UINT8": W_UINT8, "INT16": W_INT16, "UINT16": W_UINT16, "INT24": W_INT24,
        "UINT24": W_UINT24, "INT32": W_INT32, "UINT32": W_UINT32, "INT64": W_INT64, "UINT64": W_UINT64,
        "FLOAT": W_FLOAT, "DOUBLE": W_DOUBLE, "DECIMAL": W_DECIMAL, "DATE": W_DATE, "DATETIME": W_DATETIME,
        "DATETIME2": W_DATETIME2, "TIME": W_TIME, "TIME2": W_TIME2, "TIMESTAMP": W_TIMESTAMP,
        "TIMESTAMP2": W_TIMESTAMP2, "YEAR": W_YEAR, "ENUM": W_ENUM, "SET": W_SET, "BIT": W_BIT,
        "STRING": W_STRING,
    }
    outs = {
        "RAW": O_RAW, "BYTES": O_BYTES, "PADDED": O_PADDED, "UTF8": O_UTF8, "UTF16BE": O_UTF16BE,
        "UTF16LE": O_UTF16LE, "UTF32BE": O_UTF32BE, "CHARMAP": O_CHARMAP, "MULTIBYTE": O_MULTIBYTE,
        "PYCALL": O_PYCALL, "UUID": O_UUID, "INET4": O_INET4, "INET6": O_INET6,
    }
    flags = {"UTC": F_UTC, "TIME_FIX": F_TIME_FIX, "YEAR_ZERO": F_YEAR_ZERO, "SET_TEXT": F_SET_TEXT,
             "BIT_INT": F_BIT_INT}
    for enum, table in ((wire, expected), (out, outs), (flag, flags)):
        got = {m.name: int(m) for m in enum}
        if got != table:
            raise ImportError(f"rows_decoder: {enum.__name__} codes differ between codes.py and _rows.pyx")


ctypedef struct ColSpec:
    int wire
    int out
    int size  # STRING: length prefix bytes; ENUM/SET: pack length; BIT: bytes
    int fsp
    int precision
    int decimals
    int pad  # PADDED: BINARY(n) length
    int flags
    int first_mask  # BIT: the bits of the first byte that belong to the value
    int nmembers  # SET: members the table map names
    void *mb  # MULTIBYTE: the charset's MultibyteTable


cdef class MultibyteTable:
    """A multi-byte charset's table (``model.charsets.CharsetDecoder`` of a legacy charset) as C arrays:
    2-byte sequences -> character, 3-byte sequences by lead byte, and the 256 single bytes."""

    cdef uint32_t *two
    cdef uint32_t **three
    cdef uint32_t single[256]
    cdef int max_width
    cdef bint ascii_identity

    def __cinit__(self, str single, dict multi, int max_width, bint ascii_identity):
        cdef Py_ssize_t k
        cdef uint32_t *t
        cdef const uint8_t *kp
        self.two = NULL
        self.three = NULL
        if len(single) != 256 or max_width < 2 or max_width > 3:
            raise ValueError("not a table of 1- to 3-byte sequences")
        for k in range(256):
            self.single[k] = ord(single[k])
        self.max_width = max_width
        self.ascii_identity = ascii_identity
        self.two = <uint32_t *> PyMem_Malloc(65536 * sizeof(uint32_t))
        self.three = <uint32_t **> PyMem_Malloc(256 * sizeof(uint32_t *))
        if self.two == NULL or self.three == NULL:
            raise MemoryError()
        for k in range(65536):
            self.two[k] = NO_CHAR
        for k in range(256):
            self.three[k] = NULL
        for key, char in multi.items():
            if type(key) is not bytes or type(char) is not str or len(char) != 1 or len(key) not in (2, 3):
                raise ValueError("a sequence that is not one character")
            kp = <const uint8_t *> PyBytes_AS_STRING(key)
            if len(key) == 2:
                self.two[(kp[0] << 8) | kp[1]] = ord(char)
                continue
            t = self.three[kp[0]]
            if t == NULL:
                t = <uint32_t *> PyMem_Malloc(65536 * sizeof(uint32_t))
                if t == NULL:
                    raise MemoryError()
                for k in range(65536):
                    t[k] = NO_CHAR
                self.three[kp[0]] = t
            t[(kp[1] << 8) | kp[2]] = ord(char)

    def __dealloc__(self):
        cdef int k
        if self.three != NULL:
            for k in range(256):
                if self.three[k] != NULL:
                    PyMem_Free(self.three[k])
            PyMem_Free(self.three)
        if self.two != NULL:
            PyMem_Free(self.two)


cdef object decode_multibyte(MultibyteTable table, const uint8_t *s, Py_ssize_t n):
    """``CharsetDecoder._decode_multibyte``: at each byte the longest sequence the table defines, else the
    single byte's character (its ASCII shortcut gives the same text)."""
    cdef Py_ssize_t i = 0, k = 0, width
    cdef uint32_t ch
    cdef uint32_t *t
    cdef uint32_t *out
    cdef bint ascii = table.ascii_identity
    if ascii:
        for i in range(n):
            if s[i] >= 0x80:
                ascii = False
                break
        if ascii:
            return PyUnicode_DecodeASCII(<const char *> s, n, NULL)
    out = <uint32_t *> PyMem_Malloc((n + 1) * sizeof(uint32_t))
    if out == NULL:
        raise MemoryError()
    try:
        i = 0
        while i < n:
            width = table.max_width if table.max_width < n - i else n - i
            ch = NO_CHAR
            while width >= 2:
                if width == 3:
                    t = table.three[s[i]]
                    if t != NULL:
                        ch = t[(s[i + 1] << 8) | s[i + 2]]
                else:
                    ch = table.two[(s[i] << 8) | s[i + 1]]
                if ch != NO_CHAR:
                    break
                width -= 1
            if ch != NO_CHAR:
                out[k] = ch
                i += width
            else:
                out[k] = table.single[s[i]]
                i += 1
            k += 1
        return PyUnicode_FromKindAndData(4, out, k)
    finally:
        PyMem_Free(out)


cdef inline uint64_t rd_le(const uint8_t *p, int n) noexcept:
    cdef uint64_t v = 0
    cdef int k
    for k in range(n):
        v |= (<uint64_t> p[k]) << (8 * k)
    return v


cdef inline uint64_t rd_be(const uint8_t *p, int n) noexcept:
    cdef uint64_t v = 0
    cdef int k
    for k in range(n):
        v = (v << 8) | p[k]
    return v


cdef inline int64_t sign_extend(uint64_t v, int nbytes) noexcept:
    """packet.read_int_be_by_size's signed reading of ``nbytes`` (1-4) bytes."""
    cdef int bits = 8 * nbytes
    if v & ((<uint64_t> 1) << (bits - 1)):
        return <int64_t> v - ((<int64_t> 1) << bits)
    return <int64_t> v


cdef inline int fsp_bytes(int fsp) noexcept:
    if fsp == 1 or fsp == 2:
        return 1
    if fsp == 3 or fsp == 4:
        return 2
    if fsp == 5 or fsp == 6:
        return 3
    return 0


cdef inline int64_t fsp_value(const uint8_t *p, int fsp) noexcept:
    """RowsEvent.__read_fsp: a signed big-endian read, a tenth of it for odd precisions (truncated toward
    zero, as ``int(x / 10)``), scaled to microseconds."""
    cdef int nb = fsp_bytes(fsp)
    cdef int64_t m
    cdef int k
    if nb == 0:
        return 0
    m = sign_extend(rd_be(p, nb), nb)
    if fsp % 2:
        m = m / 10
    for k in range(6 - fsp):
        m *= 10
    return m


cdef inline void civil_from_days(int64_t z, int *y, int *m, int *d) noexcept:
    """Days since 1970-01-01 -> proleptic Gregorian date (H. Hinnant's algorithm)."""
    cdef int64_t era, doe, yoe, doy, mp
    z += 719468
    era = (z if z >= 0 else z - 146096) / 146097
    doe = z - era * 146097
    yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365
    doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
    mp = (5 * doy + 2) / 153
    d[0] = <int> (doy - (153 * mp + 2) / 5 + 1)
    m[0] = <int> (mp + 3 if mp < 10 else mp - 9)
    y[0] = <int> (yoe + era * 400 + (1 if m[0] <= 2 else 0))


cdef object delta_from_us(int64_t total):
    cdef int64_t days = total / US_PER_DAY
    cdef int64_t rem = total - days * US_PER_DAY
    if rem < 0:
        days -= 1
        rem += US_PER_DAY
    return timedelta_new(<int> days, <int> (rem / 1000000), <int> (rem % 1000000))


cdef object utc_seconds(int64_t secs, int64_t micro, bint aware, object zero):
    """``datetime.utcfromtimestamp(secs)`` (+ ``.replace(microsecond=micro)`` when micro > 0), then the
    normaliser's TIMESTAMP rule: the epoch itself is TIMESTAMP 0 (a ZeroDate), anything else UTC."""
    cdef int64_t days = secs / 86400
    cdef int64_t sod = secs - days * 86400
    cdef int y, mo, d
    if sod < 0:
        days -= 1
        sod += 86400
    if micro < 0:
        micro = 0
    if aware and secs == 0 and micro == 0:
        return zero
    civil_from_days(days, &y, &mo, &d)
    return datetime_new(y, mo, d, <int> (sod / 3600), <int> ((sod / 60) % 60), <int> (sod % 60), <int> micro,
                        UTC if aware else None)


cdef object zero_text(const char *text, Py_ssize_t n):
    return ZeroDate(PyUnicode_DecodeASCII(text, n, NULL))


cdef object read_decimal(const uint8_t *p, int precision, int decimals, Py_ssize_t *used):
    """RowsEvent.__read_new_decimal: the digits as text (integral groups unpadded first, then 9-digit
    groups, the fraction's last group padded to its digits), parsed by Decimal: same value, same exponent."""
    cdef int integral = precision - decimals
    cdef int ui = integral / 9, uf = decimals / 9
    cdef int ci = integral - ui * 9, cf = decimals - uf * 9
    cdef int total = DIG2BYTES[ci] + (ui + uf) * 4 + DIG2BYTES[cf]
    cdef uint8_t tmp[64]
    cdef char text[256]
    cdef int n = 0, off = 0, k, size
    cdef int64_t mask, v
    if total > 64:
        raise ValueError("DECIMAL wider than 65 digits")
    used[0] = total
    memcpy(tmp, p, total)
    if tmp[0] & 0x80:
        mask = 0
    else:
        mask = -1
        text[n] = 45  # '-'
        n += 1
    tmp[0] ^= 0x80
    size = DIG2BYTES[ci]
    if size > 0:
        v = sign_extend(rd_be(tmp, size), size) ^ mask
        n += snprintf(text + n, 256 - n, b"%lld", <long long> v)
        off += size
    for k in range(ui):
        v = sign_extend(rd_be(tmp + off, 4), 4) ^ mask
        n += snprintf(text + n, 256 - n, b"%09lld", <long long> v)
        off += 4
    text[n] = 46  # '.'
    n += 1
    for k in range(uf):
        v = sign_extend(rd_be(tmp + off, 4), 4) ^ mask
        n += snprintf(text + n, 256 - n, b"%09lld", <long long> v)
        off += 4
    size = DIG2BYTES[cf]
    if size > 0:
        v = sign_extend(rd_be(tmp + off, size), size) ^ mask
        n += snprintf(text + n, 256 - n, b"%0*lld", cf, <long long> v)
    return Decimal(PyUnicode_DecodeASCII(text, n, NULL))


cdef object uuid_text(const uint8_t *d):
    cdef char text[36]
    cdef int k, n = 0
    for k in range(16):
        if k == 4 or k == 6 or k == 8 or k == 10:
            text[n] = 45  # '-'
            n += 1
        text[n] = HEX[d[k] >> 4]
        text[n + 1] = HEX[d[k] & 15]
        n += 2
    return PyUnicode_DecodeASCII(text, 36, NULL)


cdef object inet4_text(const uint8_t *d):
    cdef char text[16]
    cdef int n = snprintf(text, 16, b"%u.%u.%u.%u", d[0], d[1], d[2], d[3])
    return PyUnicode_DecodeASCII(text, n, NULL)


cdef object inet6_text(const uint8_t *d):
    """``model.values.inet6_text``: the longest run of zero words (even one) as '::', and the IPv4-compatible
    and IPv4-mapped forms in dotted notation."""
    cdef int words[8]
    cdef int i, gap_at = -1, gap_len = 0, run_at = -1
    cdef char text[64]
    cdef int n = 0
    for i in range(8):
        words[i] = (d[2 * i] << 8) | d[2 * i + 1]
    for i in range(9):
        if i < 8 and words[i] == 0:
            if run_at < 0:
                run_at = i
        elif run_at >= 0:
            if i - run_at > gap_len:
                gap_at = run_at
                gap_len = i - run_at
            run_at = -1
    if gap_at == 0 and (gap_len == 6 or (gap_len == 5 and words[5] == 0xFFFF)):
        if gap_len == 6:
            n = snprintf(text, 64, b"::%u.%u.%u.%u", d[12], d[13], d[14], d[15])
        else:
            n = snprintf(text, 64, b"::ffff:%u.%u.%u.%u", d[12], d[13], d[14], d[15])
        return PyUnicode_DecodeASCII(text, n, NULL)
    if gap_at < 0:
        for i in range(8):
            n += snprintf(text + n, 64 - n, b":%x" if i else b"%x", words[i])
        return PyUnicode_DecodeASCII(text, n, NULL)
    for i in range(gap_at):
        n += snprintf(text + n, 64 - n, b":%x" if i else b"%x", words[i])
    text[n] = 58  # ':'
    text[n + 1] = 58
    n += 2
    for i in range(gap_at + gap_len, 8):
        n += snprintf(text + n, 64 - n, b":%x" if i > gap_at + gap_len else b"%x", words[i])
    return PyUnicode_DecodeASCII(text, n, NULL)


cdef class CompiledLayout:
    """The per-column decoding of one TABLE_MAP's columns, as C structs plus the Python objects some
    columns need (ENUM members, SET texts, charset tables, the column's Python converter)."""

    cdef ColSpec *specs
    cdef readonly int ncols
    cdef list objs
    cdef list convs
    cdef list caches

    def __cinit__(self, list columns):
        cdef int i
        cdef ColSpec *c
        self.ncols = len(columns)
        self.specs = <ColSpec *> PyMem_Malloc((self.ncols + 1) * sizeof(ColSpec))
        if self.specs == NULL:
            raise MemoryError()
        self.objs = []
        self.convs = []
        self.caches = []
        for i, spec in enumerate(columns):
            (wire, out, size, fsp, precision, decimals, pad, flags, first_mask, nmembers, obj, conv) = spec
            c = &self.specs[i]
            c.wire, c.out, c.size, c.fsp = wire, out, size, fsp
            c.precision, c.decimals, c.pad, c.flags = precision, decimals, pad, flags
            c.first_mask, c.nmembers = first_mask, nmembers
            c.mb = NULL
            if out == O_MULTIBYTE:
                if not isinstance(obj, MultibyteTable):
                    raise TypeError("MULTIBYTE needs a MultibyteTable")
                c.mb = <void *> obj
            if out == O_CHARMAP and not isinstance(obj, str):
                raise TypeError("CHARMAP needs the 256-character map")
            if (out == O_PYCALL or wire == W_SET) and not callable(obj if wire == W_SET else conv):
                raise TypeError("column needs a callable")
            self.objs.append(obj)
            self.convs.append(conv)
            self.caches.append({} if wire == W_SET else None)

    def __dealloc__(self):
        if self.specs != NULL:
            PyMem_Free(self.specs)

    def decode(self, bytes data, Py_ssize_t start, Py_ssize_t end, bytes present, object present_after):
        """Decode the rows in ``data[start:end]`` (the event body after its columns-present bitmap(s)).

        Returns ``(images, rows)``: ``images`` holds one list of per-column value lists (WRITE/DELETE) or two
        (before, after: UPDATE, when ``present_after`` is the second bitmap).
        """
        cdef const uint8_t *buf = <const uint8_t *> PyBytes_AS_STRING(data)
        cdef Py_ssize_t pos = start
        cdef Py_ssize_t rows = 0
        cdef int nbm = (self.ncols + 7) >> 3
        cdef const uint8_t *p1
        cdef const uint8_t *p2 = NULL
        cdef int pc1, pc2 = 0
        cdef list first = [[] for _ in range(self.ncols)]
        cdef list second = None
        if start < 0 or end > PyBytes_GET_SIZE(data) or start > end:
            raise ValueError("rows event body outside the packet")
        if len(present) < nbm:
            raise ValueError("columns-present bitmap shorter than the columns")
        p1 = <const uint8_t *> PyBytes_AS_STRING(present)
        pc1 = popcount(p1, len(present))
        if present_after is not None:
            if len(<bytes> present_after) < nbm:
                raise ValueError("columns-present bitmap shorter than the columns")
            p2 = <const uint8_t *> PyBytes_AS_STRING(<bytes> present_after)
            pc2 = popcount(p2, len(<bytes> present_after))
            second = [[] for _ in range(self.ncols)]
        cdef Py_ssize_t row_start
        while pos < end:
            row_start = pos
            self.read_image(buf, &pos, end, p1, pc1, first)
            if p2 != NULL:
                self.read_image(buf, &pos, end, p2, pc2, second)
            if pos == row_start:  # an image of no bytes: the same bytes would follow forever
                raise ValueError("a row image of no bytes in a rows event")
            rows += 1
        return ([first] if second is None else [first, second]), rows

    cdef int read_image(self, const uint8_t *buf, Py_ssize_t *ppos, Py_ssize_t end, const uint8_t *present,
                        int present_count, list columns) except -1:
        """RowsEvent._read_column_data: a null bitmap over the present columns, then each present, non-NULL
        value (an absent column reads as None, like mysql-replication's)."""
        cdef Py_ssize_t pos = ppos[0]
        cdef int nullbytes = (present_count + 7) >> 3
        cdef const uint8_t *nulls
        cdef int i, ni = 0
        if pos + nullbytes > end:
            raise ValueError("rows event ends inside a null bitmap")
        nulls = buf + pos
        pos += nullbytes
        for i in range(self.ncols):
            if not (present[i >> 3] & (1 << (i & 7))):
                value = None
            elif nulls[ni >> 3] & (1 << (ni & 7)):
                value = None
                ni += 1
            else:
                value = self.read_value(i, buf, &pos, end)
                ni += 1
            (<list> columns[i]).append(value)
        ppos[0] = pos
        return 0

    cdef object read_value(self, int i, const uint8_t *buf, Py_ssize_t *ppos, Py_ssize_t end):
        cdef ColSpec *c = &self.specs[i]
        cdef Py_ssize_t pos = ppos[0]
        cdef const uint8_t *p = buf + pos
        cdef Py_ssize_t need, n
        cdef uint64_t u
        cdef int64_t s, m, total
        cdef uint32_t f32
        cdef uint64_t f64
        cdef float fv
        cdef double dv
        cdef int w = c.wire
        cdef int y, mo, d, hh, mi, ss, sign, nb
        cdef char text[48]
        cdef Py_ssize_t used
        if w == W_STRING:
            if pos + c.size > end:
                raise ValueError("rows event ends inside a value")
            n = <Py_ssize_t> rd_le(p, c.size)
            if pos + c.size + n > end:
                raise ValueError("rows event ends inside a value")
            ppos[0] = pos + c.size + n
            return self.string_value(i, c, p + c.size, n)
        need = fixed_width(c)
        if pos + need > end:
            raise ValueError("rows event ends inside a value")
        ppos[0] = pos + need
        if w == W_INT8:
            return PyLong_FromLongLong(<signed char> p[0])
        if w == W_UINT8:
            return PyLong_FromLongLong(p[0])
        if w == W_INT16:
            return PyLong_FromLongLong(<short> rd_le(p, 2))
        if w == W_UINT16:
            return PyLong_FromLongLong(<long long> rd_le(p, 2))
        if w == W_INT24:
            u = rd_le(p, 3)
            return PyLong_FromLongLong(<long long> u - 0x1000000 if u >= 0x800000 else <long long> u)
        if w == W_UINT24:
            return PyLong_FromLongLong(<long long> rd_le(p, 3))
        if w == W_INT32:
            return PyLong_FromLongLong(<int> <uint32_t> rd_le(p, 4))
        if w == W_UINT32:
            return PyLong_FromLongLong(<long long> rd_le(p, 4))
        if w == W_INT64:
            return PyLong_FromLongLong(<long long> rd_le(p, 8))
        if w == W_UINT64:
            return PyLong_FromUnsignedLongLong(rd_le(p, 8))
        if w == W_FLOAT:
            f32 = <uint32_t> rd_le(p, 4)
            memcpy(&fv, &f32, 4)
            return <double> fv
        if w == W_DOUBLE:
            f64 = rd_le(p, 8)
            memcpy(&dv, &f64, 8)
            return dv
        if w == W_DECIMAL:
            return read_decimal(p, c.precision, c.decimals, &used)
        if w == W_DATE:
            u = rd_le(p, 3)
            y, mo, d = <int> (u >> 9), <int> ((u >> 5) & 0x0F), <int> (u & 0x1F)
            if y and mo and d:
                return date_new(y, mo, d)
            n = snprintf(text, 48, b"%04d-%02d-%02d", y, mo, d)
            return zero_text(text, n)
        if w == W_DATETIME:  # patched _read_datetime: divmod of the integer YYYYMMDDhhmmss
            u = rd_le(p, 8)
            s = <int64_t> (u / 1000000)
            m = <int64_t> (u % 1000000)
            if (s / 10000) and (s / 100) % 100 and s % 100:
                return datetime_new(<int> (s / 10000), <int> ((s / 100) % 100), <int> (s % 100),
                                    <int> (m / 10000), <int> ((m / 100) % 100), <int> (m % 100), 0, None)
            n = snprintf(text, 48, b"%04lld-%02lld-%02lld %02lld:%02lld:%02lld", <long long> (s / 10000),
                         <long long> ((s / 100) % 100), <long long> (s % 100), <long long> (m / 10000),
                         <long long> ((m / 100) % 100), <long long> (m % 100))
            return zero_text(text, n)
        if w == W_DATETIME2:  # patched _read_datetime2
            u = rd_be(p, 5)
            y = <int> (((u >> 22) & 0x1FFFF) / 13)
            mo = <int> (((u >> 22) & 0x1FFFF) % 13)
            d = <int> ((u >> 17) & 0x1F)
            hh, mi, ss = <int> ((u >> 12) & 0x1F), <int> ((u >> 6) & 0x3F), <int> (u & 0x3F)
            m = fsp_value(p + 5, c.fsp)
            if y and mo and d:
                return datetime_new(y, mo, d, hh, mi, ss, <int> m, None)
            n = snprintf(text, 48, b"%04d-%02d-%02d %02d:%02d:%02d", y, mo, d, hh, mi, ss)
            if c.fsp:
                nb = snprintf(text + n, 48 - n, b".%06lld", <long long> m)
                n += c.fsp + 1 if c.fsp + 1 < nb else nb
            return zero_text(text, n)
        if w == W_TIME:  # row_decoding._read_time: hhmmss as a signed 3-byte integer
            m = sign_extend(rd_le(p, 3), 3)
            u = <uint64_t> (-m if m < 0 else m)
            total = (<int64_t> (u / 10000) * 3600 + <int64_t> ((u % 10000) / 100) * 60
                     + <int64_t> (u % 100)) * 1000000
            return delta_from_us(-total if m < 0 else total)
        if w == W_TIME2:  # RowsEvent.__read_time2, its sign handling and separate fraction included
            u = rd_be(p, 3)
            if u & 0x800000:
                sign = 1
            else:
                sign = -1
                u = (0x1000000 - u) & 0xFFFFFF
            m = fsp_value(p + 3, c.fsp)
            total = ((<int64_t> ((u >> 12) & 0x3FF) * 3600 + <int64_t> ((u >> 6) & 0x3F) * 60
                      + <int64_t> (u & 0x3F)) * 1000000 + m) * sign
            if c.flags & F_TIME_FIX and total < 0:  # model.values._binlog_time
                m = (-total) % 1000000
                if m:
                    total = -((-total - m) + (1000000 - m))
            return delta_from_us(total)
        if w == W_TIMESTAMP:
            return utc_seconds(<int64_t> rd_le(p, 4), 0, c.flags & F_UTC, self.objs[i])
        if w == W_TIMESTAMP2:
            return utc_seconds(sign_extend(rd_be(p, 4), 4), fsp_value(p + 4, c.fsp), c.flags & F_UTC,
                               self.objs[i])
        if w == W_YEAR:
            if c.flags & F_YEAR_ZERO and p[0] == 0:
                return 0
            return PyLong_FromLongLong(1900 + p[0])
        if w == W_ENUM:
            u = rd_le(p, c.size)
            members = self.objs[i]
            if members is None:
                return None
            if u >= <uint64_t> len(<list> members):
                raise IndexError("ENUM index beyond the table map's members")
            return (<list> members)[<Py_ssize_t> u]
        if w == W_SET:
            u = rd_le(p, c.size)
            if c.nmembers < 64:
                u &= ((<uint64_t> 1) << c.nmembers) - 1
            if c.nmembers == 0 or u == 0:
                return "" if c.flags & F_SET_TEXT else None
            key = PyLong_FromUnsignedLongLong(u)
            cache = <dict> self.caches[i]
            found = cache.get(key)
            if found is None:
                found = self.objs[i](key)
                if len(cache) < SET_CACHE_LIMIT:
                    cache[key] = found
            return found
        if w == W_BIT:
            u = p[0] & c.first_mask
            for nb in range(1, c.size):
                u = (u << 8) | p[nb]
            return PyLong_FromUnsignedLongLong(u)
        raise ValueError(f"unknown wire code {w}")

    cdef object string_value(self, int i, ColSpec *c, const uint8_t *s, Py_ssize_t n):
        cdef int o = c.out
        cdef Py_ssize_t width
        cdef PyObject *r
        cdef uint8_t padded[16]
        cdef char *dst
        if o == O_BYTES or o == O_RAW:
            return PyBytes_FromStringAndSize(<const char *> s, n)
        if o == O_PADDED:
            width = n if n >= c.pad else c.pad
            value = PyBytes_FromStringAndSize(NULL, width)
            dst = PyBytes_AS_STRING(value)
            memcpy(dst, s, n)
            memset(dst + n, 0, width - n)
            return value
        if o == O_UTF8 or o == O_UTF16BE or o == O_UTF16LE or o == O_UTF32BE or o == O_CHARMAP:
            r = mcdc_decode(o, <const char *> s, n, <PyObject *> self.objs[i])
            if r != NULL:
                value = <object> r
                Py_DECREF(value)
                return value
            return self.convs[i](PyBytes_FromStringAndSize(<const char *> s, n))
        if o == O_MULTIBYTE:
            return decode_multibyte(<MultibyteTable> c.mb, s, n)
        if o == O_UUID or o == O_INET4 or o == O_INET6:
            width = 4 if o == O_INET4 else 16
            if n > width:  # not a value the server writes: the converter decides
                return self.convs[i](PyBytes_FromStringAndSize(<const char *> s, n))
            memcpy(padded, s, n)
            memset(padded + n, 0, width - n)  # the binlog strips trailing zero bytes
            if o == O_UUID:
                return uuid_text(padded)
            if o == O_INET4:
                return inet4_text(padded)
            return inet6_text(padded)
        return self.convs[i](PyBytes_FromStringAndSize(<const char *> s, n))


cdef inline Py_ssize_t fixed_width(ColSpec *c) noexcept:
    """Bytes a fixed-width value takes."""
    cdef int w = c.wire
    cdef int integral, ui, uf
    if w == W_INT8 or w == W_UINT8 or w == W_YEAR:
        return 1
    if w == W_INT16 or w == W_UINT16:
        return 2
    if w == W_INT24 or w == W_UINT24 or w == W_DATE or w == W_TIME:
        return 3
    if w == W_INT32 or w == W_UINT32 or w == W_FLOAT or w == W_TIMESTAMP:
        return 4
    if w == W_INT64 or w == W_UINT64 or w == W_DOUBLE or w == W_DATETIME:
        return 8
    if w == W_DATETIME2:
        return 5 + fsp_bytes(c.fsp)
    if w == W_TIME2:
        return 3 + fsp_bytes(c.fsp)
    if w == W_TIMESTAMP2:
        return 4 + fsp_bytes(c.fsp)
    if w == W_ENUM or w == W_SET or w == W_BIT:
        return c.size
    if w == W_DECIMAL:
        integral = c.precision - c.decimals
        ui = integral / 9
        uf = c.decimals / 9
        return DIG2BYTES[integral - ui * 9] + (ui + uf) * 4 + DIG2BYTES[c.decimals - uf * 9]
    return 0


cdef int popcount(const uint8_t *bitmap, Py_ssize_t n) noexcept:
    """bitmap.BitCount: every set bit of the bitmap's bytes (the null bitmap is sized by it)."""
    cdef int count = 0
    cdef Py_ssize_t k
    cdef uint8_t b
    for k in range(n):
        b = bitmap[k]
        while b:
            count += b & 1
            b >>= 1
    return count

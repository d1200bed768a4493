"""Strings in a column's own character set, decoded exactly as the server converts them to utf8mb4.

The binlog carries CHAR/VARCHAR/TEXT values in the column's character set; the snapshot's SELECT gets them
converted by the server. Python's codecs disagree with MySQL/MariaDB's conversion tables in places (latin1
is cp1252 with 0x81/0x8D/0x8F/0x90/0x9D kept as C1 controls; cp866 0xFC-0xFD, sjis 0x815F, ...) and lack
several charsets (armscii8, dec8, geostd8, keybcs2, swe7), so a decoder for a legacy charset is built from a
``CharsetTable`` that the server itself produced (``source.charset_tables``): every byte sequence the charset
defines, with the character the server turns it into. A byte the charset leaves undefined reads as ``?``,
as the server converts it. The Unicode charsets decode with Python's codecs, which are exact for them.
"""
from __future__ import annotations

import codecs
from dataclasses import dataclass, field

# MySQL/MariaDB charset -> the Python codec that decodes it exactly (Unicode encodings only).
UNICODE_CODECS = {
    "utf8": "utf-8", "utf8mb3": "utf-8", "utf8mb4": "utf-8", "ucs2": "utf-16-be", "utf16": "utf-16-be",
    "utf16le": "utf-16-le", "utf32": "utf-32-be",
}
REPLACEMENT = "?"  # what the server makes of a byte sequence its charset does not define


def is_unicode(charset: str | None) -> bool:
    return charset is None or charset.lower() in UNICODE_CODECS


@dataclass(frozen=True)
class CharsetTable:
    """What the server makes of each byte sequence of one charset: ``single`` (256 characters, one per byte;
    ``\\ufffe`` where a byte does not stand alone) and ``multi`` (2- and 3-byte sequences -> character)."""

    charset: str
    single: str
    multi: dict[bytes, str] = field(default_factory=dict)


class CharsetDecoder:
    """bytes in one charset -> the str the server's conversion to utf8mb4 gives."""

    def __init__(self, charset: str, table: CharsetTable | None = None) -> None:
        self.charset = charset.lower()
        self._codec = UNICODE_CODECS.get(self.charset)
        if self._codec is None and table is None:
            raise ValueError(f"charset {charset!r} needs a table read off the server")
        self._table = table
        if table is not None:
            self._single = table.single.replace(NOT_ALONE, REPLACEMENT)
            self._ascii_identity = all(table.single[i] == chr(i) for i in range(0x80))
            self._max = max((len(k) for k in table.multi), default=1)

    # How it decodes, for the compiled rows decoder (engine/binlog/rows_decoder), which must do the same.
    @property
    def codec(self) -> str | None:
        """Python's codec name for a Unicode charset; None for a charset decoded with a server table."""
        return self._codec

    @property
    def table(self) -> CharsetTable | None:
        return self._table

    @property
    def single_map(self) -> str | None:
        """256 characters, one per byte (REPLACEMENT where a
        byte does not stand alone); None without a table."""
        return self._single if self._table is not None else None

    @property
    def max_sequence_bytes(self) -> int | None:
        return self._max if self._table is not None else None

    @property
    def ascii_identity(self) -> bool:
        return bool(self._table is not None and self._ascii_identity)

    def __call__(self, value: bytes) -> str:
        if self._codec is not None:
            return codecs.decode(value, self._codec)
        if self._ascii_identity and value.isascii():
            return value.decode("ascii")
        if self._max == 1:
            return codecs.charmap_decode(value, "strict", self._single)[0]
        return self._decode_multibyte(value)

    def _decode_multibyte(self, value: bytes) -> str:
        multi, single, out, i, n = self._table.multi, self._single, [], 0, len(value)  # type: ignore[union-attr]
        while i < n:
            for width in range(min(self._max, n - i), 1, -1):
                char = multi.get(value[i:i + width])
                if char is not None:
                    out.append(char)
                    i += width
                    break
            else:
                out.append(single[value[i]])
                i += 1
        return "".join(out)


NOT_ALONE = "\ufffe"
# Charsets with 4-byte sequences (Oracle MySQL's gb18030: 1.1 million of them, mapped by ranges), decoded by
# Python's codec of the same standard, except where the server's conversion differs (read off the server:
# ``source.charset_tables``; the compiled rows decoder leaves these to this class)
FOUR_BYTE_CODECS = {"gb18030": "gb18030"}


def is_four_byte_sequence(value: bytes, at: int) -> bool:
    """A GB18030 4-byte sequence starts here: [81-FE][30-39][81-FE][30-39]."""
    return (len(value) - at >= 4 and 0x81 <= value[at] <= 0xFE and 0x30 <= value[at + 1] <= 0x39
            and 0x81 <= value[at + 2] <= 0xFE and 0x30 <= value[at + 3] <= 0x39)


class FourByteDecoder(CharsetDecoder):
    """A table-driven decoder whose 4-byte sequences come from Python's codec, save the table's exceptions
    (``CharsetTable.multi`` keys of 4 bytes: where the server and the codec disagree)."""

    def __init__(self, charset: str, table: CharsetTable) -> None:
        super().__init__(charset, table)
        self._four_codec = FOUR_BYTE_CODECS[self.charset]
        self._max = min(self._max, 2)  # the table's 1- and 2-byte sequences; 4-byte ones below

    def _decode_multibyte(self, value: bytes) -> str:
        """Left to right, as the server reads: a 4-byte sequence, else the table's longest match."""
        multi, single, out, i, n = self._table.multi, self._single, [], 0, len(value)  # type: ignore[union-attr]
        while i < n:
            if is_four_byte_sequence(value, i):
                sequence = value[i:i + 4]
                char = multi.get(sequence)
                if char is None:
                    try:
                        char = sequence.decode(self._four_codec)
                    except UnicodeDecodeError:
                        char = REPLACEMENT
                out.append(char)
                i += 4
            elif (pair := multi.get(value[i:i + 2])) is not None and n - i >= 2:
                out.append(pair)
                i += 2
            else:
                out.append(single[value[i]])
                i += 1
        return "".join(out)


def decoder_for(charset: str, table: CharsetTable | None = None) -> CharsetDecoder:
    """The decoder of ``charset`` (a table read off the server for a legacy one)."""
    if charset.lower() in FOUR_BYTE_CODECS and table is not None:
        return FourByteDecoder(charset, table)
    return CharsetDecoder(charset, table)

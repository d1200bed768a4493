"""A FLOAT or DOUBLE value as the server prints it, computed from the value the lake holds.

Both flavors print a double with the same algorithm, parameterized by a field width (``my_gcvt``): the
shortest digits that read back as the same double (Python's ``repr`` digits) when they fit in the width, else
the value correctly rounded to fewer digits; fixed notation when all those digits fit and the decimal point
lies within 15 places of the first digit (``MAX_DECPT_FOR_F_FORMAT``), else exponent notation without ``+``
or leading zeros (``1e15``, ``1.5e-16``), whichever keeps more digits when neither fits. Oracle MySQL prints
``CAST(double AS CHAR)`` in 22 characters (so a long negative number loses its 17th digit), MariaDB without a
practical limit. A FLOAT is first widened to DOUBLE on both sides, so its exact single-precision value is
printed (the server's own text of a FLOAT keeps only 6 digits on MariaDB: two different values could print
alike, and a digest must not miss that).
"""
from __future__ import annotations

from decimal import Decimal

MAX_DECPT_FOR_F_FORMAT = 15
MYSQL_WIDTH = 22  # Oracle MySQL: CAST(double AS CHAR)
WIDE = 400  # MariaDB: every digit fits


def server_double_text(value: float, width: int = WIDE) -> str:
    """The server's text of the double ``value`` printed in ``width`` characters."""
    negative = value < 0 or (value == 0 and str(value).startswith("-"))
    if value < 0:
        width -= 1
    sign = "-" if negative else ""
    if value == 0:
        return sign + "0"
    if 1e-4 <= abs(value) < 1e15:  # the usual case: Python's repr is fixed notation there, the server's too
        text = repr(value)
        text = text.removesuffix(".0")
        if len(text) <= width:  # all shortest digits fit (a sign takes one place): the server prints these
            return text
    digits, point = _significant(abs(value), width)
    exp_len = 1 + (point >= 101 or point <= -99) + (point >= 11 or point <= -9)
    count = len(digits)
    fixed_len = count - point + 2 if point <= 0 else (count + 1 if point < count else point)
    have_space = fixed_len <= width
    force_e = point <= 0 and width <= 2 - point and width >= 3 + exp_len
    fits_f = point <= width and (point >= -1 or (point == -2 and (count > 1 or not force_e))) and not force_e
    prefer_f = (not have_space or (point >= -MAX_DECPT_FOR_F_FORMAT + 1
                                   and (point <= MAX_DECPT_FOR_F_FORMAT or count > point)))
    if (have_space or fits_f) and prefer_f:
        room = width - ((point < count) + (1 - point if point <= 0 else 0))
        if room < count:
            digits, point = _after_point(abs(value), max(room, point) - point)
            if not digits:
                return "0"
        return sign + _fixed(digits, point)
    exponent = point - 1
    room = width - (1 if exponent < 0 else 0) - 1 - exp_len - (1 if count > 1 else 0)
    if room < count:
        digits, point = _significant(abs(value), max(room, 0))
        exponent = point - 1
    rest = f".{digits[1:]}" if len(digits) > 1 else ""
    return f"{sign}{digits[0]}{rest}e{exponent}"


def _significant(value: float, most: int) -> tuple[str, int]:
    """dtoa mode 4: the shortest round-trip digits, or ``value`` rounded to ``most`` significant digits if
    those are more; with the decimal point's position (value = 0.DIGITS * 10**point)."""
    digits, point = _shortest(value)
    if len(digits) <= most or most <= 0:
        return digits, point
    text = format(value, f".{most - 1}e")
    mantissa, _, exponent = text.partition("e")
    return mantissa.replace(".", "").rstrip("0"), int(exponent) + 1


def _after_point(value: float, places: int) -> tuple[str, int]:
    """dtoa mode 5: the shortest digits, or ``value`` rounded to ``places`` digits after the decimal point."""
    digits, point = _shortest(value)
    if len(digits) - point <= places:
        return digits, point
    exact = Decimal(format(value, f".{max(places, 0)}f"))
    if exact == 0:
        return "", 0
    _, numerals, exponent = exact.as_tuple()
    assert isinstance(exponent, int)
    all_digits = "".join(map(str, numerals))
    text = all_digits.lstrip("0")
    point = len(all_digits) + exponent - (len(all_digits) - len(text))
    return text.rstrip("0"), point


def _shortest(value: float) -> tuple[str, int]:
    mantissa, _, exponent = repr(value).partition("e")
    whole, _, fraction = mantissa.partition(".")
    if fraction == "0":
        fraction = ""
    digits = whole + fraction
    stripped = digits.lstrip("0")
    point = len(whole) + (int(exponent) if exponent else 0) - (len(digits) - len(stripped))
    return stripped.rstrip("0"), point


def _fixed(digits: str, point: int) -> str:
    if point <= 0:
        return f"0.{'0' * -point}{digits}"
    if point >= len(digits):
        return digits + "0" * (point - len(digits))
    return f"{digits[:point]}.{digits[point:]}"

"""A JSON document as Oracle MySQL prints it (``CAST(doc AS CHAR)``), computed from the lake's canonical text.

The lake holds JSON in one canonical form (``values.canonical_json``: sorted keys, no spaces). The server
prints its binary JSON in its own: object members in its storage order (shorter keys first, then by their
UTF-8 bytes), ``", "`` and ``": "`` between items, strings with ``"``, ``\\`` and control characters escaped
(``\\b \\f \\n \\r \\t``, others as ``\\u00XX``) and every other character as it is, integers as they are and
doubles in the server's double text with ``.0`` where it would read as an integer. Both forms hold the same
document, so printing the lake's in the server's way gives the server's bytes.

MariaDB's JSON is text (LONGTEXT): the lake holds it as stored, and the digest reads it as text.
"""
from __future__ import annotations

import json
from typing import Any

from airflow_provider_mysqlcdc.engine.verify.float_text import server_double_text

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def server_json_text(canonical: str) -> str:
    """The server's text of the document the lake holds as ``canonical``."""
    return _render(json.loads(canonical))


def _render(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = server_double_text(value)
        return text if any(c in text for c in ".e") else text + ".0"
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_render(v) for v in value) + "]"
    members = sorted(value.items(), key=lambda kv: (len(kv[0].encode()), kv[0].encode()))
    return "{" + ", ".join(f"{_string(k)}: {_render(v)}" for k, v in members) + "}"


def _string(text: str) -> str:
    out = []
    for c in text:
        escaped = _ESCAPES.get(c)
        if escaped is not None:
            out.append(escaped)
        elif c < " ":
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'

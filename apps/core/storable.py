"""Values every database of ours stores, whatever a client sent: text without NUL or lone surrogates,
cut to a column; JSON with finite numbers and bounded strings and nesting; canonical UUID text.

Shared by the writers that take what clients control (the audit log's entries, the events of
webhooks): a refused row would be lost, so values are normalised instead of inserted as they came.
"""

import math
import re
import uuid
from typing import Any

# Surrogates are only ever alone in a Python str (from JSON escapes such as "\ud800"), and UTF-8
# cannot encode them; no database of ours stores them, nor NUL.
_SURROGATE = re.compile("[\ud800-\udfff]")
_CANONICAL_UUID = re.compile("[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

# Strings inside the JSON fields (an attempt's error, an event's data) have no column size; bounded so
# that one request cannot make a huge row, and nesting so that encoding it cannot recurse too deep.
JSON_STRING_LIMIT = 2000
_JSON_DEPTH = 16
_JSON_INTEGER = 2**63


def text(value: Any, limit: int | None = None) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        value = str(value)
    # The checks that find nothing in an ordinary value are the cheap ones (a regular expression
    # over two 64 KiB bodies costs the writer more than the insert).
    if "\x00" in value:
        value = value.replace("\x00", "")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            value = _SURROGATE.sub("\ufffd", value)
    return value[:limit] if limit is not None else value


def json_value(value: Any, depth: int = 0) -> Any:
    """A JSON value every database stores: safe strings, finite numbers, bounded nesting."""
    kind = type(value)
    if kind is str:
        return text(value, JSON_STRING_LIMIT)
    if value is None or kind is bool:
        return value
    if kind is int:
        return value if -_JSON_INTEGER < value < _JSON_INTEGER else None
    if kind is float:
        return value if math.isfinite(value) else None
    if depth >= _JSON_DEPTH:
        return None
    if kind is dict:
        return {text(key, JSON_STRING_LIMIT): json_value(item, depth + 1) for key, item in value.items()}
    if kind is list or kind is tuple:
        return [json_value(item, depth + 1) for item in value]
    return text(value, JSON_STRING_LIMIT)  # Decimal, UUID, subclasses and the like: as their text


def uuid_text(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if type(value) is str and _CANONICAL_UUID.fullmatch(value):
        return value  # what the gateway itself writes: no need to parse it
    if isinstance(value, uuid.UUID):
        return str(value)
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        return None

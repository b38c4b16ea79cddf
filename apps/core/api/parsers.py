"""The management API's JSON parser: DRF's, with the nesting bounded.

Python's JSON parser raises ``RecursionError`` (not ``ValueError``) on a body nested a few thousand levels
deep, and DRF lets it through as a 500; the sign-in endpoint takes bodies from anyone. A body that
parses but is nested hundreds of levels deep would reach serializers and the error rendering, which walk
it recursively. No management request needs more than a handful of levels, so past ``MAX_DEPTH`` the
body is a parse error like any other malformed JSON.
"""

from rest_framework import parsers
from rest_framework.exceptions import ParseError

MAX_DEPTH = 64


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(_too_deep()) from None  # the chained traceback would be thousands of frames
        if _nested_deeper_than(data, MAX_DEPTH):
            raise ParseError(_too_deep())
        return data


def _too_deep() -> str:
    return f"JSON parse error - the body is nested more than {MAX_DEPTH} levels deep."


def _nested_deeper_than(value, limit: int) -> bool:
    """Without recursion, so the check itself cannot overflow the stack."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False

"""The template syntax: a small, logic-less ``{{variable}}`` renderer (docs/prompts.md).

A text is compiled once, when its version is created and again when the proxy's copy of the
configuration is built, into literal pieces and variable names; rendering is then a join. There is
no expression language: a tag holds one name (``[A-Za-z_][A-Za-z0-9_]*``, spaces allowed around
it), never an attribute, an index, a filter or a call, and a value is inserted as it is, never read
as a template again (a value holding ``{{x}}`` comes out as ``{{x}}``).

Like Mustache and Jinja, ``{{`` always opens a tag, which must be well formed and closed by ``}}``
(otherwise the text is refused with the position of the ``{{``); a ``}}`` outside a tag, as in a
nested JSON example ``{"a": {"b": 1}}``, and single braces are plain text. A literal ``{{`` is
written by putting it in a variable's value or default.
"""

import json
import math
import re
from dataclasses import dataclass

NAME_PATTERN = r"[A-Za-z_][A-Za-z0-9_]*"
NAME = re.compile(NAME_PATTERN)
_OPEN = "{{"
_TAG = re.compile(r"\{\{[ \t]*(" + NAME_PATTERN + r")[ \t]*\}\}")
# A tag's inside, to explain a malformed one: up to its "}}", or to a newline, or to the end.
_INSIDE = re.compile(r"\{\{(.*?)(\}\}|\n|$)", re.DOTALL)


class TemplateSyntaxError(ValueError):
    """A text that is not a valid template; ``position`` is the 0-based index of the ``{{`` at fault."""

    def __init__(self, message: str, position: int) -> None:
        super().__init__(f"{message} at position {position}.")
        self.position = position


@dataclass(frozen=True, slots=True)
class CompiledText:
    """A text as literals and variable names: ``literals[0] + value(names[0]) + literals[1] ...``
    (``len(literals) == len(names) + 1``)."""

    literals: tuple[str, ...]
    names: tuple[str, ...]

    @property
    def variables(self) -> frozenset[str]:
        return frozenset(self.names)

    def render(self, values: dict[str, str]) -> str:
        """``values`` maps every name of the text to its text (``value_text``); a KeyError otherwise."""
        names = self.names
        if not names:
            return self.literals[0]
        literals = self.literals
        parts = [literals[0]]
        for index, name in enumerate(names, 1):
            parts.append(values[name])
            parts.append(literals[index])
        return "".join(parts)


def compile_text(text: str) -> CompiledText:
    """The compiled form of ``text``; ``TemplateSyntaxError`` if a ``{{`` opens no well-formed tag."""
    literals: list[str] = []
    names: list[str] = []
    start = 0
    while True:
        opening = text.find(_OPEN, start)
        if opening < 0:
            literals.append(text[start:])
            return CompiledText(tuple(literals), tuple(names))
        tag = _TAG.match(text, opening)
        if tag is None:
            raise TemplateSyntaxError(_malformed(text, opening), opening)
        literals.append(text[start:opening])
        names.append(tag.group(1))
        start = tag.end()


def _malformed(text: str, opening: int) -> str:
    inside = _INSIDE.match(text, opening)
    content, closing = inside.group(1), inside.group(2)
    if closing != "}}":
        return "'{{' is never closed by '}}'"
    stripped = content.strip(" \t")
    if not stripped:
        return "Empty tag '{{}}'"
    if "{{" in content:
        return "'{{' is never closed by '}}'"
    return (
        f"'{{{{{content}}}}}' is not a variable: a tag holds one name of letters, digits and "
        "underscores, not starting with a digit (no spaces inside, no dots, filters or expressions)"
    )


def value_text(value) -> str:
    """A variable's value as it is inserted: a string as it is, a number or boolean as JSON writes
    it (``true``, ``3``, ``0.5``). ``TypeError`` for anything else (null, a list, an object) and
    ``ValueError`` for a number that is not finite."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("not a finite number")
        return json.dumps(value)
    raise TypeError(type(value).__name__)

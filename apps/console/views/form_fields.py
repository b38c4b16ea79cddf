"""Reading the flat values of the provider-key, catalog, team and organization forms into what the
API's serializers take (``apps/console/forms.py`` has the budget and rate-limit fields): the API's
types are strict (JSON booleans and numbers), a form posts text."""

from django.http import QueryDict

from apps.console.forms import text


def flag(post: QueryDict, name: str) -> bool | None:
    """A checkbox: the forms post a hidden ``false`` before the box's ``true``, so the last value is the
    answer and a form without the field says nothing (None)."""
    values = post.getlist(name)
    if not values:
        return None
    return values[-1] == "true"


def choice_flag(post: QueryDict, name: str) -> bool | str | None:
    """A three-way select: ``""`` (inherit: None), ``"true"`` or ``"false"``; anything else is passed on
    for the serializer to refuse."""
    value = post.get(name, "")
    return {"": None, "true": True, "false": False}.get(value, value)


def labels(post: QueryDict, name: str) -> list[str]:
    """Labels separated by spaces or commas (data regions, fallbacks), in the order given."""
    return [part for part in post.get(name, "").replace(",", " ").split() if part]


def whole(post: QueryDict, name: str):
    """A whole number; None when left empty; the text itself otherwise, for the serializer to refuse."""
    value = text(post, name)
    if value is None:
        return None
    return int(value) if value.isdigit() else value


def decimal_number(post: QueryDict, name: str):
    """A JSON-like number (int or float) for the fields that refuse strings; the text when it is none."""
    value = text(post, name)
    if value is None:
        return None
    try:
        return int(value) if value.isdigit() else float(value)
    except ValueError:
        return value

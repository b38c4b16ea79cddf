"""Console forms are checked by the management API's own serializers, so a value the API refuses is
refused here with the same message, and both call the same services.

A form posts text in flat fields, the API's types are strict (JSON booleans and numbers):
``limits_input`` folds the budget and rate-limit fields into the objects the serializers take, ``flag``,
``whole``, ``labels`` and the others read one field as the type the API wants (or leave the text for
the serializer to refuse), and ``flat_errors`` turns a serializer's nested errors into one message per
field.
"""

from collections.abc import Mapping
from urllib.parse import urlsplit

from django.http import QueryDict
from rest_framework import serializers

from apps.core.errors import GatewayError

FORM = "__all__"  # errors that belong to no single field


def flat_errors(errors, prefix: str = "") -> dict[str, list[str]]:
    """``{"budget": {"amount_usd": ["..."]}}`` -> ``{"budget.amount_usd": ["..."]}``."""
    flat: dict[str, list[str]] = {}
    if isinstance(errors, Mapping):
        for name, value in errors.items():
            if isinstance(name, int):  # DRF keys a list's errors by index: say it as the API does
                flat.update(flat_errors(value, f"{prefix}[{name}]"))
                continue
            name = FORM if name == "non_field_errors" else name
            flat.update(flat_errors(value, f"{prefix}.{name}" if prefix else str(name)))
    elif isinstance(errors, list) and errors and not all(isinstance(item, str) for item in errors):
        for index, value in enumerate(errors):
            flat.update(flat_errors(value, f"{prefix}[{index}]"))
    else:
        flat[prefix or FORM] = [str(item) for item in (errors if isinstance(errors, list) else [errors])]
    return flat


def check(serializer_class: type[serializers.Serializer], data: dict, *, partial: bool = False, **context):
    """(validated data, {}) or (None, errors by field)."""
    serializer = serializer_class(data=data, partial=partial, context=context)
    if serializer.is_valid():
        return serializer.validated_data, {}
    return None, flat_errors(serializer.errors)


def service_errors(error: GatewayError) -> dict[str, list[str]]:
    """A refusal raised by a service (a conflict, a plan rule), shown on the form."""
    if error.fields:
        return flat_errors(error.fields)
    return {error.param or FORM: [error.message]}


def text(post: QueryDict, name: str) -> str | None:
    """A text field, or None when it was left empty (so the serializer's default applies)."""
    value = post.get(name, "").strip()
    return value or None


def limits_input(post: QueryDict) -> dict:
    """The budget and rate-limit fields of a form, as the API's ``budget`` and ``rate_limits``: an
    empty amount means no budget, an empty rate means no limit."""
    data: dict = {"budget": None, "rate_limits": None}
    amount = text(post, "budget_amount_usd")
    if amount is not None:
        budget = {"amount_usd": amount, "period": text(post, "budget_period") or "monthly"}
        thresholds = text(post, "budget_thresholds")
        if thresholds is not None:
            budget["thresholds"] = [_number(part) for part in thresholds.split(",") if part.strip()]
        for name in ("starts_at", "ends_at"):
            value = text(post, f"budget_{name}")
            if value is not None:
                budget[name] = value
        data["budget"] = budget
    rates = {name: _number(text(post, name)) for name in ("rpm", "tpm") if text(post, name) is not None}
    if rates:
        data["rate_limits"] = rates
    return data


def digits(value: str | None, max_digits: int = 18) -> int | None:
    """The whole number ``value`` spells in ASCII digits (at most ``max_digits`` of them), else None.
    ``str.isdigit`` alone is true of "²" and of a 5,000-digit string, both of which ``int()`` refuses."""
    if value and len(value) <= max_digits and value.isascii() and value.isdigit():
        return int(value)
    return None


def _number(value: str):
    """An integer when the text is one; the text itself otherwise, for the serializer to refuse."""
    value = value.strip()
    number = digits(value)
    return value if number is None else number


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
    number = digits(value)
    return value if number is None else number


def decimal_number(post: QueryDict, name: str):
    """A JSON-like number (int or float) for the fields that refuse strings; the text when it is none."""
    value = text(post, name)
    if value is None:
        return None
    number = digits(value)
    if number is not None:
        return number
    try:
        return float(value)
    except ValueError:
        return value


def relative_link(url: str | None) -> str | None:
    """DRF's absolute next/previous page link as a path and query of this site."""
    if url is None:
        return None
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}" if parts.query else parts.path

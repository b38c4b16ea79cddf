"""Console forms are checked by the management API's own serializers, so a value the API refuses is
refused here with the same message, and both call the same services.

A form posts flat fields; ``limits_input`` folds the budget and rate-limit fields into the objects the
serializers take, and ``flat_errors`` turns a serializer's nested errors into one message per field.
"""

from collections.abc import Mapping

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


def check(serializer_class: type[serializers.Serializer], data: dict, **context):
    """(validated data, {}) or (None, errors by field)."""
    serializer = serializer_class(data=data, context=context)
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


def _number(value: str):
    """An integer when the text is one; the text itself otherwise, for the serializer to refuse."""
    value = value.strip()
    return int(value) if value.isdigit() else value

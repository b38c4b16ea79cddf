"""The ``budget`` and ``rate_limits`` fields of teams, API keys and the organization, and the usage
answer.

The fields check types only (a decimal string, whole numbers, known names); the rules of a budget
as a whole (a fixed window's ends in order, thresholds distinct ...) are ``limits_set``'s, whose
``InvalidRequest`` is answered as the 400 with the field named (``budget.thresholds``).
"""

import re
from datetime import UTC

from django.core.exceptions import ObjectDoesNotExist
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.core.api.fields import StrictIntegerField
from apps.core.api.serializers import ClosedSerializer
from apps.core.errors import InvalidRequest
from apps.limits.models import BudgetPeriod, Limits
from apps.limits.selectors import budget_representation, limits_of, rate_limits_representation
from apps.limits.services import MAX_RATE, MAX_THRESHOLDS
from apps.organizations.models import Organization

# A positive amount of at most 6 decimal places that fits the column (below 100,000,000): zero is
# spelled out of the pattern, so the schema says what the API accepts.
AMOUNT_PATTERN = re.compile(
    r"^(?:[1-9][0-9]{0,7}(?:\.[0-9]{1,6})?"
    r"|0\.(?:[1-9][0-9]{0,5}|0[1-9][0-9]{0,4}|00[1-9][0-9]{0,3}|000[1-9][0-9]{0,2}|0000[1-9][0-9]?|00000[1-9]))$"
)
AMOUNT_MESSAGE = 'A positive decimal string of at most 6 decimal places, below 100000000, such as "25.00".'

BUDGET_SCHEMA = {
    "type": "object",
    "description": "null: no budget. Replaced whole by a write.",
    "properties": {
        "amount_usd": {
            "type": "string",
            "format": "decimal",
            "pattern": AMOUNT_PATTERN.pattern,
            "example": "25.00",
        },
        "period": {"type": "string", "enum": list(BudgetPeriod.values)},
        "thresholds": {
            "type": "array",
            "items": {"type": "integer", "minimum": 1, "maximum": 100},
            "maxItems": MAX_THRESHOLDS,
            "uniqueItems": True,
            "description": "Percents of the amount announced once per window; default [50, 80, 100].",
        },
        "starts_at": {
            "type": "string",
            "format": "date-time",
            "nullable": True,
            "description": "fixed only, with ends_at (after it): the window [starts_at, ends_at).",
        },
        "ends_at": {"type": "string", "format": "date-time", "nullable": True},
    },
    "required": ["amount_usd", "period"],
    "additionalProperties": False,
    # validated_budget's rule between the fields: a fixed budget has both ends, another neither (or
    # null). That the end comes after the start is the one rule left to the 400.
    "oneOf": [
        {
            "properties": {
                "period": {"enum": [BudgetPeriod.FIXED.value]},
                "starts_at": {"type": "string"},
                "ends_at": {"type": "string"},
            },
            "required": ["starts_at", "ends_at"],
        },
        {
            "properties": {
                "period": {
                    "enum": [period for period in BudgetPeriod.values if period != BudgetPeriod.FIXED]
                },
                "starts_at": {"enum": [None], "nullable": True},
                "ends_at": {"enum": [None], "nullable": True},
            },
        },
    ],
}

RATE_SCHEMA = {"type": "integer", "minimum": 0, "maximum": MAX_RATE, "nullable": True}
RATE_LIMITS_SCHEMA = {
    "type": "object",
    "description": "null: no rate limits. Replaced whole by a write (a missing member is null); "
    "0 refuses every request.",
    "properties": {
        "rpm": {**RATE_SCHEMA, "description": "Requests per minute; null for none."},
        "tpm": {**RATE_SCHEMA, "description": "Tokens per minute; null for none."},
    },
    "additionalProperties": False,
}


def attached_limits(instance) -> Limits | None:
    """The limits row of a team, an API key or an organization (the organization's own), if any.
    Views list teams and keys with ``select_related("limits")``, so this reads nothing more."""
    if isinstance(instance, Organization):
        if not hasattr(instance, "_own_limits"):
            instance._own_limits = limits_of(organization=instance)
        return instance._own_limits
    try:
        return instance.limits
    except ObjectDoesNotExist:
        return None


class AmountField(serializers.DecimalField):
    def __init__(self, **kwargs):
        super().__init__(max_digits=14, decimal_places=6, **kwargs)

    def to_internal_value(self, data):
        if not isinstance(data, str) or not AMOUNT_PATTERN.fullmatch(data):
            raise serializers.ValidationError(AMOUNT_MESSAGE)
        return super().to_internal_value(data)


class BudgetInputSerializer(ClosedSerializer):
    amount_usd = AmountField()
    period = serializers.ChoiceField(choices=BudgetPeriod.values)
    thresholds = serializers.ListField(
        child=StrictIntegerField(min_value=1, max_value=100), max_length=MAX_THRESHOLDS, required=False
    )
    starts_at = serializers.DateTimeField(required=False, allow_null=True)
    ends_at = serializers.DateTimeField(required=False, allow_null=True)


class RateLimitsInputSerializer(ClosedSerializer):
    rpm = StrictIntegerField(min_value=0, max_value=MAX_RATE, required=False, allow_null=True)
    tpm = StrictIntegerField(min_value=0, max_value=MAX_RATE, required=False, allow_null=True)


class _LimitsPartField(serializers.Field):
    """Reads the part from the object's limits row; takes a JSON object (or null) checked by
    ``input_serializer``."""

    input_serializer: type[serializers.Serializer]

    def __init__(self, **kwargs):
        kwargs.setdefault("required", False)
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)

    def get_attribute(self, instance):
        return attached_limits(instance)

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            raise serializers.ValidationError("An object, or null.")
        checked = self.input_serializer(data=data)
        if not checked.is_valid():
            raise serializers.ValidationError(checked.errors)
        return dict(checked.validated_data)


@extend_schema_field(BUDGET_SCHEMA)
class BudgetField(_LimitsPartField):
    input_serializer = BudgetInputSerializer

    def to_representation(self, limits):
        budget = budget_representation(limits)
        if budget is not None:
            for name in ("starts_at", "ends_at"):
                if budget.get(name) is not None:
                    budget[name] = _instant(budget[name])
        return budget


@extend_schema_field(RATE_LIMITS_SCHEMA)
class RateLimitsField(_LimitsPartField):
    input_serializer = RateLimitsInputSerializer

    def to_representation(self, limits):
        return rate_limits_representation(limits)


def _instant(value) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def money(value) -> str:
    """A Decimal as the shortest decimal string: "12.5", "0", "100"."""
    return f"{value.normalize():f}"


@extend_schema_field({"type": "string", "format": "decimal", "example": "12.5"})
class MoneyField(serializers.Field):
    def to_representation(self, value):
        return money(value)


class UsageSerializer(serializers.Serializer):
    """``apps.limits.usage.Usage``."""

    period = serializers.ChoiceField(
        choices=BudgetPeriod.values,
        read_only=True,
        help_text="The budget's period; monthly (the current UTC month) when there is no budget in force.",
    )
    period_start = serializers.DateTimeField(read_only=True)
    spent_usd = MoneyField(read_only=True)
    reserved_usd = MoneyField(read_only=True, help_text="The most requests in flight may still cost.")
    budget_usd = MoneyField(read_only=True, allow_null=True, help_text="null: no budget in force.")
    remaining_usd = MoneyField(
        read_only=True,
        allow_null=True,
        help_text="budget - spent - reserved, never below 0; null without a budget.",
    )


def nested_under(prefix: str, error: InvalidRequest) -> InvalidRequest:
    """The service's refusal with its fields named where the request put them
    (``settings.budget.thresholds`` in the organization's settings)."""
    fields = {f"{prefix}.{name}": messages for name, messages in (error.fields or {}).items()}
    first = next(iter(fields), None)
    message = f"Invalid value for '{first}': {fields[first][0]}" if first else error.message
    return InvalidRequest(message, code=error.code, param=first, fields=fields)

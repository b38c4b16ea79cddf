"""A budget and rate limits as they are written (the ``budget`` and ``rate_limits`` of the bodies of
teams, API keys and the organization's settings, the admin's form, the console's forms): their types
and shapes, defined once. ``limits_set`` parses its input with ``LimitsInputSerializer`` before what
a schema cannot say (a fixed window's ends, in order; thresholds each once); the teams' and keys'
inputs reuse ``BudgetInputField`` and ``RateLimitsInputField``, and the API's schema is written from
them (``BUDGET_SCHEMA``, ``RATE_LIMITS_SCHEMA``)."""

import re
from decimal import Decimal

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.core.api.fields import StrictIntegerField
from apps.core.api.serializers import ClosedSerializer

from .models import BudgetPeriod

MAX_RATE = 1_000_000_000
MAX_THRESHOLDS = 10

# A positive amount of at most 6 decimal places that fits the column (14 digits, 6 of them decimals:
# below 100,000,000): zero is spelled out of the pattern, so the schema says what the API accepts.
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
    # limits_set's rule between the fields: a fixed budget has both ends, another neither (or null).
    # That the end comes after the start is the one rule left to the 400.
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


class AmountField(serializers.DecimalField):
    """A decimal string (JSON has no decimals; a number would be rounded on its way in). A Decimal,
    as a service hands on an amount this field parsed before (a team's, a key's input), reads as its
    decimal string, so parsing twice gives the same."""

    def __init__(self, **kwargs):
        super().__init__(max_digits=14, decimal_places=6, **kwargs)

    def to_internal_value(self, data):
        if isinstance(data, Decimal) and data.is_finite():
            data = f"{data:f}"
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


class _LimitsPartInputField(serializers.Field):
    """A JSON object (or null: none) checked by ``input_serializer``; absent, left as it is."""

    input_serializer: type[serializers.Serializer]

    def __init__(self, **kwargs):
        kwargs.setdefault("required", False)
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            raise serializers.ValidationError("An object, or null.")
        checked = self.input_serializer(data=data)
        if not checked.is_valid():
            raise serializers.ValidationError(checked.errors)
        return dict(checked.validated_data)


@extend_schema_field(BUDGET_SCHEMA)
class BudgetInputField(_LimitsPartInputField):
    input_serializer = BudgetInputSerializer


@extend_schema_field(RATE_LIMITS_SCHEMA)
class RateLimitsInputField(_LimitsPartInputField):
    input_serializer = RateLimitsInputSerializer


class LimitsInputSerializer(serializers.Serializer):
    """The budget and the rate limits of one organization, team or key, as ``limits_set`` takes them
    (parsed partial: a part not given is left as it is)."""

    budget = BudgetInputField()
    rate_limits = RateLimitsInputField()

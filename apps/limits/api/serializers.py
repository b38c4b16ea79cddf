"""The ``budget`` and ``rate_limits`` fields of teams, API keys and the organization, and the usage
answer.

The fields are the input's (apps/limits/inputs.py: types and shapes, a decimal string, whole
numbers, known names), with their reading from the object's limits row; the rules of a budget as a
whole (a fixed window's ends in order, thresholds distinct ...) are ``limits_set``'s, whose
``InvalidRequest`` is answered as the 400 with the field named (``budget.thresholds``).
"""

from datetime import UTC

from django.core.exceptions import ObjectDoesNotExist
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.core.errors import InvalidRequest
from apps.limits.inputs import BudgetInputField, RateLimitsInputField
from apps.limits.models import BudgetPeriod, Limits
from apps.limits.selectors import budget_representation, limits_of, rate_limits_representation
from apps.organizations.models import Organization


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


class BudgetField(BudgetInputField):
    """The input's field (or null), read from the object's limits row."""

    def get_attribute(self, instance):
        return attached_limits(instance)

    def to_representation(self, limits):
        budget = budget_representation(limits)
        if budget is not None:
            for name in ("starts_at", "ends_at"):
                if budget.get(name) is not None:
                    budget[name] = _instant(budget[name])
        return budget


class RateLimitsField(RateLimitsInputField):
    """The input's field (or null), read from the object's limits row."""

    def get_attribute(self, instance):
        return attached_limits(instance)

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

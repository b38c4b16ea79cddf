import re
from datetime import datetime
from uuid import UUID

from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.audit import selectors, time_ranges
from apps.audit.models import AuditEntry
from apps.core.api.fields import InstantField, StrictCharField
from apps.core.api.schema import PYTHON_SPACE

# Query parameters ---------------------------------------------------------------------------------

_STATUS_CLASS = re.compile(r"^([1-5])xx$")
# ASCII digits only: str.isdigit() also takes "²" or Arabic-Indic digits, which int() refuses.
_STATUS_CODE = re.compile(r"^[1-5][0-9]{2}$", re.ASCII)


# A validator drf-spectacular can read: the schema's pattern says what the 400 enforces.
_NO_CONTROL_CHARACTERS = RegexValidator(
    rf"\A[^{time_ranges.CONTROL_CHARACTER_RANGE}]*\Z", "Control characters (such as NUL) are not allowed."
)


class QueryTextField(StrictCharField):
    """A text parameter: bounded, and refused (400) with a control character in it (or, in a JSON
    body, when it is not a string)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.validators.append(_NO_CONTROL_CHARACTERS)


@extend_schema_field({"type": "string", "example": "2026-11-01T00:00:00Z"})
class InstantParameterField(QueryTextField):
    """``from`` or ``to``: an RFC 3339 timestamp or a date, read by ``time_ranges.parse_range``."""

    def __init__(self, **kwargs):
        super().__init__(max_length=time_ranges.INSTANT_MAX_LENGTH, **kwargs)

    def trimmed_pattern(self) -> str:
        return time_ranges.instant_pattern(PYTHON_SPACE)


# An HTTP status, a class or "error", in any case, around the blanks DRF trims.
STATUS_FILTER_PATTERN = (
    rf"^[{PYTHON_SPACE}]*(?:[1-5][0-9]{{2}}|[1-5][xX]{{2}}|[eE][rR]{{2}}[oO][rR])[{PYTHON_SPACE}]*$"
)


@extend_schema_field({"type": "string", "pattern": STATUS_FILTER_PATTERN, "example": "4xx"})
class StatusFilterField(serializers.CharField):
    """An exact HTTP status (``404``), a class (``2xx``, ``4xx``, ``5xx``) or ``error`` (>= 400),
    as a half-open range of codes."""

    default_error_messages = {
        "invalid_status": "Use an HTTP status (404), a class (2xx, 4xx, 5xx) or 'error'.",
    }

    def to_internal_value(self, data) -> tuple[int, int]:
        text = super().to_internal_value(data).strip().lower()
        if text == "error":
            return (400, 1000)
        if match := _STATUS_CLASS.match(text):
            low = int(match.group(1)) * 100
            return (low, low + 100)
        if _STATUS_CODE.match(text):
            return (int(text), int(text) + 1)
        self.fail("invalid_status")


class TimeRangeSerializer(serializers.Serializer):
    """``from``/``to`` or ``period``, read by ``time_ranges.parse_range`` (the one parser of a range; the
    exports call it too) into ``start`` and ``end``: ``from``/``to`` are a half-open range
    ``[from, to)``, ``period`` names one ending now.

    Without a range, ``default_period`` applies; without one either, the range is required when
    ``range_required``, and otherwise unbounded (``start`` and ``end`` are None)."""

    default_period: str | None = None
    range_required = False

    period = serializers.ChoiceField(
        choices=time_ranges.PERIODS, required=False, help_text="A period ending now; excludes from/to."
    )

    def get_fields(self):
        fields = super().get_fields()
        # Not declarable as attributes: "from" is a Python keyword.
        fields["from"] = InstantParameterField(
            required=False, help_text="Start, inclusive: RFC 3339 or a date."
        )
        fields["to"] = InstantParameterField(required=False, help_text="End, exclusive: RFC 3339 or a date.")
        return fields

    def validate(self, attrs):
        bounds = {name: attrs.pop(name) for name in ("from", "to", "period") if name in attrs}
        if not bounds and self.default_period is None and not self.range_required:
            return {**attrs, "start": None, "end": None}
        try:
            time_range = time_ranges.parse_range(bounds, default_period=self.default_period)
        except time_ranges.InvalidParameter as error:
            raise serializers.ValidationError(error.fields) from None
        return {**attrs, "start": time_range.start, "end": time_range.end}


class AnalyticsQuerySerializer(TimeRangeSerializer):
    """The time range and the dimensions every analytics endpoint understands; without a range,
    the last 24 hours (the log has no default and is then read whole)."""

    default_period: str | None = "24h"
    empty_values_are_absent = True  # see to_internal_value; the schema says so (allowEmptyValue)

    team = serializers.UUIDField(required=False, source="team_id")
    api_key = serializers.UUIDField(required=False, source="api_key_id")
    model = QueryTextField(required=False, max_length=200, help_text="Requested alias or model used.")
    provider = QueryTextField(required=False, max_length=32)
    prompt = QueryTextField(required=False, max_length=100, help_text="A prompt template's slug.")

    def to_internal_value(self, data):
        # Query parameters: the last value of each name; an empty one is the same as none.
        if hasattr(data, "items"):
            data = {name: value for name, value in data.items() if value != ""}
        return super().to_internal_value(data)


class GroupedQuerySerializer(AnalyticsQuerySerializer):
    group_by = serializers.ChoiceField(choices=selectors.GROUP_BY, required=False)


class LogQuerySerializer(AnalyticsQuerySerializer):
    default_period = None

    status = StatusFilterField(required=False)
    policy_action = serializers.ChoiceField(choices=selectors.POLICY_ACTIONS, required=False)
    cache = serializers.ChoiceField(choices=selectors.CACHE_VALUES, required=False)
    request_id = serializers.UUIDField(required=False)


# Log entries --------------------------------------------------------------------------------------


class AuditEntrySummarySerializer(serializers.ModelSerializer):
    """One row of the log list: no bodies, attempts or policy decisions."""

    log_id = serializers.UUIDField(source="id")

    class Meta:
        model = AuditEntry
        fields = (
            "log_id",
            *(name for name in selectors.SUMMARY_FIELDS if name not in ("id", "organization_id")),
        )
        read_only_fields = fields


class AuditEntrySerializer(serializers.ModelSerializer):
    """One entry whole: the routing outcome attempt by attempt, policy decisions, and the bodies as
    the organization's setting kept them (``body_mode``)."""

    log_id = serializers.UUIDField(source="id")

    class Meta:
        model = AuditEntry
        fields = (
            "log_id",
            *(name for name in selectors.SUMMARY_FIELDS if name not in ("id", "organization_id")),
            "provider_key_id",
            "stream_completed",
            "client_disconnected",
            "attempts",
            "prompt_template_id",
            "prompt_template",
            "prompt_version",
            "prompt_label",
            "experiment_id",
            "experiment_variant",
            "policy_reason",
            "policy_decisions",
            "cached_input_tokens",
            "reasoning_tokens",
            "usage_estimated",
            "price_source",
            "cache_savings_usd",
            "upstream_ms",
            "client_ip",
            "user_agent",
            "body_mode",
            "request_body",
            "response_body",
        )
        read_only_fields = fields


# Aggregates ---------------------------------------------------------------------------------------


@extend_schema_field({"type": "string", "nullable": True})
class GroupKeyField(serializers.Field):
    """A group's key: an hour or day (RFC 3339), a team, key or provider id, a model name; null
    for entries without one."""

    def to_representation(self, value):
        if isinstance(value, datetime):
            return serializers.DateTimeField().to_representation(value)
        if isinstance(value, UUID):
            return str(value)
        return value


class UsageNumbersSerializer(serializers.Serializer):
    requests = serializers.IntegerField()
    spend_usd = serializers.DecimalField(max_digits=24, decimal_places=8)
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    errors = serializers.IntegerField(help_text="Requests answered with a status >= 400.")
    error_rate = serializers.FloatField()
    latency_p50_ms = serializers.FloatField(allow_null=True)
    latency_p95_ms = serializers.FloatField(allow_null=True)
    cache_hit_rate = serializers.FloatField(help_text="Hits (l1, l2, l3) over the requests looked up.")


class UsageGroupSerializer(UsageNumbersSerializer):
    key = GroupKeyField()


class RangeSerializer(serializers.Serializer):
    """The range the numbers cover, as resolved (a period becomes its from/to); null is unbounded."""

    def get_fields(self):
        fields = super().get_fields()
        # InstantField: a four-digit year, which DATETIME_FORMAT's strftime does not write (from=0050-01-01).
        fields["from"] = InstantField(source="start", allow_null=True)
        fields["to"] = InstantField(source="end", allow_null=True)
        return fields


class OverviewSerializer(RangeSerializer):
    group_by = serializers.CharField(allow_null=True)
    totals = UsageNumbersSerializer()
    groups = UsageGroupSerializer(many=True, required=False)


class CacheTierSerializer(serializers.Serializer):
    hits = serializers.IntegerField()
    hit_rate = serializers.FloatField()


class CacheTiersSerializer(serializers.Serializer):
    l1 = CacheTierSerializer()
    l2 = CacheTierSerializer()
    l3 = CacheTierSerializer()


class CacheNumbersSerializer(serializers.Serializer):
    requests = serializers.IntegerField()
    lookups = serializers.IntegerField(help_text="Requests looked up in the cache: all but the bypasses.")
    hits = serializers.IntegerField()
    misses = serializers.IntegerField()
    bypasses = serializers.IntegerField()
    hit_rate = serializers.FloatField()
    savings_usd = serializers.DecimalField(
        max_digits=24,
        decimal_places=8,
        help_text="What the hits would have cost: the cost of each answer a hit replayed.",
    )
    tiers = CacheTiersSerializer()


class CacheGroupSerializer(CacheNumbersSerializer):
    key = GroupKeyField()


class CacheSerializer(RangeSerializer):
    group_by = serializers.CharField(allow_null=True)
    totals = CacheNumbersSerializer()
    groups = CacheGroupSerializer(many=True, required=False)


class PolicyActionsSerializer(serializers.Serializer):
    redacted = serializers.IntegerField()
    blocked = serializers.IntegerField()
    flagged = serializers.IntegerField()


class PolicyHitSerializer(serializers.Serializer):
    policy = serializers.CharField()
    action = serializers.CharField()
    hits = serializers.IntegerField()


class PolicySerializer(RangeSerializer):
    requests = serializers.IntegerField()
    actions = PolicyActionsSerializer(help_text="Requests per final action (what the client was told).")
    policies = PolicyHitSerializer(many=True, help_text="Decisions per policy and action.")

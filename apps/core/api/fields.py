import re
from datetime import UTC

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.core.model_patterns import MAX_PATTERN_LENGTH, MAX_PATTERNS, model_pattern_schema

REGION_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}$")
# What DRF's trim_whitespace strips is Python's whitespace (str.strip), which differs from a JSON
# Schema regex's \s (Python's has \x1c-\x1f and \x85, not \ufeff): named one by one, so "blank"
# means the same on both sides.
PYTHON_SPACE = (
    r"\t\n\u000b\u000c\r\u001c-\u001f \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
)


class DataRegionsField(serializers.ListField):
    """A list of data-region labels (``us``, ``eu``, ``us-east`` ...); empty means unrestricted."""

    def __init__(self, **kwargs):
        kwargs.setdefault("child", StrictRegexField(REGION_PATTERN, max_length=32))
        kwargs.setdefault("max_length", 50)
        kwargs.setdefault("allow_empty", True)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        return sorted(set(super().to_internal_value(data)))


class StrictCharField(serializers.CharField):
    """A string field that refuses numbers and booleans instead of quietly turning them into text."""

    default_error_messages = {"not_a_string": "Must be a string."}

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("not_a_string")
        return super().to_internal_value(data)


class StrictRegexField(serializers.RegexField):
    """A pattern-checked string: ``0`` is not the region "0"."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            raise serializers.ValidationError(StrictCharField.default_error_messages["not_a_string"])
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """JSON ``true`` or ``false`` only: DRF would also take 0, 1, "yes" and "off"."""

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


class StrictIntegerField(serializers.IntegerField):
    """A JSON whole number only: DRF would also take ``"60"``, ``60.0`` and ``true``."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictUUIDField(serializers.UUIDField):
    """A UUID written as a string: DRF would also take the number ``0`` (or ``false``) as UUID 0."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid", value=data)
        return super().to_internal_value(data)


class StrictSlugField(serializers.SlugField):
    def to_internal_value(self, data):
        if not isinstance(data, str):
            raise serializers.ValidationError(StrictCharField.default_error_messages["not_a_string"])
        return super().to_internal_value(data)


PRICE_PATTERN = re.compile(r"^[0-9]{1,8}(\.[0-9]{1,6})?$")


PRICE_SCHEMA = {"type": "string", "format": "decimal", "pattern": PRICE_PATTERN.pattern, "example": "0.15"}


@extend_schema_field(PRICE_SCHEMA)
class PriceField(serializers.DecimalField):
    """US dollars per million tokens, as a decimal string ("2.50"): never a float."""

    def __init__(self, **kwargs):
        super().__init__(max_digits=14, decimal_places=6, min_value=0, **kwargs)

    def validate_empty_values(self, data):
        if data == "":  # DRF would read it as null
            raise serializers.ValidationError('A decimal string, such as "2.50", or null.')
        return super().validate_empty_values(data)

    def to_internal_value(self, data):
        if not isinstance(data, str) or not PRICE_PATTERN.fullmatch(data):
            raise serializers.ValidationError('A decimal string of at most 6 decimal places, such as "2.50".')
        return super().to_internal_value(data)


class InstantField(serializers.DateTimeField):
    """RFC 3339 in UTC with a four-digit year: DATETIME_FORMAT's strftime writes the year 384 as
    "384", which no RFC 3339 parser reads. For instants a client chooses (prices' effective_from)."""

    def to_representation(self, value):
        if not value:
            return None
        return value.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


@extend_schema_field(
    {
        "type": "array",
        "nullable": True,
        "items": {
            "type": "string",
            "maxLength": MAX_PATTERN_LENGTH,
            "pattern": model_pattern_schema(PYTHON_SPACE),
            "example": "openai/gpt-4o*",
        },
        "maxItems": MAX_PATTERNS,
        "description": "Model aliases and provider/model names the caller may call; shell-style patterns "
        "(*, ?, [...]) allowed. Empty or null: no restriction. Narrows the lists above it, never "
        "widens them.",
    }
)
class ModelPatternsField(serializers.ListField):
    """A model allow-list (``apps/core/model_patterns.py``): strings here; what they may be is checked
    once, in the object's service (``checked_model_patterns``)."""

    def __init__(self, **kwargs):
        kwargs.setdefault("child", StrictCharField(max_length=MAX_PATTERN_LENGTH, allow_blank=False))
        kwargs.setdefault("required", False)
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)

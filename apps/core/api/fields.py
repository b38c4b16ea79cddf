import re

from rest_framework import serializers

REGION_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}$")


class DataRegionsField(serializers.ListField):
    """A list of data-region labels (``us``, ``eu``, ``us-east`` ...); empty means unrestricted."""

    def __init__(self, **kwargs):
        kwargs.setdefault("child", serializers.RegexField(REGION_PATTERN, max_length=32))
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

from collections.abc import Mapping

from rest_framework import serializers

from apps.core.errors import InvalidRequest

from .exceptions import validation_fields


class ClosedSerializer(serializers.Serializer):
    """Refuses a field it does not know: a misspelt name must not pass unnoticed as an absent one."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(str(name) for name in data if name not in self.fields)
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)


def validated(
    serializer_class: type[serializers.Serializer],
    data,
    *,
    partial: bool = False,
    context: Mapping | None = None,
) -> Mapping:
    """``data`` parsed by the serializer, for a service that takes raw input (the API's body, the
    admin's JSON field): refused as ``InvalidRequest`` with the fields and message the management API
    gives a serializer's errors, so the API answers the same whether the view or the service parsed.
    ``context``: what its fields read (the ``organization`` a scoped reference must belong to)."""
    serializer = serializer_class(data=data, partial=partial, context=dict(context or {}))
    if serializer.is_valid():
        return serializer.validated_data
    fields, message = validation_fields(serializer.errors)
    raise InvalidRequest(message, code="validation_error", param=next(iter(fields), None), fields=fields)

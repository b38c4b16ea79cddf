from rest_framework import serializers


class ClosedSerializer(serializers.Serializer):
    """Refuses a field it does not know: a misspelt name must not pass unnoticed as an absent one."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(str(name) for name in data if name not in self.fields)
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)

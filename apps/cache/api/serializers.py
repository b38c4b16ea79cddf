from rest_framework import serializers


class PurgeSerializer(serializers.Serializer):
    purged = serializers.BooleanField(read_only=True)

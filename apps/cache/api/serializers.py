from rest_framework import serializers


class CachePurgeSerializer(serializers.Serializer):
    purged = serializers.BooleanField(read_only=True)

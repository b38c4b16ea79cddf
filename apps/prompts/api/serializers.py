"""The shapes of /api/v1/prompt-templates. A version's input is the domain's (apps/prompts/inputs.py):
the service parses the body with it. The services check every other value again (and what a schema
cannot say: tags that compile, variables that agree with the messages, a version that exists)."""

from drf_spectacular.utils import extend_schema_field, extend_schema_serializer
from rest_framework import serializers

from apps.core.api.fields import StrictIntegerField, StrictUUIDField
from apps.core.api.serializers import ClosedSerializer
from apps.prompts.inputs import (
    VALUE_SCHEMA,
    DefaultsField,
    MessageSerializer,
    TemplateInputSerializer,
    VariableSerializer,
)
from apps.prompts.models import PromptLabel, PromptLabelMove, PromptTemplate, PromptVersion


class PromptTemplateSerializer(TemplateInputSerializer, serializers.ModelSerializer):
    labels = serializers.SerializerMethodField(help_text="Label name -> version number.")
    latest_version = serializers.SerializerMethodField(
        help_text="The newest version's number; null before the first."
    )

    class Meta:
        model = PromptTemplate
        fields = ("id", "slug", "name", "description", "labels", "latest_version", "created_at", "updated_at")
        read_only_fields = ("id", "created_at", "updated_at")

    @extend_schema_field({"type": "object", "additionalProperties": {"type": "integer"}})
    def get_labels(self, template: PromptTemplate) -> dict:
        return {label.name: label.version.number for label in template.labels.all()}

    def get_latest_version(self, template: PromptTemplate) -> int | None:
        latest = getattr(template, "latest_version", None)
        if latest is None and not hasattr(template, "latest_version"):
            latest = max((version.number for version in template.versions.all()), default=None)
        return latest


@extend_schema_serializer(component_name="PromptVersion")
class VersionSerializer(serializers.ModelSerializer):
    template_id = serializers.UUIDField(read_only=True)
    version = serializers.IntegerField(source="number", read_only=True)
    messages = MessageSerializer(many=True, read_only=True)
    variables = VariableSerializer(many=True, read_only=True)
    defaults = DefaultsField(read_only=True)
    created_by = serializers.EmailField(
        source="created_by.email", read_only=True, allow_null=True, default=None
    )

    class Meta:
        model = PromptVersion
        fields = (
            "id",
            "template_id",
            "version",
            "messages",
            "variables",
            "defaults",
            "note",
            "created_by",
            "created_at",
        )
        read_only_fields = fields


@extend_schema_serializer(component_name="PromptLabel")
class LabelSerializer(serializers.ModelSerializer):
    version = serializers.IntegerField(source="version.number", read_only=True)

    class Meta:
        model = PromptLabel
        fields = ("name", "version", "created_at", "updated_at")
        read_only_fields = fields


@extend_schema_serializer(component_name="PromptLabelSet")
class LabelSetSerializer(ClosedSerializer):
    version = StrictIntegerField(
        min_value=1, max_value=2**31 - 1, help_text="A version number of the template."
    )


@extend_schema_serializer(component_name="PromptLabelMove")
class LabelMoveSerializer(serializers.ModelSerializer):
    from_version = serializers.IntegerField(
        read_only=True, allow_null=True, help_text="Null: the label was set."
    )
    to_version = serializers.IntegerField(
        read_only=True, allow_null=True, help_text="Null: the label was removed."
    )
    moved_by = serializers.EmailField(source="moved_by.email", read_only=True, allow_null=True, default=None)
    moved_at = serializers.DateTimeField(source="created_at", read_only=True)

    class Meta:
        model = PromptLabelMove
        fields = ("label", "from_version", "to_version", "moved_by", "moved_at")
        read_only_fields = fields


@extend_schema_field(
    {
        "oneOf": [
            {"type": "integer", "minimum": 1},
            {"type": "string", "minLength": 1, "maxLength": 64, "description": "A label, or digits."},
        ]
    }
)
class VersionReferenceField(serializers.JSONField):
    pass


@extend_schema_field({"type": "object", "additionalProperties": VALUE_SCHEMA})
class VariablesField(serializers.JSONField):
    pass


@extend_schema_serializer(component_name="PromptRender")
class RenderSerializer(ClosedSerializer):
    version = VersionReferenceField(
        required=False, help_text='A version number or a label; default "production".'
    )
    variables = VariablesField(required=False)

    def validate_version(self, value):
        if isinstance(value, bool) or not (
            (isinstance(value, int) and value >= 1) or (isinstance(value, str) and 1 <= len(value) <= 64)
        ):
            raise serializers.ValidationError("A version number or a label.")
        return value

    def validate_variables(self, value):
        if not isinstance(value, dict):
            raise serializers.ValidationError("An object of variable names and values.")
        return value


@extend_schema_serializer(component_name="PromptRendered")
class RenderedSerializer(serializers.Serializer):
    template_id = StrictUUIDField()
    slug = serializers.CharField()
    version = serializers.IntegerField()
    label = serializers.CharField(allow_null=True)
    messages = MessageSerializer(many=True)
    defaults = DefaultsField()

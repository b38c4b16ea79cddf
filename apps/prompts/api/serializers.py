"""The shapes of /api/v1/prompt-templates. The services check every value again (and what a schema
cannot say: tags that compile, variables that agree with the messages, a version that exists)."""

from drf_spectacular.utils import extend_schema_field, extend_schema_serializer
from rest_framework import serializers

from apps.core.api.fields import StrictCharField, StrictIntegerField, StrictRegexField, StrictUUIDField
from apps.core.api.serializers import ClosedSerializer
from apps.prompts import services
from apps.prompts.models import PromptLabel, PromptLabelMove, PromptTemplate, PromptVersion
from apps.prompts.rendering import NAME_PATTERN

_NUMBER = {"type": "number"}
_OBJECT_WITH_TYPE = {
    "type": "object",
    "required": ["type"],
    "properties": {"type": {"type": "string"}},
    "additionalProperties": True,
}
_STRING = {"type": "string", "minLength": 1, "pattern": r"^[^\u0000]*$"}
DEFAULTS_SCHEMA = {
    "type": "object",
    "description": "Request parameters the version brings; a client's own values win.",
    "additionalProperties": False,
    "properties": {
        "model": {**_STRING, "maxLength": services.MODEL_LENGTH},
        "temperature": {**_NUMBER, "minimum": 0, "maximum": 2},
        "top_p": {**_NUMBER, "minimum": 0, "maximum": 1},
        "max_tokens": {"type": "integer", "minimum": 1, "maximum": 10_000_000},
        "max_completion_tokens": {"type": "integer", "minimum": 1, "maximum": 10_000_000},
        "frequency_penalty": {**_NUMBER, "minimum": -2, "maximum": 2},
        "presence_penalty": {**_NUMBER, "minimum": -2, "maximum": 2},
        "stop": {
            "oneOf": [
                {"type": "string", "minLength": 1},
                {"type": "array", "minItems": 1, "maxItems": 4, "items": {"type": "string", "minLength": 1}},
            ]
        },
        "seed": {"type": "integer", "minimum": -(2**63), "maximum": 2**63 - 1},
        "response_format": _OBJECT_WITH_TYPE,
        "tools": {
            "type": "array",
            "minItems": 1,
            "maxItems": services.TOOLS_LIMIT,
            "items": _OBJECT_WITH_TYPE,
        },
        "tool_choice": {
            "oneOf": [{"type": "string", "enum": ["none", "auto", "required"]}, _OBJECT_WITH_TYPE]
        },
        "parallel_tool_calls": {"type": "boolean"},
        "reasoning_effort": {"type": "string", "pattern": "^[a-z]{1,20}$"},
    },
}
assert tuple(DEFAULTS_SCHEMA["properties"]) == services.DEFAULT_PARAMETERS


@extend_schema_field(DEFAULTS_SCHEMA)
class DefaultsField(serializers.JSONField):
    pass


VALUE_SCHEMA = {
    "oneOf": [
        {"type": "string", "maxLength": services.VALUE_LENGTH, "pattern": r"^[^\u0000]*$"},
        {"type": "number"},
        {"type": "boolean"},
    ]
}


@extend_schema_field(VALUE_SCHEMA)
class VariableValueField(serializers.JSONField):
    pass


@extend_schema_serializer(component_name="PromptMessage")
class MessageSerializer(ClosedSerializer):
    role = serializers.ChoiceField(choices=services.ROLES)
    content = StrictCharField(
        max_length=services.CONTENT_LENGTH,
        trim_whitespace=False,
        help_text="Text with {{variable}} tags (docs/prompts.md).",
    )


@extend_schema_serializer(component_name="PromptVariable")
class VariableSerializer(ClosedSerializer):
    name = StrictRegexField(f"^{NAME_PATTERN}$", max_length=services.VARIABLE_NAME_LENGTH)
    default = VariableValueField(required=False, help_text="A string, a number or a boolean.")


class PromptTemplateSerializer(serializers.ModelSerializer):
    slug = StrictRegexField(
        f"^{services.SLUG_PATTERN.pattern}$",
        max_length=services.SLUG_LENGTH,
        help_text="Unique in the organization; what requests name the template by (or its id).",
    )
    name = StrictCharField(max_length=services.NAME_LENGTH)
    description = StrictCharField(max_length=services.DESCRIPTION_LENGTH, allow_blank=True, required=False)
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


@extend_schema_serializer(component_name="PromptVersionCreate")
class VersionCreateSerializer(ClosedSerializer):
    messages = serializers.ListField(
        child=MessageSerializer(), min_length=1, max_length=services.MESSAGES_LIMIT
    )
    variables = serializers.ListField(
        child=VariableSerializer(),
        max_length=services.VARIABLES_LIMIT,
        required=False,
        help_text="Exactly the variables the messages use, each with an optional default.",
    )
    defaults = DefaultsField(required=False)
    note = StrictCharField(max_length=services.NOTE_LENGTH, allow_blank=True, required=False)


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

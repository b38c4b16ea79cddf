"""A prompt template and a prompt version as they are written (the bodies of POST and PATCH
/api/v1/prompt-templates and of POST /api/v1/prompt-templates/{id}/versions, the admin's forms, the
console's): their types and shapes, defined once. ``template_create``, ``template_update`` and
``version_create`` parse their raw input with these before what a schema cannot say (a slug that is
no UUID and not taken; tags that compile, variables that agree with the messages and are declared
once, the defaults' values); the API's schema is written from them."""

import re

from drf_spectacular.utils import extend_schema_field, extend_schema_serializer
from rest_framework import serializers

from apps.core.api.fields import StrictCharField, StrictRegexField
from apps.core.api.serializers import ClosedSerializer

from .rendering import NAME_PATTERN

SLUG_PATTERN = re.compile(r"[a-z0-9][a-z0-9_-]{0,99}")
SLUG_LENGTH = 100
TEMPLATE_NAME_LENGTH = 200
DESCRIPTION_LENGTH = 5000

NOTE_LENGTH = 500
ROLES = ("system", "developer", "user", "assistant")
MESSAGES_LIMIT = 100
CONTENT_LENGTH = 100_000
VARIABLES_LIMIT = 100
VARIABLE_NAME_LENGTH = 64
VALUE_LENGTH = 100_000
TOOLS_LIMIT = 128
MODEL_LENGTH = 200

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
        "model": {**_STRING, "maxLength": MODEL_LENGTH},
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
            "maxItems": TOOLS_LIMIT,
            "items": _OBJECT_WITH_TYPE,
        },
        "tool_choice": {
            "oneOf": [{"type": "string", "enum": ["none", "auto", "required"]}, _OBJECT_WITH_TYPE]
        },
        "parallel_tool_calls": {"type": "boolean"},
        "reasoning_effort": {"type": "string", "pattern": "^[a-z]{1,20}$"},
    },
}
# The request parameters a version may bring (the client's values win); the service checks their values.
DEFAULT_PARAMETERS = tuple(DEFAULTS_SCHEMA["properties"])


@extend_schema_field(DEFAULTS_SCHEMA)
class DefaultsField(serializers.JSONField):
    def to_internal_value(self, data):
        if not isinstance(data, dict):
            raise serializers.ValidationError("An object of request parameters.")
        return super().to_internal_value(data)


VALUE_SCHEMA = {
    "oneOf": [
        {"type": "string", "maxLength": VALUE_LENGTH, "pattern": r"^[^\u0000]*$"},
        {"type": "number"},
        {"type": "boolean"},
    ]
}


@extend_schema_field(VALUE_SCHEMA)
class VariableValueField(serializers.JSONField):
    pass


@extend_schema_serializer(component_name="PromptMessage")
class MessageSerializer(ClosedSerializer):
    role = serializers.ChoiceField(choices=ROLES)
    content = StrictCharField(
        max_length=CONTENT_LENGTH,
        trim_whitespace=False,
        help_text="Text with {{variable}} tags (docs/prompts.md).",
    )


@extend_schema_serializer(component_name="PromptVariable")
class VariableSerializer(ClosedSerializer):
    name = StrictRegexField(f"^{NAME_PATTERN}$", max_length=VARIABLE_NAME_LENGTH)
    default = VariableValueField(required=False, help_text="A string, a number or a boolean.")


@extend_schema_serializer(component_name="PromptVersionCreate")
class VersionCreateSerializer(ClosedSerializer):
    messages = serializers.ListField(child=MessageSerializer(), min_length=1, max_length=MESSAGES_LIMIT)
    variables = serializers.ListField(
        child=VariableSerializer(),
        max_length=VARIABLES_LIMIT,
        required=False,
        help_text="Exactly the variables the messages use, each with an optional default.",
    )
    defaults = DefaultsField(required=False)
    note = StrictCharField(max_length=NOTE_LENGTH, allow_blank=True, required=False)


# A template's writable fields; the API's PromptTemplateSerializer is these and the read-only ones.
# Not closed: the API has always passed over a field it does not know here. (No docstring: the API's
# schema would take it as its component's description.)
class TemplateInputSerializer(serializers.Serializer):
    slug = StrictRegexField(
        f"^{SLUG_PATTERN.pattern}$",
        max_length=SLUG_LENGTH,
        help_text="Unique in the organization; what requests name the template by (or its id).",
    )
    name = StrictCharField(max_length=TEMPLATE_NAME_LENGTH)
    description = StrictCharField(max_length=DESCRIPTION_LENGTH, allow_blank=True, required=False)

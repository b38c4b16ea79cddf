"""An experiment as it is written (the body of POST and PATCH /api/v1/experiments, the admin's form):
its types and shapes, defined once. The services parse their raw input with these
(``experiment_create``, ``experiment_update``) before the rules a schema cannot say (a model the
organization has, a version the template has, distinct names, weights that sum to more than 0, the
parameters' values); the API's schema is written from them."""

import re

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.core.api.fields import StrictCharField, StrictIntegerField, StrictRegexField
from apps.core.api.serializers import ClosedSerializer

NAME_LENGTH = 200
VARIANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
VARIANTS_MIN, VARIANTS_MAX = 2, 20
WEIGHT_MAX = 1_000_000
REFERENCE_LENGTH = 200

# Printable (str.isprintable): the schema states the control characters; the other characters Python's
# Unicode tables call unprintable (format, separators, unassigned) are left to the 400.
_NAME = {
    "type": "string",
    "minLength": 1,
    "maxLength": REFERENCE_LENGTH,
    "pattern": r"^[^\u0000-\u001f\u007f-\u009f]*$",
}
TARGET_SCHEMA = {
    "oneOf": [
        {
            "type": "object",
            "required": ["model"],
            "additionalProperties": False,
            "properties": {"model": _NAME},
        },
        {
            "type": "object",
            "required": ["prompt"],
            "additionalProperties": False,
            "properties": {"prompt": _NAME},
        },
    ],
    "description": (
        'The traffic the experiment splits: {"model": "<alias>"} or {"prompt": "<template slug or id>"}.'
    ),
}
_NUMBER = {"type": "number"}
PARAMETERS_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "description": "Request parameters the variant sets; they replace the client's.",
    "properties": {
        "temperature": {**_NUMBER, "minimum": 0, "maximum": 2},
        "top_p": {**_NUMBER, "minimum": 0, "maximum": 1},
        "max_tokens": {"type": "integer", "minimum": 1, "maximum": 10_000_000},
        "max_completion_tokens": {"type": "integer", "minimum": 1, "maximum": 10_000_000},
        "frequency_penalty": {**_NUMBER, "minimum": -2, "maximum": 2},
        "presence_penalty": {**_NUMBER, "minimum": -2, "maximum": 2},
        "seed": {"type": "integer", "minimum": -(2**63), "maximum": 2**63 - 1},
        "reasoning_effort": {"type": "string", "pattern": "^[a-z]{1,20}$"},
    },
    "not": {"required": ["max_tokens", "max_completion_tokens"]},
}
# The request parameters a variant may set (they replace the client's); the service checks their
# values as a prompt version's defaults are checked.
PARAMETERS = tuple(PARAMETERS_SCHEMA["properties"])


@extend_schema_field(TARGET_SCHEMA)
class TargetField(serializers.JSONField):
    def to_internal_value(self, data):
        if not isinstance(data, dict) or len(data) != 1 or not data.keys() <= {"model", "prompt"}:
            raise serializers.ValidationError(
                'Exactly one of {"model": "<alias>"} or {"prompt": "<slug or id>"}.'
            )
        ((kind, reference),) = data.items()
        # Printable only: a NUL or a lone surrogate cannot even be sent to PostgreSQL in a query.
        if (
            not isinstance(reference, str)
            or not reference
            or len(reference) > REFERENCE_LENGTH
            or not reference.isprintable()
        ):
            raise serializers.ValidationError({kind: ["A name of 1 to 200 printable characters."]})
        return {kind: reference}


@extend_schema_field(PARAMETERS_SCHEMA)
class ParametersField(serializers.JSONField):
    def to_internal_value(self, data):
        if not isinstance(data, dict):
            raise serializers.ValidationError("An object of request parameters.")
        return super().to_internal_value(data)


class VariantInputSerializer(ClosedSerializer):
    name = StrictRegexField(VARIANT_NAME.pattern, max_length=100)
    weight = StrictIntegerField(min_value=0, max_value=WEIGHT_MAX)
    model = StrictCharField(max_length=200, required=False)
    prompt_version = StrictIntegerField(min_value=1, required=False, allow_null=True)
    parameters = ParametersField(required=False)


class ExperimentInputSerializer(ClosedSerializer):
    name = StrictCharField(max_length=NAME_LENGTH)
    target = TargetField()
    variants = serializers.ListField(
        child=VariantInputSerializer(), min_length=VARIANTS_MIN, max_length=VARIANTS_MAX
    )

"""The shapes of /api/v1/experiments and /api/v1/feedback. The services check every value again (and
what a schema cannot say: a model the organization has, a version the template has, weights that
sum to more than 0)."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.core.api.fields import StrictCharField, StrictIntegerField, StrictRegexField, StrictUUIDField
from apps.core.api.serializers import ClosedSerializer
from apps.experiments import services
from apps.experiments.models import Experiment, Feedback, PendingFeedback, Variant

_NAME = {"type": "string", "minLength": 1, "maxLength": 200, "pattern": r"^[^\u0000]*$"}
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
assert tuple(PARAMETERS_SCHEMA["properties"]) == services.PARAMETERS


@extend_schema_field(TARGET_SCHEMA)
class TargetField(serializers.JSONField):
    def to_internal_value(self, data):
        if not isinstance(data, dict) or len(data) != 1 or not data.keys() <= {"model", "prompt"}:
            raise serializers.ValidationError(
                'Exactly one of {"model": "<alias>"} or {"prompt": "<slug or id>"}.'
            )
        return super().to_internal_value(data)


@extend_schema_field(PARAMETERS_SCHEMA)
class ParametersField(serializers.JSONField):
    def to_internal_value(self, data):
        if not isinstance(data, dict):
            raise serializers.ValidationError("An object of request parameters.")
        return super().to_internal_value(data)


class VariantInputSerializer(ClosedSerializer):
    name = StrictRegexField(services.VARIANT_NAME.pattern, max_length=100)
    weight = StrictIntegerField(min_value=0, max_value=services.WEIGHT_MAX)
    model = StrictCharField(max_length=200, required=False)
    prompt_version = StrictIntegerField(min_value=1, required=False, allow_null=True)
    parameters = ParametersField(required=False)


class ExperimentInputSerializer(ClosedSerializer):
    name = StrictCharField(max_length=services.NAME_LENGTH)
    target = TargetField()
    variants = serializers.ListField(
        child=VariantInputSerializer(), min_length=services.VARIANTS_MIN, max_length=services.VARIANTS_MAX
    )


class VariantSerializer(serializers.ModelSerializer):
    model = serializers.SerializerMethodField()

    class Meta:
        model = Variant
        fields = ("name", "weight", "model", "prompt_version", "parameters")

    def get_model(self, variant) -> str | None:
        return variant.model or None


class ExperimentSerializer(serializers.ModelSerializer):
    target = serializers.SerializerMethodField()
    variants = VariantSerializer(many=True, read_only=True)
    winner = serializers.SerializerMethodField()

    class Meta:
        model = Experiment
        fields = (
            "id",
            "name",
            "target",
            "status",
            "variants",
            "started_at",
            "completed_at",
            "winner",
            "promoted_at",
            "promoted_by",
            "promotion",
            "created_at",
            "updated_at",
        )
        read_only_fields = fields

    @extend_schema_field(TARGET_SCHEMA)
    def get_target(self, experiment) -> dict:
        return services.target_of(experiment)

    def get_winner(self, experiment) -> str | None:
        return experiment.winner.name if experiment.winner_id else None


class PromoteSerializer(ClosedSerializer):
    variant = StrictRegexField(services.VARIANT_NAME.pattern, max_length=100)


class FeedbackInputSerializer(serializers.Serializer):
    # Open, as the schema says: an application's extra fields are ignored, not refused.
    request_id = StrictUUIDField()
    score = serializers.FloatField(
        required=False, min_value=-services.SCORE_LIMIT, max_value=services.SCORE_LIMIT
    )
    label = StrictCharField(max_length=services.LABEL_LENGTH, required=False)
    comment = StrictCharField(
        max_length=services.COMMENT_LENGTH, required=False, allow_blank=True, trim_whitespace=False
    )

    def validate_score(self, value):
        if isinstance(self.initial_data.get("score"), bool | str):
            raise serializers.ValidationError("A number.")
        return value


class FeedbackSerializer(serializers.ModelSerializer):
    status = serializers.SerializerMethodField(help_text="recorded: the request's feedback, as it now is.")

    class Meta:
        model = Feedback
        fields = (
            "id",
            "status",
            "request_id",
            "score",
            "label",
            "comment",
            "api_key_id",
            "user",
            "created_at",
            "updated_at",
        )
        read_only_fields = fields

    def get_status(self, _) -> str:
        return "recorded"


class PendingFeedbackSerializer(serializers.ModelSerializer):
    """What a post on a request whose audit entry is not written yet sent, as it waits (202): the
    ``id`` is the post's, not the feedback's; fields not sent are null."""

    status = serializers.SerializerMethodField(
        help_text="pending: attached when the request's entry is written."
    )

    class Meta:
        model = PendingFeedback
        fields = (
            "id",
            "status",
            "request_id",
            "score",
            "label",
            "comment",
            "api_key_id",
            "user",
            "created_at",
        )
        read_only_fields = fields

    def get_status(self, _) -> str:
        return "pending"
